"""Token admin: index-friendly search and filters that stay cheap at a million rows."""

from __future__ import annotations

import functools
from decimal import Decimal
from urllib.parse import quote

from django.contrib import admin
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import RFC3986_SUBDELIMS

from locks.pagination import EstimatedCountPaginator
from tokens import supply
from tokens.admin_views import mark_unspent_view
from tokens.models import Token

CURRENCIES_CACHE_KEY = "admin:token-currencies"
CURRENCIES_CACHE_SECONDS = 60
IDENTITY_FIELDS = ("tx_id", "index", "wallet", "currency", "quantity")


def wallet_q(wallet: str, prefix: str = "") -> Q:
    """Match tokens of ``wallet`` in a way the planner can serve from indexes.

    Only unspent tokens have a wallet index (the selector's partial index); spent ones are
    reached through the partial ``spent_by`` index. The two halves cover every token because
    ``spent_by`` and ``spent_at`` are set together.
    """
    return (Q(**{f"{prefix}wallet": wallet, f"{prefix}spent_at__isnull": True})
            | Q(**{f"{prefix}wallet": wallet, f"{prefix}spent_by__isnull": False}))


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


def locked_unspent(ids) -> dict[str, Decimal]:
    """Lock the tokens ``ids`` (a list or a subquery) and sum the unspent ones per currency."""
    return supply.unspent_by_currency(
        Token.objects.select_for_update().filter(pk__in=ids).order_by("pk")
        .only("currency", "quantity", "spent_at"))


def known_currencies() -> list[str]:
    """Return the currencies that have unspent tokens, cached briefly.

    DISTINCT over the unspent partial index still reads every entry of it, so filters reuse
    one answer for a minute instead of paying that on each page load.
    """
    currencies = cache.get(CURRENCIES_CACHE_KEY)
    if currencies is None:
        currencies = list(Token.objects.unspent().order_by("currency")
                          .values_list("currency", flat=True).distinct())
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
            # spent_by, not spent_at: only spent_by has a partial index over spent tokens.
            return queryset.filter(spent_by__isnull=False)
        return queryset


class LockedFilter(admin.SimpleListFilter):
    title = "lock"
    parameter_name = "locked"

    def lookups(self, request, model_admin):
        return [("yes", "locked (live lock)"), ("no", "unlocked")]

    def queryset(self, request, queryset):
        from locks.models import TokenLock

        live = Exists(TokenLock.objects.filter(token=OuterRef("pk"), expires_at__gt=Now()))
        if self.value() == "yes":
            return queryset.filter(live)
        if self.value() == "no":
            return queryset.filter(~live)
        return queryset


@admin.register(Token)
class TokenAdmin(admin.ModelAdmin):
    list_display = ["identity", "wallet_display", "currency", "quantity", "created_at",
                    "spent_by", "lock_link"]
    list_filter = [CurrencyFilter, SpentFilter, LockedFilter]
    list_select_related = ["lock"]
    # Matched exactly (see get_search_results): "=" would mean iexact, which no index serves.
    search_fields = ["tx_id", "wallet"]
    search_help_text = "Exact transaction id, tx_id:index, token id or wallet."
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["mark_unspent"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return list(IDENTITY_FIELDS)  # a token is issued unspent
        return [*IDENTITY_FIELDS, "created_at", "spent_by", "spent_at", "lock_link"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # Nothing of a stored token is edited here. Its spent state above all: a form opened
        # before a spend and saved after it would un-spend the token while the spend's outputs
        # exist. Corrections go through the audited action.
        return [*IDENTITY_FIELDS, "created_at", "spent_by", "spent_at", "lock_link"]

    @admin.action(description="Mark selected tokens unspent (audited correction)",
                  permissions=["change"])
    def mark_unspent(self, request, queryset):
        return mark_unspent_view(self, request, queryset)

    def get_ordering(self, request):
        if request.GET.get(SEARCH_VAR, "").strip():
            # A wallet's or a transaction's tokens sit together in id order, so walking the
            # primary key backwards to the first page of matches can read most of the table.
            # Ordering by an expression (same order) makes PostgreSQL fetch the matches through
            # their indexes and sort just those.
            return [(F("id") + 0).desc()]
        return super().get_ordering(request)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(token_identity_q(term) | wallet_q(term)), False

    # The supply summary (tokens.supply) must stay exact: a token added here is issued, one
    # whose spent state is changed here leaves or rejoins the unspent supply, and a deleted
    # one leaves it. Each is counted in the transaction that writes the token, from the rows
    # as locked, so a spend racing with the change cannot make it count a token twice.
    def save_model(self, request, obj, form, change):
        with transaction.atomic():
            before = locked_unspent([obj.pk]) if change else {}
            super().save_model(request, obj, form, change)
            after = supply.unspent_by_currency([obj])
            supply.add({currency: after.get(currency, 0) - before.get(currency, 0)
                        for currency in {*before, *after}})

    def delete_model(self, request, obj):
        with transaction.atomic():
            removed = locked_unspent([obj.pk])
            super().delete_model(request, obj)
            supply.add({currency: -value for currency, value in removed.items()})

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            removed = locked_unspent(queryset.values("pk"))
            super().delete_queryset(request, queryset)
            supply.add({currency: -value for currency, value in removed.items()})

    @admin.display(description="token", ordering="pk")
    def identity(self, obj: Token) -> str:
        return str(obj)

    @admin.display(description="wallet", ordering="wallet")
    def wallet_display(self, obj: Token) -> str:
        return wallet_link(obj.wallet)

    @admin.display(description="lock")
    def lock_link(self, obj: Token) -> str:
        lock = getattr(obj, "lock", None)  # cached by select_related: no query per row
        if lock is None:
            return "-"
        if obj.spent_at is not None:
            state = "token spent"
        elif lock.expires_at <= timezone.now():
            state = "expired"
        else:
            state = "live"
        url = reverse("admin:locks_tokenlock_change", args=[lock.pk])
        return format_html('<a href="{}">{} by {}</a>', url, state, lock.spender_tx_id)

