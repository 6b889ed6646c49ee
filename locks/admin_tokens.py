"""The token admin: tokens with their locks, and the audited correction of a spent mark."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import SEARCH_VAR
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Now
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from common.pagination import EstimatedCountPaginator
from locks.admin_views import confirmation_context
from locks.corrections import mark_unspent
from locks.models import TokenLock
from tokens import supply
from tokens.admin import CurrencyFilter, SpentFilter, token_identity_q, wallet_link, wallet_q
from tokens.models import Token

IDENTITY_FIELDS = ("tx_id", "index", "wallet", "currency", "quantity")
MAX_CORRECTED = 1000  # tokens one correction locks and changes


class CorrectionForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=2000,
        help_text="Recorded in the lock audit with your name and the time.",
    )


def mark_unspent_view(modeladmin, request, queryset):
    """Ask for a reason, then mark unspent what may be; return None to go back to the list."""
    form = CorrectionForm(request.POST if request.POST.get("post") == "yes" else None)
    if form.is_valid() and queryset.count() <= MAX_CORRECTED:
        audit, refused = mark_unspent(queryset, request.user, form.cleaned_data["reason"])
        for reason in refused:
            modeladmin.message_user(request, f"Refused: {reason}.", messages.ERROR)
        if audit is not None:
            modeladmin.message_user(
                request,
                f"Marked {audit.count} token(s) unspent; recorded as audit #{audit.pk}.",
                messages.SUCCESS,
            )
        return None
    count = queryset.count()
    if count > MAX_CORRECTED:
        modeladmin.message_user(
            request,
            f"{count} tokens selected; correct at most {MAX_CORRECTED} at a time.",
            messages.ERROR,
        )
        return None
    context = confirmation_context(
        modeladmin, request, queryset, "Mark tokens unspent", form, count
    )
    return TemplateResponse(request, "admin/tokens/token/mark_unspent.html", context)


def locked_unspent(ids) -> dict[str, Decimal]:
    """Lock the tokens ``ids`` (a list or a subquery) and sum the unspent ones per currency."""
    return supply.unspent_by_currency(
        Token.objects.select_for_update()
        .filter(pk__in=ids)
        .order_by("pk")
        .only("currency", "quantity", "spent_at")
    )


class LockedFilter(admin.SimpleListFilter):
    title = "lock"
    parameter_name = "locked"

    def lookups(self, request, model_admin):
        return [("yes", "locked (live lock)"), ("no", "unlocked")]

    def queryset(self, request, queryset):
        live = Exists(TokenLock.objects.filter(token=OuterRef("pk"), expires_at__gt=Now()))
        if self.value() == "yes":
            return queryset.filter(live)
        if self.value() == "no":
            return queryset.filter(~live)
        return queryset


@admin.register(Token)
class TokenAdmin(admin.ModelAdmin):
    list_display = [
        "identity",
        "wallet_display",
        "currency",
        "quantity",
        "created_at",
        "spent_by",
        "lock_link",
    ]
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

    @admin.action(
        description="Mark selected tokens unspent (audited correction)", permissions=["change"]
    )
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
            supply.add(
                {
                    currency: after.get(currency, 0) - before.get(currency, 0)
                    for currency in {*before, *after}
                }
            )

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
