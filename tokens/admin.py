"""Token admin pieces: index-friendly search and filters that stay cheap at a million rows.

The token admin itself shows each token's lock, so it is registered by the locks app
(``locks.admin_tokens``), which also reuses these pieces for the lock table.
"""

from __future__ import annotations

import functools
from urllib.parse import quote

from django.contrib import admin
from django.core.cache import cache
from django.db.models import Q
from django.urls import get_script_prefix, reverse
from django.utils.html import format_html
from django.utils.http import RFC3986_SUBDELIMS

from tokens.models import Token

CURRENCIES_CACHE_KEY = "admin:token-currencies"
CURRENCIES_CACHE_SECONDS = 60


def wallet_q(wallet: str, prefix: str = "") -> Q:
    """Match tokens of ``wallet``, spent or not: one read of the wallet index (token_by_wallet)."""
    return Q(**{f"{prefix}wallet": wallet})


@functools.lru_cache(maxsize=8)
def _wallet_pages(script_prefix: str) -> str:
    # reverse() costs a third of a millisecond; a list shows a hundred wallets.
    return reverse("admin:wallet", args=["-"]).removesuffix("-/")


def wallet_url(wallet: str) -> str:
    """Return the URL of the wallet's admin page: what reverse() gives, without its cost."""
    return f"{_wallet_pages(get_script_prefix())}{quote(wallet, safe=RFC3986_SUBDELIMS + '/~:@')}/"


def wallet_link(wallet: str) -> str:
    """Link to the wallet's page in the admin."""
    return format_html('<a href="{}" class="wallet-link">{}</a>', wallet_url(wallet), wallet)


def small_int(text: str, digits: int = 18) -> int | None:
    """Return ``text`` as an integer if it is 1 to ``digits`` ASCII digits, else None.

    Not ``str.isdigit``: it also accepts "²" and other digits that ``int`` refuses.
    """
    if 0 < len(text) <= digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def token_identity_q(term: str, prefix: str = "") -> Q:
    """Match a token by exact transaction id, ``tx_id:index`` or primary key."""
    query = Q(**{f"{prefix}tx_id": term})
    tx_id, _, index = term.rpartition(":")
    index_number = small_int(index, digits=9)  # fits the integer column
    if tx_id and index_number is not None:
        query |= Q(**{f"{prefix}tx_id": tx_id, f"{prefix}index": index_number})
    pk = small_int(term)  # fits a bigint
    if pk is not None:
        query |= Q(**{f"{prefix}pk": pk})
    return query


def known_currencies() -> list[str]:
    """Return the currencies that have unspent tokens, cached briefly.

    DISTINCT over the unspent partial index still reads every entry of it, so filters reuse
    one answer for a minute instead of paying that on each page load.
    """
    currencies = cache.get(CURRENCIES_CACHE_KEY)
    if currencies is None:
        currencies = list(
            Token.objects.unspent()
            .order_by("currency")
            .values_list("currency", flat=True)
            .distinct()
        )
        cache.set(CURRENCIES_CACHE_KEY, currencies, CURRENCIES_CACHE_SECONDS)
    return currencies


class CurrencyFilter(admin.SimpleListFilter):
    """Filter by currency without a DISTINCT scan of the table on every load."""

    title = "currency"
    parameter_name = "currency"
    field = "currency"
    # Matched against the tokens, not the (cached) list of choices: a currency issued since
    # the list was cached is still found.
    free_text = True

    def lookups(self, request, model_admin):
        return [(currency, currency) for currency in known_currencies()]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(**{self.field: self.value()})
        return queryset


class SpentFilter(admin.SimpleListFilter):
    title = "spent"
    parameter_name = "spent"

    def lookups(self, request, model_admin):
        return [("no", "unspent"), ("yes", "spent")]

    def queryset(self, request, queryset):
        if self.value() == "no":
            return queryset.filter(spent_at__isnull=True)
        if self.value() == "yes":
            # No index of spent tokens alone: the list walks the primary key newest first, and
            # spent tokens are most of the table in a service that spends (a spend's inputs stay).
            return queryset.filter(spent_at__isnull=False)
        return queryset
