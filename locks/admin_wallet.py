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
from django.db import DatabaseError, transaction
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from common.knobs import knobs
from common.rules import ID_MAX_LENGTH
from locks.models import LockAudit, Selection
from locks.selections import extend_selection, release_selection
from locks.wallet import LIST_SIZE, wallet_overview
from sherdlock import SherdlockError

logger = logging.getLogger(__name__)

VIEW_PERMISSIONS = ("tokens.view_token", "locks.view_tokenlock", "locks.view_selection")
CHANGE_PERMISSION = "locks.change_selection"
PAST = {"release": "released", "extend": "extended"}


class SelectionActionForm(forms.Form):
    action = forms.ChoiceField(choices=[("release", "release"), ("extend", "extend")])
    tx_id = forms.CharField(max_length=ID_MAX_LENGTH)
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
    action, tx_id = form.cleaned_data["action"], form.cleaned_data["tx_id"]
    selection = Selection.objects.filter(tx_id=tx_id, wallet=wallet).first()
    if selection is None:
        messages.error(request, f"{tx_id}: no selection of wallet {wallet}")
        return
    try:
        # The audit row commits with the release or renewal it describes, or not at all.
        with transaction.atomic():
            if action == "release":
                removed = release_selection(tx_id, namespace=selection.namespace).locks_removed
                audit(
                    request,
                    "release_selection",
                    selection,
                    removed,
                    f"released from the wallet page of {wallet}",
                )
                text = f"{tx_id}: released, {removed} lock(s) removed"
            else:
                seconds = form.cleaned_data["seconds"] or knobs().lease_seconds
                renewed = extend_selection(tx_id, seconds, namespace=selection.namespace).selection
                audit(
                    request,
                    "extend_selection",
                    selection,
                    len(renewed.token_ids),
                    f"extended by {seconds:g} s from the wallet page of {wallet}",
                )
                text = f"{tx_id}: lease extended until {renewed.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    except (SherdlockError, DatabaseError) as exc:
        messages.error(request, f"{tx_id}: not {PAST[action]}: {exc}")
        return
    logger.warning("%s: %s (wallet %s)", request.user, text, wallet)
    messages.success(request, text)


def audit(request, action: str, selection: Selection, count: int, reason: str) -> None:
    LockAudit.objects.create(
        user=request.user,
        action=action,
        reason=reason,
        count=count,
        spender_tx_ids=[selection.tx_id],
        token_ids=list(selection.token_ids),
    )
