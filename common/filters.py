"""Query-string filters that refuse what they cannot apply instead of ignoring it.

django-filter skips a parameter that is present but empty (``?status=``) and forms strip
whitespace; here a given parameter must be valid or the request is a 400, as the schema says.
"""

from __future__ import annotations

import django_filters
from django import forms
from django_filters.fields import ChoiceField
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.drainage import set_override
from rest_framework.exceptions import ValidationError

from common.rules import ID_MAX_LENGTH, identifier_schema, is_identifier

EMPTY = "Must not be empty; leave the parameter out to not filter."


def query_param(request, name: str) -> str | None:
    """Return the query parameter ``name`` (None if absent); refuse it if given twice.

    No parameter of the API is a list: a repeat would otherwise silently mean its last value.
    """
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ValidationError({name: ["Give this parameter at most once."]})
    return values[0] if values else None


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter's backend, refusing a filter parameter given more than once."""

    def get_filterset_kwargs(self, request, queryset, view) -> dict:
        filterset_class = self.get_filterset_class(view, queryset)
        for name in getattr(filterset_class, "base_filters", {}):
            query_param(request, name)
        return super().get_filterset_kwargs(request, queryset, view)


class IdentifierFormField(forms.CharField):
    """A name as the API accepts it in bodies (absent: no filter)."""

    def __init__(self, *args, max_length: int = ID_MAX_LENGTH, **kwargs) -> None:
        kwargs.update(strip=False, required=False)
        super().__init__(*args, max_length=max_length, **kwargs)

    def clean(self, value):
        if value is None:
            return None
        if value == "":
            raise forms.ValidationError(EMPTY, code="blank")
        if not is_identifier(value, max_length=self.max_length):
            raise forms.ValidationError(
                f"Must be 1 to {self.max_length} characters, no control characters, not only "
                "whitespace.",
                code="invalid",
            )
        return value


class IdentifierFilter(django_filters.CharFilter):
    """Filter by a name; the schema publishes the same rule the server applies."""

    field_class = IdentifierFormField

    def __init__(self, *args, max_length: int = ID_MAX_LENGTH, **kwargs) -> None:
        super().__init__(*args, max_length=max_length, **kwargs)
        set_override(self, "field", identifier_schema(max_length))


class StrictChoiceField(ChoiceField):
    def clean(self, value):
        if value == "":
            raise forms.ValidationError(EMPTY, code="blank")
        return super().clean(value)


class StrictChoiceFilter(django_filters.ChoiceFilter):
    """Filter by one of a few values; an empty or unknown value is a 400."""

    field_class = StrictChoiceField
