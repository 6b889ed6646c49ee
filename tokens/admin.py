"""Token admin: index-friendly search and filters that stay cheap at a million rows."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.cache import cache
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from locks.pagination import EstimatedCountPaginator
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


def token_identity_q(term: str, prefix: str = "") -> Q:
    """Match a token by exact transaction id, ``tx_id:index`` or primary key."""
    query = Q(**{f"{prefix}tx_id": term})
    tx_id, _, index = term.rpartition(":")
    if tx_id and index.isdigit():
        query |= Q(**{f"{prefix}tx_id": tx_id, f"{prefix}index": int(index)})
    if term.isdigit() and len(term) < 19:  # fits a bigint
        query |= Q(**{f"{prefix}pk": int(term)})
    return query


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
    list_display = ["identity", "wallet", "currency", "quantity", "created_at", "spent_by",
                    "lock_link"]
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

    @admin.display(description="token", ordering="pk")
    def identity(self, obj: Token) -> str:
        return str(obj)

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

