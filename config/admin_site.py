"""The admin site: changelists that answer any search or filter text, and the wallet page.

Operators paste whatever they have into search boxes and filters: ids, names, text copied
from logs. A value that cannot be stored (NUL: PostgreSQL text never holds it) or that does
not fit a filter's type (``²`` for a boolean) can match nothing, so every changelist of this
site answers it with an empty page, never a server error or a redirect. The site wraps every
admin registered on it, Sherdlock's and third-party ones alike.
"""

from __future__ import annotations

import functools
import types

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import FieldDoesNotExist, FieldError
from django.urls import path, register_converter

NUL = "\x00"


class AnyTextConverter:
    """Any non-empty text, "/" and line breaks included: a wallet is whatever was issued to."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnyTextConverter, "anytext")


ISNULL_VALUES = {"", "true", "false", "1", "0"}


class InputSafeChangeList:
    """A changelist mixin: impossible or ill-typed filter and search values match nothing.

    A value matches nothing when it holds NUL, when a filter cannot read it as its type (a
    boolean, a date, an id), when a filter with fixed choices does not offer it, or when an
    ``__isnull`` parameter is neither true nor false. A filter whose value is matched against
    the data, not against its choices, says so with ``free_text = True``. An unknown parameter
    is still Django's business: it redirects to the unfiltered list.
    """

    filter_specs: list[admin.ListFilter]  # Django's ChangeList, which this is mixed into, sets it

    def get_queryset(self, request, exclude_parameters=None):
        try:
            queryset = super().get_queryset(request, exclude_parameters)
        except IncorrectLookupParameters as exc:
            cause = exc.args[0] if exc.args else None
            if not hasattr(self, "filter_specs") or isinstance(
                cause, FieldError | FieldDoesNotExist
            ):
                raise
            self.clear_all_filters_qs = self.get_query_string(remove=self.get_filters_params())
            return self.root_queryset.none()
        if self.matches_nothing(request):
            return queryset.none()
        return queryset

    def matches_nothing(self, request) -> bool:
        # Django's search form already refuses NUL with a message (and then searches for
        # nothing); filters would send it to PostgreSQL, which rejects it.
        if any(NUL in value for _, values in request.GET.lists() for value in values):
            return True
        for spec in self.filter_specs:
            if isinstance(spec, admin.SimpleListFilter) and not getattr(spec, "free_text", False):
                value = spec.value()
                if value is not None and value not in {str(v) for v, _ in spec.lookup_choices}:
                    return True
        return any(
            key.endswith("__isnull") and value.lower() not in ISNULL_VALUES
            for key, value in request.GET.items()
        )


@functools.cache
def input_safe_changelist(base: type) -> type:
    """Return ``base`` (a ChangeList class) with InputSafeChangeList mixed in."""
    if issubclass(base, InputSafeChangeList):
        return base
    safe = types.new_class(f"InputSafe{base.__name__}", (InputSafeChangeList, base))
    safe.__module__ = __name__
    return safe


class InputSafeAdmin:
    """A ModelAdmin mixin that makes its changelist an InputSafeChangeList."""

    def get_changelist(self, request, **kwargs):
        return input_safe_changelist(super().get_changelist(request, **kwargs))


def input_safe(admin_class: type) -> type:
    """Return ``admin_class`` with InputSafeAdmin mixed in (itself if it has it already)."""
    if issubclass(admin_class, InputSafeAdmin):
        return admin_class
    safe = types.new_class(admin_class.__name__, (InputSafeAdmin, admin_class))
    safe.__module__, safe.__qualname__ = admin_class.__module__, admin_class.__qualname__
    safe.__doc__ = admin_class.__doc__
    return safe


class SherdlockAdminSite(admin.AdminSite):
    """``admin.site``: every registered admin input-safe, plus the wallet page."""

    # Django's index with the service's pages first (locks/templates): a name of its own, so
    # it is found whatever the order of the apps' template directories.
    index_template = "admin/sherdlock_index.html"

    def register(self, model_or_iterable, admin_class=None, **options):
        super().register(model_or_iterable, input_safe(admin_class or admin.ModelAdmin), **options)

    def get_urls(self):
        from locks.admin_wallet import wallet_view

        # Before the site's own patterns, whose app-index catch-all would take "wallets/".
        return [
            path("wallets/<anytext:wallet>/", self.admin_view(wallet_view), name="wallet"),
            *super().get_urls(),
        ]
