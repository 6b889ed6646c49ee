"""Operator admin for the lock table, selections and the audit trail; read-only by permission.

Importing this module (Django's admin autodiscovery does) also registers the token admin,
``locks.admin_tokens``: it shows each token's lock, which only this app knows. The lock and
selection changelists' filters are in ``locks.admin_filters``.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import DatabaseError
from django.db.models import Count, OuterRef, Q, Subquery
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from common.pagination import EstimatedCountPaginator
from locks import admin_tokens  # noqa: F401  (registers the token admin)
from locks.admin_filters import (
    AgeFilter,
    LeaseFilter,
    LockCurrencyFilter,
    LockStateFilter,
    LockWalletFilter,
)
from locks.admin_views import force_release_view
from locks.models import FailedSelection, HousekeepingRun, LockAudit, Selection, TokenLock
from locks.operator import release_audited
from sherdlock import SherdlockError
from tokens.admin import CurrencyFilter, small_int, token_identity_q, wallet_link, wallet_q
from tokens.models import Token

TOKENS_SHOWN = 5


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written by the system only: operators may view, never add, edit or delete."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def token_link(token: Token) -> str:
    """Link to the token's admin page, labelled tx_id:index."""
    return format_html(
        '<a href="{}">{}</a>', reverse("admin:tokens_token_change", args=[token.pk]), token
    )


def lock_state(lock: TokenLock) -> str:
    """Return "live", "expired" or "token spent"."""
    if lock.token.spent_at is not None:
        return "token spent"
    return "expired" if lock.is_expired else "live"


@admin.register(TokenLock)
class TokenLockAdmin(ReadOnlyAdmin):
    list_display = [
        "token_display",
        "wallet_display",
        "currency",
        "quantity",
        "spender_tx_id",
        "fence",
        "created_at",
        "expires_at",
        "age",
        "state",
    ]
    list_filter = [LockStateFilter, LockCurrencyFilter, LockWalletFilter, AgeFilter]
    list_select_related = ["token"]
    fields = ["token", "spender_tx_id", "fence", "created_at", "expires_at", "age", "state"]
    readonly_fields = ["age", "state"]
    ordering = ["created_at"]  # oldest first: the ones an operator is looking for
    search_fields = ["token__tx_id", "spender_tx_id", "token__wallet"]  # exact, see below
    search_help_text = "Exact token tx id (or tx_id:index), spender tx id, or wallet."
    actions = ["force_release"]

    def has_release_permission(self, request):
        return request.user.has_perm("locks.delete_tokenlock")

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        # One IN over a UNION, not an OR: each branch is served by its own index and the
        # lock rows are then fetched by primary key, instead of scanning the lock table.
        held = TokenLock.objects.filter(spender_tx_id=term).values("token_id")
        tokens = Token.objects.filter(token_identity_q(term) | wallet_q(term)).values("pk")
        return queryset.filter(token_id__in=held.union(tokens)), False

    @admin.display(description="token", ordering="token_id")
    def token_display(self, lock: TokenLock) -> str:
        return token_link(lock.token)

    @admin.display(description="wallet", ordering="wallet")
    def wallet_display(self, lock: TokenLock) -> str:
        return wallet_link(lock.wallet)

    @admin.display(description="age", ordering="-created_at")
    def age(self, lock: TokenLock) -> str:
        seconds = int((timezone.now() - lock.created_at).total_seconds())
        minutes, seconds = divmod(max(seconds, 0), 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours}h {minutes:02d}m {seconds:02d}s" if hours else f"{minutes}m {seconds:02d}s"

    @admin.display(description="state")
    def state(self, lock: TokenLock) -> str:
        return lock_state(lock)

    @admin.action(description="Force release selected locks", permissions=["release"])
    def force_release(self, request, queryset):
        return force_release_view(self, request, queryset)


class SelectionChangeList(ChangeList):
    """Attach the first tokens of every selection on the page, loaded in one query."""

    def get_results(self, request):
        super().get_results(request)
        wanted = {pk for s in self.result_list for pk in s.token_ids[:TOKENS_SHOWN]}
        tokens = Token.objects.in_bulk(wanted)
        for selection in self.result_list:
            selection.shown_tokens = [
                tokens[pk] for pk in selection.token_ids[:TOKENS_SHOWN] if pk in tokens
            ]


def lease_state(selection: Selection) -> str:
    """Return "live", "expired", "spent" or "released"."""
    if selection.status != Selection.Status.LOCKED:
        return selection.status
    live = selection.expires_at is not None and selection.expires_at > timezone.now()
    return "live" if live else "expired"


