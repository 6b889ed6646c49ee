"""The token admin's correction page: a reason, then the audited change."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from tokens.corrections import mark_unspent

LISTED_ON_CONFIRMATION = 50
MAX_CORRECTED = 1000  # tokens one correction locks and changes


class CorrectionForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), max_length=2000,
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
                request, f"Marked {audit.count} token(s) unspent; recorded as audit "
                f"#{audit.pk}.", messages.SUCCESS)
        return None
    count = queryset.count()
    if count > MAX_CORRECTED:
        modeladmin.message_user(request, f"{count} tokens selected; correct at most "
                                f"{MAX_CORRECTED} at a time.", messages.ERROR)
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Mark tokens unspent",
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
    return TemplateResponse(request, "admin/tokens/token/mark_unspent.html", context)
