"""POST /api/v1/selections/{tx_id}/spend/: atomic, value-conserving, idempotent spends."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from locks.models import Selection, TokenLock
from tests.helpers.api import counts, issue, output, select, spend, token
from tokens.models import Token

pytestmark = pytest.mark.django_db


@pytest.fixture
def selected(api) -> dict:
    issue(api, token("m", 0, quantity="50"), token("m", 1, quantity="30"))
    return select(api, "pay-1", "60").json()


def expire(tx_id: str) -> None:
    """Make a selection's locks look expired (created earlier, so the check constraint holds)."""
    past = timezone.now() - timedelta(minutes=5)
    TokenLock.objects.filter(spender_tx_id=tx_id).update(
        created_at=past, expires_at=past + timedelta(seconds=1)
    )


def test_spend_marks_inputs_spent_and_creates_outputs_atomically(api, selected):
    assert selected["total"] == "80"
    body = spend(api, "pay-1", [output(0, "bob", "60"), output(1, "alice", "20")]).json()
    assert body["status"] == "spent" and body["spent_at"]
    assert [(o["tx_id"], o["index"], o["wallet"], o["quantity"]) for o in body["outputs"]] == [
        ("pay-1", 0, "bob", "60"),
        ("pay-1", 1, "alice", "20"),
    ]
    assert set(Token.objects.filter(tx_id="m").values_list("spent_by", flat=True)) == {"pay-1"}
    assert Token.objects.unspent().filter(wallet="alice").aggregate(s=Sum("quantity"))["s"] == 20
    assert Token.objects.unspent().filter(wallet="bob").aggregate(s=Sum("quantity"))["s"] == 60


def test_repeating_the_same_spend_answers_200_without_a_second_effect(api, selected):
    first = spend(api, "pay-1", [output(0, "bob", "80")]).json()
    before = counts()
    again = spend(api, "pay-1", [output(0, "bob", "80")]).json()
    assert again == first
    assert counts() == before


def test_a_second_spend_with_other_outputs_is_already_spent(api, selected):
    spend(api, "pay-1", [output(0, "bob", "80")])
    response = spend(api, "pay-1", [output(0, "carol", "80")], expect=409)
    assert response.json()["code"] == "already_spent"
    assert not Token.objects.filter(wallet="carol").exists()


@pytest.mark.parametrize(
    "outputs",
    [
        [output(0, "bob", "79")],
        [output(0, "bob", "60"), output(1, "alice", "21")],
        [output(0, "bob", "80", currency="EUR")],
    ],
    ids=["short", "over", "other-currency"],
)
def test_outputs_must_conserve_value_in_the_selection_currency(api, selected, outputs):
    before = counts()
    response = spend(api, "pay-1", outputs, expect=422)
    assert response.json()["code"] == "value_not_conserved"
    assert counts() == before
    assert Selection.objects.get(tx_id="pay-1").status == "locked"


def test_duplicate_output_indexes_are_refused(api, selected):
    before = counts()
    response = spend(api, "pay-1", [output(0, "bob", "40"), output(0, "alice", "40")], expect=400)
    assert response.json()["code"] == "invalid"
    assert "outputs" in response.json()["fields"]
    assert counts() == before


def test_expired_locks_are_a_lost_lease(api, selected):
    expire("pay-1")
    response = spend(api, "pay-1", [output(0, "bob", "80")], expect=409)
    assert response.json()["code"] == "lease_lost"
    assert Token.objects.unspent().filter(tx_id="m").count() == 2
    assert not Token.objects.filter(tx_id="pay-1").exists()


def test_locks_taken_over_by_another_selection_are_a_lost_lease(api, selected):
    expire("pay-1")
    select(api, "thief", "80")  # expired locks are fair game for the next selection
    response = spend(api, "pay-1", [output(0, "bob", "80")], expect=409)
    assert response.json()["code"] == "lease_lost"
    spend(api, "thief", [output(0, "bob", "80")])


def test_spend_after_release_is_not_locked(api, selected):
    api.post("/api/v1/selections/pay-1/release/")
    response = spend(api, "pay-1", [output(0, "bob", "80")], expect=409)
    assert response.json()["code"] == "not_locked"


def test_tokens_cannot_be_issued_under_a_selections_transaction_id(api, selected):
    response = issue(api, token("pay-1", 0, wallet="bob", quantity="1"), expect=409)
    assert response.json()["code"] == "tx_id_conflict"


def test_an_output_that_already_exists_is_an_output_conflict(api, selected):
    # Only a race lets an issue slip under a selection's tx id (each refuses the other):
    # stage its outcome directly.
    selection = Selection.objects.get(tx_id="pay-1")
    Token.objects.create(
        namespace=selection.namespace,
        tx_id="pay-1",
        index=0,
        wallet="bob",
        currency="USD",
        quantity=1,
    )
    before = counts()
    response = spend(api, "pay-1", [output(0, "bob", "80")], expect=409)
    assert response.json()["code"] == "output_conflict"
    assert counts() == before
    assert Token.objects.unspent().filter(tx_id="m").count() == 2


def test_spending_an_unknown_selection_is_404(api):
    response = spend(api, "ghost", [output(0, "bob", "1")], expect=404)
    assert response.json()["code"] == "not_found"


def available(api, wallet: str) -> int:
    rows = api.get(f"/api/v1/wallets/{wallet}/balances/").json()["balances"]
    return int(rows[0]["available"]) if rows else 0


def test_value_is_conserved_across_many_select_and_spend_cycles(api):
    rng = random.Random(7)
    issued = [str(rng.randint(1, 500)) for _ in range(40)]
    issue(api, *[token("genesis", i, quantity=q) for i, q in enumerate(issued)])
    total_issued = sum(map(int, issued))
    inputs = Counter()
    cycles = 60
    for cycle in range(cycles):
        # The richer wallet pays the other, with change back to itself.
        funds = {wallet: available(api, wallet) for wallet in ("alice", "bob")}
        payer = max(funds, key=funds.get)
        payee = "bob" if payer == "alice" else "alice"
        assert sum(funds.values()) == total_issued  # nothing is left locked between cycles
        quantity = rng.randint(1, funds[payer])
        selection = select(api, f"cycle-{cycle}", str(quantity), wallet=payer).json()
        inputs.update((t["tx_id"], t["index"]) for t in selection["tokens"])
        change = int(selection["total"]) - quantity
        outputs = [output(0, payee, str(quantity))]
        if change:
            outputs.append(output(1, payer, str(change)))
        spend(api, f"cycle-{cycle}", outputs)
    assert max(inputs.values()) == 1, "a token was selected by two spent transactions"
    unspent = Token.objects.unspent().aggregate(s=Sum("quantity"))["s"]
    assert unspent == total_issued
    # Every token ever created is either unspent or was spent exactly once, as an input.
    spent = Token.objects.spent()
    assert spent.count() == len(inputs)
    assert set(spent.values_list("tx_id", "index")) == set(inputs)
    created = Token.objects.aggregate(s=Sum("quantity"))["s"]
    assert created == unspent + spent.aggregate(s=Sum("quantity"))["s"]
    assert set(spent.values_list("spent_by", flat=True)) <= {f"cycle-{c}" for c in range(cycles)}
    assert available(api, "alice") + available(api, "bob") == total_issued
