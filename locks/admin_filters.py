"""The filters of the admin's lock and selection changelists.

A lock is filtered by its state, currency, wallet and age, a selection by its lease. A lock's
wallet is typed in a box (``InputFilter``), not picked from one link per distinct value.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin
from django.db.models import Q
from django.db.models.functions import Now

from locks.models import Selection
from tokens.admin import CurrencyFilter, wallet_q


class InputFilter(admin.SimpleListFilter):
    """A free-text filter: a box instead of one link per distinct value."""

    template = "admin/input_filter.html"
    free_text = True  # any value is matched against the data (see config.admin_site)

    def lookups(self, request, model_admin):
        return [("", "")]  # one placeholder so the filter is rendered

    def choices(self, changelist):
        # The form submits only this box: carry every other parameter along as hidden inputs.
        yield {
            "value": self.value() or "",
            "hidden": [(k, v) for k, v in changelist.params.items() if k != self.parameter_name],
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }


class LockWalletFilter(InputFilter):
    title = "wallet"
    parameter_name = "wallet"

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(wallet_q(self.value().strip(), prefix="token__"))
        return queryset


class LockCurrencyFilter(CurrencyFilter):
    field = "token__currency"


class LockStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("live", "live"), ("expired", "expired"), ("spent", "token spent")]

    def queryset(self, request, queryset):
        if self.value() == "live":
            return queryset.filter(expires_at__gt=Now(), token__spent_at__isnull=True)
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=Now(), token__spent_at__isnull=True)
        if self.value() == "spent":
            return queryset.filter(token__spent_at__isnull=False)
        return queryset


AGE_BUCKETS = {
    "10s": ("under 10 s", None, timedelta(seconds=10)),
    "1m": ("10 s to 1 min", timedelta(seconds=10), timedelta(minutes=1)),
    "10m": ("1 to 10 min", timedelta(minutes=1), timedelta(minutes=10)),
    "old": ("over 10 min", timedelta(minutes=10), None),
}


class AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "age"

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _, _) in AGE_BUCKETS.items()]

    def queryset(self, request, queryset):
        if self.value() not in AGE_BUCKETS:
            return queryset
        _, youngest, oldest = AGE_BUCKETS[self.value()]
        if youngest is not None:
            queryset = queryset.filter(created_at__lte=Now() - youngest)
        if oldest is not None:
            queryset = queryset.filter(created_at__gt=Now() - oldest)
        return queryset


class LeaseFilter(admin.SimpleListFilter):
    title = "lease"
    parameter_name = "lease"

    def lookups(self, request, model_admin):
        return [
            ("live", "live"),
            ("expired", "expired"),
            ("spent", "spent"),
            ("released", "released"),
        ]

    def queryset(self, request, queryset):
        locked = Q(status=Selection.Status.LOCKED)
        if self.value() == "live":
            return queryset.filter(locked, expires_at__gt=Now())
        if self.value() == "expired":
            return queryset.filter(locked & (Q(expires_at__lte=Now()) | Q(expires_at__isnull=True)))
        if self.value() in ("spent", "released"):
            return queryset.filter(status=self.value())
        return queryset
