"""The admin cannot undo a spend or release a lock that changed hands.

A token's spent state is read-only (corrections go through an audited action that refuses
tokens whose spend is recorded), and force release deletes a lock only under the fence the
confirmation page showed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from locks import replica
from locks.models import LockAudit, TokenLock
from locks.services import select_tokens, spend_selection
from tests.factories import make_token, make_tokens
from tokens.models import Token
from tokens.services import TokenSpec

pytestmark = pytest.mark.django_db

TOKENS = reverse("admin:tokens_token_changelist")
LOCKS = reverse("admin:locks_tokenlock_changelist")


@pytest.fixture(autouse=True)
def fresh_selector():
    replica.reset()
    yield
    replica.reset()


def change_form_data(response) -> dict:
    """Return what the change form would post back, as a browser submits it."""
    form = response.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        data[name] = "" if value is None else value
    return data


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_a_form_opened_before_a_spend_cannot_unspend_the_token(admin_client):
    token = make_token(wallet="alice", quantity=10, tx_id="mint")
    url = reverse("admin:tokens_token_change", args=[token.pk])
    opened = change_form_data(admin_client.get(url))  # the token is unspent here

    select_tokens("pay", "alice", "USD", 10)
    spend_selection("pay", [TokenSpec("pay", 0, "bob", "USD", 10)])

    stale = {**opened, "spent_by": "", "spent_at_0": "", "spent_at_1": ""}
    assert admin_client.post(url, stale).status_code == 302
    token.refresh_from_db()
    assert token.spent_by == "pay" and token.spent_at is not None
    assert Token.objects.filter(tx_id="pay").count() == 1  # the output: value counted once


def test_spent_state_is_read_only_and_not_set_when_adding(admin_client):
    token = make_token(spent_by="ghost", spent_at=timezone.now())
    page = admin_client.get(reverse("admin:tokens_token_change", args=[token.pk]))
    assert {"spent_by", "spent_at"} <= set(page.context["adminform"].readonly_fields)
    add = admin_client.get(reverse("admin:tokens_token_add")).context["adminform"].form
    assert not {"spent_by", "spent_at"} & set(add.fields)


def mark_unspent(client, tokens, reason=None):
    data = {"action": "mark_unspent", "_selected_action": [token.pk for token in tokens]}
    if reason is not None:
        data.update(post="yes", reason=reason)
    return client.post(TOKENS, data, follow=reason is not None)


def test_a_spent_mark_no_spend_accounts_for_is_corrected_with_an_audit(admin_client, admin_user):
    ghost = make_token(tx_id="g", spent_by="ghost-tx", spent_at=timezone.now())
    confirm = mark_unspent(admin_client, [ghost])
    assert confirm.templates[0].name == "admin/tokens/token/mark_unspent.html"
    assert Token.objects.get(pk=ghost.pk).spent_by == "ghost-tx"

    done = mark_unspent(admin_client, [ghost], reason="imported as spent by mistake")
    assert any("Marked 1 token(s) unspent" in m for m in messages_of(done))
    ghost.refresh_from_db()
    assert (ghost.spent_by, ghost.spent_at) == (None, None)
    audit = LockAudit.objects.get()
    assert (audit.action, audit.user, audit.count, audit.token_ids, audit.spender_tx_ids) == (
        "mark_unspent",
        admin_user,
        1,
        [ghost.pk],
        ["ghost-tx"],
    )


def test_tokens_of_a_recorded_spend_are_refused(admin_client):
    make_tokens(2, wallet="alice", quantity=10)
    selection, _ = select_tokens("pay", "alice", "USD", 20)
    spend_selection("pay", [TokenSpec("pay", 0, "bob", "USD", 20)])
    spent = list(Token.objects.filter(pk__in=selection.token_ids))
    # Spent by a transaction with outputs but no selection (issued directly) counts too.
    orphan = make_token(tx_id="o", spent_by="direct", spent_at=timezone.now())
    make_token(tx_id="direct", wallet="carol")
    unspent = make_token(tx_id="u")

    done = mark_unspent(admin_client, [*spent, orphan, unspent], reason="try")
    refused = [m for m in messages_of(done) if m.startswith("Refused")]
    assert len(refused) == 4
    assert Token.objects.filter(pk__in=selection.token_ids, spent_by="pay").count() == 2
    assert Token.objects.get(pk=orphan.pk).spent_by == "direct"
    assert not LockAudit.objects.exists()


def test_a_correction_needs_a_reason_and_the_change_permission(
    client, admin_client, django_user_model
):
    ghost = make_token(tx_id="g", spent_by="ghost-tx", spent_at=timezone.now())
    again = mark_unspent(admin_client, [ghost], reason="  ")
    assert again.context["form"].errors["reason"]
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_token"))
    client.force_login(viewer)
    page = client.get(TOKENS)
    assert "mark_unspent" not in page.context["cl"].model_admin.get_actions(page.wsgi_request)
    mark_unspent(client, [ghost], reason="not allowed")
    assert Token.objects.get(pk=ghost.pk).spent_by == "ghost-tx"
    assert not LockAudit.objects.exists()


def post_force_release(client, selected, **extra):
    return client.post(
        LOCKS,
        {"action": "force_release", "_selected_action": [lock.pk for lock in selected], **extra},
    )


def take_over(lock: TokenLock, spender: str, fence: int) -> None:
    """Do what a selection does to an expired lock: the token goes to a new holder and fence."""
    now = timezone.now()
    TokenLock.objects.filter(pk=lock.pk).update(
        spender_tx_id=spender, fence=fence, created_at=now, expires_at=now + timedelta(60)
    )


def test_force_release_leaves_a_lock_that_changed_hands_since_the_confirmation(admin_client):
    now = timezone.now()
    stuck, other = (
        TokenLock.objects.create_for(
            token,
            spender_tx_id="dead",
            fence=5,
            created_at=now - timedelta(seconds=90),
            expires_at=now - timedelta(seconds=30),
        )
        for token in make_tokens(2)
    )
    confirm = post_force_release(admin_client, [stuck, other])
    shown = confirm.context["locks"]
    assert shown == f"{stuck.pk}:5,{other.pk}:5"
    take_over(stuck, "new-holder", fence=9)

    done = admin_client.post(
        LOCKS,
        {
            "action": "force_release",
            "_selected_action": [stuck.pk, other.pk],
            "post": "yes",
            "reason": "replica died",
            "locks": shown,
        },
        follow=True,
    )
    assert TokenLock.objects.get(pk=stuck.pk).spender_tx_id == "new-holder"
    assert not TokenLock.objects.filter(pk=other.pk).exists()
    audit = LockAudit.objects.get()
    assert (audit.count, audit.token_ids, audit.spender_tx_ids) == (1, [other.pk], ["dead"])
    assert any("1 lock(s) left alone" in m for m in messages_of(done))


@pytest.mark.parametrize("confirmed", ["", "1:x", "12", "1:2;3:4"])
def test_force_release_without_the_confirmed_locks_asks_again(admin_client, confirmed):
    lock = TokenLock.objects.create_for(
        make_token(), spender_tx_id="s", fence=3, expires_at=timezone.now() + timedelta(60)
    )
    page = post_force_release(admin_client, [lock], post="yes", reason="r", locks=confirmed)
    assert page.status_code == 200 and page.context["form"].errors["locks"]
    assert page.context["locks"] == f"{lock.pk}:3"  # shown afresh, to be confirmed again
    assert TokenLock.objects.filter(pk=lock.pk).exists()
    assert not LockAudit.objects.exists()
