"""Admin pages beyond the changelists: the force-release confirmation and the dashboard."""

from __future__ import annotations

import logging
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


class ForceReleaseForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), max_length=2000,
        help_text="Recorded in the lock audit with your name and the time.",
    )


def force_release(queryset, user, reason: str) -> LockAudit:
    """Delete the locks in ``queryset`` and record who did it, when and why."""
    with transaction.atomic():
        # Lock the rows first so the audit names exactly what is deleted: a selector cannot
        # take over (re-grant) one of them between this read and the DELETE.
        rows = list(queryset.select_for_update(of=("self",)).order_by("pk")
                    .values_list("pk", "spender_tx_id"))
        token_ids = [pk for pk, _ in rows]
        deleted, _ = TokenLock.objects.filter(pk__in=token_ids).delete()
        audit = LockAudit.objects.create(
            user=user, action="force_release", reason=reason, count=deleted,
            spender_tx_ids=sorted({spender for _, spender in rows}), token_ids=token_ids,
        )
    logger.warning("%s force-released %d lock(s): %s", user, deleted, reason)
    return audit


def force_release_view(modeladmin, request, queryset):
    """Ask for a reason, then force-release; return None to go back to the changelist."""
    form = ForceReleaseForm(request.POST if request.POST.get("post") == "yes" else None)
    if form.is_valid():
        audit = force_release(queryset, request.user, form.cleaned_data["reason"])
        modeladmin.message_user(
            request, f"Force-released {audit.count} lock(s); recorded as audit #{audit.pk}.",
            messages.SUCCESS)
        return None
    opts = modeladmin.model._meta
    count = queryset.count()
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Force release locks",
        "opts": opts,
        "form": form,
        "count": count,
        "listed": queryset[:LISTED_ON_CONFIRMATION],
        "more": max(count - LISTED_ON_CONFIRMATION, 0),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    return TemplateResponse(request, "admin/locks/tokenlock/force_release.html", context)


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


def outcome_chart(minutes: list[MinuteOutcomes], width: int = 720,
                  height: int = 160) -> OutcomeChart:
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
        bars.append(ChartBar(x=round(i * step, 2), width=round(step * 0.8, 2),
                             minute=f"{minute.minute:%H:%M}", segments=segments,
                             total=minute.total))
    return OutcomeChart(width=width, height=height, peak=peak, bars=bars,
                        first=bars[0].minute if bars else "", last=bars[-1].minute if bars else "")


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
