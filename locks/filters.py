"""Query-string filters of the selection and lock listings."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.db.models.functions import Now

from common.filters import IdentifierFilter, StrictChoiceFilter
from common.rules import CURRENCY_MAX_LENGTH
from locks.models import Selection, SelectionQuerySet, TokenLock


class SelectionFilter(django_filters.FilterSet):
    """Filter selections by wallet, currency and status."""

    wallet = IdentifierFilter()
    currency = IdentifierFilter(max_length=CURRENCY_MAX_LENGTH)
    status = StrictChoiceFilter(choices=Selection.Status.choices, method="filter_status")

    class Meta:
        model = Selection
        fields = ["wallet", "currency", "status"]

    def filter_status(
        self, queryset: SelectionQuerySet, name: str, value: str
    ) -> SelectionQuerySet:
        return queryset.reported(value)


class LockFilter(django_filters.FilterSet):
    """Filter locks by their token's wallet and currency, the spender, and liveness."""

    wallet = IdentifierFilter(field_name="token__wallet")
    currency = IdentifierFilter(field_name="token__currency", max_length=CURRENCY_MAX_LENGTH)
    spender_tx_id = IdentifierFilter()
    state = StrictChoiceFilter(
        choices=[("live", "live"), ("expired", "expired")], method="filter_state"
    )

    class Meta:
        model = TokenLock
        fields = ["wallet", "currency", "spender_tx_id", "state"]

    def filter_state(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        if value == "live":
            return queryset.filter(expires_at__gt=Now())
        return queryset.filter(expires_at__lte=Now())
