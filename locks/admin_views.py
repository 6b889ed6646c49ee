"""Admin pages beyond the changelists: the force-release confirmation and the dashboard."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.response import TemplateResponse

from locks.dashboard import MinuteOutcomes, build_dashboard
from locks.models import LockAudit, TokenLock

logger = logging.getLogger(__name__)

LISTED_ON_CONFIRMATION = 50
# Locks one confirmation may release: each travels in the form as "token:fence".
MAX_FORCE_RELEASE = 10_000
_PAIR = re.compile(r"([0-9]{1,19}):([0-9]{1,19})")


class ForceReleaseForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=2000,
        help_text="Recorded in the lock audit with your name and the time.",
    )
    # The locks as the confirmation page showed them, "token:fence,...": a lock that changed
    # hands since (a new selection took the token, under a larger fence) is not released.
    locks = forms.CharField(
        widget=forms.HiddenInput,
        max_length=40 * MAX_FORCE_RELEASE,
        error_messages={"required": "No locks were confirmed; start again."},
    )

    def clean_locks(self) -> dict[int, int]:
        pairs: dict[int, int] = {}
        for item in self.cleaned_data["locks"].split(","):
            match = _PAIR.fullmatch(item)
            if not match:
                raise forms.ValidationError("The list of locks is damaged; start again.")
            pairs[int(match[1])] = int(match[2])
        return pairs


def shown_locks(queryset) -> str:
    """Encode the locks the confirmation page shows as "token:fence,..." (token id order)."""
    rows = queryset.order_by("pk").values_list("pk", "fence")
    return ",".join(f"{pk}:{fence}" for pk, fence in rows)


def force_release(queryset, user, reason: str, shown: dict[int, int]) -> tuple[LockAudit, int]:
    """Delete the locks of ``queryset`` still held under the fence ``shown`` names; audit them.

    Return the audit and how many shown locks were left alone because they changed hands or
    went away since the confirmation page (keyed by token alone, the DELETE would remove a new
    holder's lock).
    """
    with transaction.atomic():
        # Lock the rows first so the audit names exactly what is deleted: a selector cannot
        # take over (re-grant) one of them between this read and the DELETE.
        rows = list(
            queryset.filter(pk__in=list(shown))
            .select_for_update(of=("self",))
            .order_by("pk")
            .values_list("pk", "spender_tx_id", "fence")
        )
        kept = [(pk, spender) for pk, spender, fence in rows if shown[pk] == fence]
        token_ids = [pk for pk, _ in kept]
        deleted, _ = TokenLock.objects.filter(pk__in=token_ids).delete()
        audit = LockAudit.objects.create(
            user=user,
            action="force_release",
            reason=reason,
            count=deleted,
            spender_tx_ids=sorted({spender for _, spender in kept}),
            token_ids=token_ids,
        )
    logger.warning("%s force-released %d lock(s): %s", user, deleted, reason)
    return audit, len(shown) - deleted


def force_release_view(modeladmin, request, queryset):
    """Ask for a reason, then force-release; return None to go back to the changelist."""
    submitted = request.POST.get("post") == "yes"
    form = ForceReleaseForm(request.POST if submitted else None)
    if form.is_valid():
        audit, skipped = force_release(
            queryset, request.user, form.cleaned_data["reason"], form.cleaned_data["locks"]
        )
        modeladmin.message_user(
            request,
            f"Force-released {audit.count} lock(s); recorded as audit #{audit.pk}.",
            messages.SUCCESS,
        )
        if skipped:
            modeladmin.message_user(
                request,
                f"{skipped} lock(s) left alone: released, or taken by another "
                "transaction since the confirmation page.",
                messages.WARNING,
            )
        return None
    count = queryset.count()
    if count == 0:
        modeladmin.message_user(
            request, "None of the selected locks exists any more.", messages.INFO
        )
        return None
    if count > MAX_FORCE_RELEASE:
        modeladmin.message_user(
            request,
            f"{count} locks selected; force-release at most {MAX_FORCE_RELEASE} at a time.",
            messages.ERROR,
        )
        return None
    # Asked again (no reason given): keep the locks of the first showing, the ones confirmed.
    shown = request.POST.get("locks") if submitted and "locks" not in form.errors else None
    context = confirmation_context(
        modeladmin, request, queryset, "Force release locks", form, count
    )
    context["locks"] = shown or shown_locks(queryset)
    return TemplateResponse(request, "admin/locks/tokenlock/force_release.html", context)


def confirmation_context(
    modeladmin, request, queryset, title: str, form: forms.Form, count: int
) -> dict:
    """Return the context of an admin action's confirmation page: its form and first rows.

    The selection travels along (selected ids or "select across") so that confirming applies
    the action to the same rows.
    """
    return {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": modeladmin.model._meta,
        "form": form,
        "count": count,
        "listed": queryset.order_by("pk")[:LISTED_ON_CONFIRMATION],
        "more": max(count - LISTED_ON_CONFIRMATION, 0),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }


@dataclass(frozen=True)
class ChartBar:
    x: float
    width: float
    minute: str
    # (css class, y, height, count) from the bottom up
    segments: list[tuple[str, float, float, int]]
    total: int


@dataclass(frozen=True)
class OutcomeChart:
    width: int
    height: int
    peak: int
    bars: list[ChartBar]
    first: str
    last: str


CHART_SERIES = (("success", "ok"), ("insufficient_funds", "short"), ("funds_locked", "locked"))


def outcome_chart(
    minutes: list[MinuteOutcomes], width: int = 720, height: int = 160
) -> OutcomeChart:
    """Lay out stacked bars (one per minute) for an inline SVG."""
    peak = max((m.total for m in minutes), default=0)
    step = width / max(len(minutes), 1)
    bars = []
    for i, minute in enumerate(minutes):
        y, segments = float(height), []
        for attribute, css in CHART_SERIES:
            count = getattr(minute, attribute)
            if count and peak:
                h = count / peak * (height - 4)
                y -= h
                segments.append((css, round(y, 2), round(h, 2), count))
        bars.append(
            ChartBar(
                x=round(i * step, 2),
                width=round(step * 0.8, 2),
                minute=f"{minute.minute:%H:%M}",
                segments=segments,
                total=minute.total,
            )
        )
    return OutcomeChart(
        width=width,
        height=height,
        peak=peak,
        bars=bars,
        first=bars[0].minute if bars else "",
        last=bars[-1].minute if bars else "",
    )


def dashboard_view(request):
    """Show supply, lock states, contention, recent outcomes and housekeeping on one page."""
    if not request.user.has_perm("locks.view_tokenlock"):
        raise PermissionDenied
    data = build_dashboard()
    context = {
        **admin.site.each_context(request),
        "title": "Selector dashboard",
        "data": data,
        "chart": outcome_chart(data.outcomes),
    }
    return TemplateResponse(request, "admin/dashboard.html", context)
