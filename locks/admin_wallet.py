"""The wallet page of the admin: one wallet's balances, holders, history and limits.

Registered by the admin site (``config.admin_site``) at ``/admin/wallets/<wallet>/``, so it
needs a staff login; viewing also needs the view permissions on tokens, locks and selections,
and its two actions (release a selection, extend its lease) the change permission on
selections. Both actions are POSTs with a CSRF token, call the same services as the API, and
are recorded in the lock audit with the operator's name.
"""

from __future__ import annotations

import logging

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from common.knobs import knobs
from common.rules import ID_MAX_LENGTH
from locks.models import Selection
from locks.operator import extend_audited, release_audited
from locks.wallet import LIST_SIZE, wallet_overview
from sherdlock import SherdlockError

logger = logging.getLogger(__name__)

VIEW_PERMISSIONS = ("tokens.view_token", "locks.view_tokenlock", "locks.view_selection")
CHANGE_PERMISSION = "locks.change_selection"
PAST = {"release": "released", "extend": "extended"}


class SelectionActionForm(forms.Form):
    action = forms.ChoiceField(choices=[("release", "release"), ("extend", "extend")])
    selection = forms.IntegerField(min_value=1, max_value=2**63 - 1)
    seconds = forms.FloatField(required=False, min_value=1)


def wallet_url(wallet: str) -> str:
    return reverse("admin:wallet", args=[wallet])


def may_change(user) -> bool:
    return user.has_perm(CHANGE_PERMISSION)


def wallet_view(request, wallet: str):
    """Show one wallet (GET), or release or extend one of its selections (POST)."""
    if not request.user.has_perms(VIEW_PERMISSIONS):
        raise PermissionDenied
    # Such a name can never be stored (PostgreSQL text holds no NUL; the column holds 128).
    if "\x00" in wallet or len(wallet) > ID_MAX_LENGTH:
        raise Http404("no such wallet can exist")
    if request.method == "POST":
        if not may_change(request.user):
            raise PermissionDenied
        act(request, wallet)
        return HttpResponseRedirect(wallet_url(wallet))
    data = wallet_overview(wallet)
    context = {
        **admin.site.each_context(request),
        "title": f"Wallet {wallet}",
        "data": data,
        "list_size": LIST_SIZE,
        "may_change": may_change(request.user),
        "lease_seconds": int(knobs().lease_seconds),
        "max_lease_seconds": int(knobs().max_lease_seconds),
    }
    return TemplateResponse(request, "admin/wallet.html", context)


def act(request, wallet: str) -> None:
    """Run the posted action on a selection of ``wallet``; report the outcome as a message."""
    form = SelectionActionForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Nothing done: {form.errors.as_text()}")
        return
    action, pk = form.cleaned_data["action"], form.cleaned_data["selection"]
    # By its identity: clients sharing the wallet may each have a selection of the same tx id.
    selection = Selection.objects.filter(pk=pk, wallet=wallet).first()
    if selection is None:
        messages.error(request, f"selection {pk}: no selection of wallet {wallet}")
        return
    tx_id, where = selection.tx_id, f"from the wallet page of {wallet}"
    try:
        if action == "release":
            removed = release_audited(request.user, selection, where)
            text = f"{tx_id}: released, {removed} lock(s) removed"
        else:
            seconds = form.cleaned_data["seconds"] or knobs().lease_seconds
            renewed = extend_audited(request.user, selection, seconds, where).selection
            text = f"{tx_id}: lease extended until {renewed.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    except (SherdlockError, DatabaseError) as exc:
        messages.error(request, f"{tx_id}: not {PAST[action]}: {exc}")
        return
    logger.warning("%s: %s (wallet %s)", request.user, text, wallet)
    messages.success(request, text)
