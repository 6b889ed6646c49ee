"""Query-string filters of the token listing."""

from __future__ import annotations

import django_filters

from common.filters import IdentifierFilter, StrictChoiceFilter
from common.rules import CURRENCY_MAX_LENGTH
from tokens.models import Token, TokenQuerySet

BOOLEAN_CHOICES = [("true", "true"), ("false", "false")]


class TokenFilter(django_filters.FilterSet):
    """Filter by wallet, currency and whether the token is spent."""

    wallet = IdentifierFilter()
    currency = IdentifierFilter(max_length=CURRENCY_MAX_LENGTH)
    # A choice (not BooleanFilter) so that "spent=maybe" is an error rather than ignored.
    spent = StrictChoiceFilter(choices=BOOLEAN_CHOICES, method="filter_spent")

    class Meta:
        model = Token
        fields = ["wallet", "currency", "spent"]

    def filter_spent(self, queryset: TokenQuerySet, name: str, value: str) -> TokenQuerySet:
        return queryset.spent() if value == "true" else queryset.unspent()
