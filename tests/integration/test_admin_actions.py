"""What operators may change in the admin, and what each change records.

Token identities are read-only, no lock is edited by hand, releasing selections is audited, and
deleting tokens spares every hold.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from locks.models import LockAudit, Selection, TokenLock
from tests.factories import make_lock, make_selection, make_token, make_tokens
from tests.helpers.admin import LOCKS, SELECTIONS, TOKENS
from tokens.models import Token

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_cache")]


def test_token_identity_and_quantity_are_read_only_on_change(admin_client):
    token = make_token(wallet="alice", quantity=10, tx_id="fixed")
    url = reverse("admin:tokens_token_change", args=[token.pk])
    form = admin_client.get(url).context["adminform"]
    assert {"tx_id", "index", "wallet", "currency", "quantity"} <= set(form.readonly_fields)
    assert (
        admin_client.post(
            url,
            {
                "tx_id": "moved",
                "index": 9,
                "wallet": "mallory",
                "currency": "EUR",
                "quantity": 999,
                "spent_by": "",
                "spent_at_0": "",
                "spent_at_1": "",
            },
        ).status_code
        == 302
    )
    token.refresh_from_db()
    assert (token.tx_id, token.index, token.wallet, token.currency, token.quantity) == (
        "fixed",
        0,
        "alice",
        "USD",
        Decimal(10),
    )
    add_form = admin_client.get(reverse("admin:tokens_token_add")).context["adminform"]
    assert "quantity" in add_form.form.fields and not add_form.readonly_fields


def test_locks_cannot_be_added_changed_or_deleted_by_hand(admin_client):
    lock = make_lock(make_token(), "holder")
    assert admin_client.get(reverse("admin:locks_tokenlock_add")).status_code == 403
    change = reverse("admin:locks_tokenlock_change", args=[lock.pk])
    assert admin_client.get(change).status_code == 200  # viewing is allowed
    assert admin_client.post(change, {"spender_tx_id": "thief", "fence": 9}).status_code == 403
    assert (
        admin_client.get(reverse("admin:locks_tokenlock_delete", args=[lock.pk])).status_code == 403
    )
    page = admin_client.get(LOCKS)
    assert set(page.context["cl"].model_admin.get_actions(page.wsgi_request)) == {"force_release"}
    assert TokenLock.objects.get(pk=lock.pk).spender_tx_id == "holder"


@pytest.fixture
def replica():
    from locks import replica

    replica.reset()  # a fresh selector, whose cache listener must not outlive the test database
    yield
    replica.reset()


def test_selection_release_action_reports_each_result(admin_client, replica):
    live = make_selection(make_tokens(2), "sel-a")
    spent = make_selection(make_tokens(1), "sel-b", status=Selection.Status.SPENT, lock=False)
    response = admin_client.post(
        SELECTIONS, {"action": "release", "_selected_action": [live.pk, spent.pk]}, follow=True
    )
    assert response.status_code == 200
    text = [str(m) for m in response.context["messages"]]
    assert "sel-a: released, 2 lock(s) removed" in text
    assert any(m.startswith("sel-b: not released") for m in text)
    live.refresh_from_db()
    assert live.status == Selection.Status.RELEASED
    assert not TokenLock.objects.filter(spender_tx_id="sel-a").exists()


def test_selection_release_action_is_audited_and_acts_on_the_chosen_selection(
    admin_client, admin_user, replica
):
    # Two clients chose the same tx id in one wallet: only the chosen one is released.
    chosen = make_selection(make_tokens(2), "same", namespace="key-one")
    other = make_selection(make_tokens(3), "same", namespace="key-two")
    spent = make_selection(make_tokens(1), "done", status=Selection.Status.SPENT, lock=False)
    admin_client.post(
        SELECTIONS, {"action": "release", "_selected_action": [chosen.pk, spent.pk]}, follow=True
    )
    chosen.refresh_from_db()
    other.refresh_from_db()
    assert (chosen.status, other.status) == (Selection.Status.RELEASED, Selection.Status.LOCKED)
    assert TokenLock.objects.filter(fence=other.fence).count() == 3
    audit = LockAudit.objects.get()  # the refused release changed nothing and is not recorded
    assert (audit.action, audit.user, audit.count) == ("release_selection", admin_user, 2)
    assert audit.spender_tx_ids == ["same"]
    assert sorted(audit.token_ids) == sorted(chosen.token_ids)
    assert "key-one" in audit.reason and "list of selections" in audit.reason


# Every admin action that changes a hold or a token's state, each tested with the audit row it
# writes (force release, release, mark unspent); deleting tokens spares locked ones (below).
AUDITED_ACTIONS = {
    ("locks", "tokenlock"): {"force_release"},
    ("locks", "selection"): {"release"},
    ("tokens", "token"): {"mark_unspent", "delete_selected"},
}


def test_no_admin_action_changes_holds_or_tokens_unaudited(rf, admin_user):
    from django.contrib import admin

    request = rf.get("/admin/")
    request.user = admin_user
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        if meta.app_label not in ("locks", "tokens"):
            continue
        actions = set(model_admin.get_actions(request))
        assert actions == AUDITED_ACTIONS.get((meta.app_label, meta.model_name), set()), meta


def test_deleting_tokens_never_removes_a_hold(admin_client):
    # A token's lock row cannot be deleted by hand (only force release, audited, removes one),
    # so neither can a locked token: the hold would go with it, unaudited.
    held = make_selection(make_tokens(2), "held")
    free = make_tokens(1)
    admin_client.post(
        TOKENS,
        {
            "action": "delete_selected",
            "_selected_action": [*held.token_ids, free[0].pk],
            "post": "yes",
        },
    )
    lone = make_token()
    make_lock(lone, "lone-holder")
    admin_client.post(reverse("admin:tokens_token_delete", args=[lone.pk]), {"post": "yes"})
    assert Token.objects.count() == 4
    assert TokenLock.objects.count() == 3