@admin.register(Selection)
class SelectionAdmin(ReadOnlyAdmin):
    list_display = [
        "tx_id",
        "namespace",
        "wallet_display",
        "currency",
        "quantity",
        "total",
        "strategy",
        "legs_display",
        "tokens",
        "locks_held",
        "lease",
        "created_at",
        "expires_at",
    ]
    list_filter = [LeaseFilter, "strategy", CurrencyFilter]
    ordering = ["-created_at"]
    search_fields = ["tx_id", "wallet"]  # exact, see below
    search_help_text = "Exact transaction id or wallet."
    actions = ["release"]
    readonly_fields = ["tokens", "legs_display"]

    def get_changelist(self, request, **kwargs):
        return SelectionChangeList

    def get_queryset(self, request):
        held = (
            TokenLock.objects.filter(spender_tx_id=OuterRef("tx_id"), fence=OuterRef("fence"))
            .order_by()
            .values("spender_tx_id")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return super().get_queryset(request).annotate(held=Subquery(held))

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(Q(tx_id=term) | Q(wallet=term)), False

    def has_release_permission(self, request):
        return request.user.has_perm("locks.change_selection")

    @admin.display(description="tokens")
    def tokens(self, selection: Selection) -> str:
        shown = getattr(selection, "shown_tokens", None)
        if shown is None:  # the change page: a single object
            shown = list(Token.objects.filter(pk__in=selection.token_ids).order_by("pk"))
        more = len(selection.token_ids) - len(shown)
        links = format_html_join(", ", "{}", ((token_link(token),) for token in shown))
        return format_html("{}{}", links, f" and {more} more" if more > 0 else "")

    @admin.display(description="legs")
    def legs_display(self, selection: Selection) -> str:
        """Each leg of a multi-currency selection: currency, quantity and total (none: "-")."""
        if not selection.legs:
            return "-"
        return ", ".join(
            f"{leg['currency']} {leg['quantity']} (total {leg['total']})" for leg in selection.legs
        )

    @admin.display(description="wallet", ordering="wallet")
    def wallet_display(self, selection: Selection) -> str:
        return wallet_link(selection.wallet)

    @admin.display(description="locks held")
    def locks_held(self, selection: Selection) -> str:
        return f"{selection.held or 0} / {len(selection.token_ids)}"

    @admin.display(description="lease")
    def lease(self, selection: Selection) -> str:
        return lease_state(selection)

    @admin.action(description="Release selected selections", permissions=["release"])
    def release(self, request, queryset):
        for selection in queryset.only("tx_id", "namespace", "wallet"):
            tx_id = selection.tx_id
            try:
                removed = release_audited(
                    request.user, selection, "released from the list of selections"
                )
            except (SherdlockError, DatabaseError) as exc:
                self.message_user(request, f"{tx_id}: not released: {exc}", messages.ERROR)
            else:
                self.message_user(
                    request,
                    f"{tx_id}: released, {removed} lock(s) removed",
                    messages.SUCCESS if removed else messages.INFO,
                )


@admin.register(LockAudit)
class LockAuditAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "user", "action", "count", "reason", "spenders"]
    list_filter = ["action"]
    list_select_related = ["user"]
    search_fields = ["reason", "user__username"]  # see get_search_results
    search_help_text = "Words of the reason, a username, an exact spender tx id or token id."

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        query = (
            Q(reason__icontains=term) | Q(user__username=term) | Q(spender_tx_ids__contains=[term])
        )
        if (token_id := small_int(term)) is not None:
            query |= Q(token_ids__contains=[token_id])
        return queryset.filter(query), False

    @admin.display(description="spender transactions")
    def spenders(self, audit: LockAudit) -> str:
        shown = ", ".join(audit.spender_tx_ids[:TOKENS_SHOWN])
        more = len(audit.spender_tx_ids) - TOKENS_SHOWN
        return f"{shown} and {more} more" if more > 0 else shown


@admin.register(HousekeepingRun)
class HousekeepingRunAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "finished_at",
        "expired_removed",
        "spent_removed",
        "buckets_removed",
        "skipped",
    ]
    list_filter = ["skipped"]


@admin.register(FailedSelection)
class FailedSelectionAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "tx_id",
        "wallet_display",
        "currency",
        "quantity",
        "outcome",
        "strategy",
        "lock_conflicts",
    ]
    list_filter = ["outcome", "strategy", CurrencyFilter]
    ordering = ["-created_at"]
    search_fields = ["tx_id", "wallet"]  # exact, see below
    search_help_text = "Exact transaction id or wallet."

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(Q(tx_id=term) | Q(wallet=term)), False

    @admin.display(description="wallet", ordering="wallet")
    def wallet_display(self, failed: FailedSelection) -> str:
        return wallet_link(failed.wallet)
