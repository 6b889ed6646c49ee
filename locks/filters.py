"""Query-string filters of the selection and lock listings."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.db.models.functions import Now

from locks.models import Selection, TokenLock
from tokens.models import CURRENCY_MAX_LENGTH, ID_MAX_LENGTH


class SelectionFilter(django_filters.FilterSet):
    """Filter selections by wallet, currency and status."""

    wallet = django_filters.CharFilter(max_length=ID_MAX_LENGTH)
    currency = django_filters.CharFilter(max_length=CURRENCY_MAX_LENGTH)
    status = django_filters.ChoiceFilter(choices=Selection.Status.choices,
                                         method="filter_status")

    class Meta:
        model = Selection
        fields = ["wallet", "currency", "status"]


    def filter_status(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.reported(value)


class LockFilter(django_filters.FilterSet):
    """Filter locks by their token's wallet and currency, the spender, and liveness."""

    wallet = django_filters.CharFilter(field_name="token__wallet", max_length=ID_MAX_LENGTH)
    currency = django_filters.CharFilter(field_name="token__currency",
                                         max_length=CURRENCY_MAX_LENGTH)
    spender_tx_id = django_filters.CharFilter(max_length=ID_MAX_LENGTH)
    state = django_filters.ChoiceFilter(choices=[("live", "live"), ("expired", "expired")],
                                        method="filter_state")

    class Meta:
        model = TokenLock
        fields = ["wallet", "currency", "spender_tx_id", "state"]

    def filter_state(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        if value == "live":
            return queryset.filter(expires_at__gt=Now())
        return queryset.filter(expires_at__lte=Now())
