"""Multi-currency selections through the API: all legs or none, spend per currency, repeats."""

from __future__ import annotations

import pytest

from locks.models import FailedSelection, Selection, TokenLock
from tests.helpers.api import counts, issue, output, select, spend, token

pytestmark = pytest.mark.django_db

URL = "/api/v1/selections/"
LEGS = [{"currency": "USD", "quantity": "60"}, {"currency": "EUR", "quantity": "5"}]


@pytest.fixture
def funded(api):
    issue(
        api,
        token("m", 0, quantity="50"),
        token("m", 1, quantity="30"),
        token("m", 2, currency="EUR", quantity="4"),
        token("m", 3, currency="EUR", quantity="3"),
    )
    return api


def select_legs(client, tx_id="tx-1", legs=LEGS, expect=201, **extra):
    body = {"tx_id": tx_id, "wallet": "alice", "legs": legs, **extra}
    response = client.post(URL, body, format="json")
    assert response.status_code == expect, response.json()
    return response.json()


def test_every_leg_is_locked_under_one_fence_and_shown(funded):
    body = select_legs(funded)
    assert [leg["currency"] for leg in body["legs"]] == ["EUR", "USD"]
    eur, usd = body["legs"]
    assert (eur["quantity"], eur["total"], eur["change"]) == ("5", "7", "2")
    assert usd["quantity"] == "60" and usd["total"] == "80" and usd["change"] == "20"
    assert len(eur["tokens"]) == 2 and len(usd["tokens"]) == 2
    assert (body["currency"], body["quantity"], body["total"]) == ("EUR", "5", "7")
    assert body["inputs"] == 4 and len(body["tokens"]) == 4
    locks = TokenLock.objects.filter(spender_tx_id="tx-1")
    assert {lock.fence for lock in locks} == {body["fence"]} and locks.count() == 4
    assert funded.get(f"{URL}tx-1/").json() == body
    listed = funded.get(URL, {"wallet": "alice"}).json()["results"]
    assert listed[0]["legs"] == body["legs"]


def test_one_currency_answers_no_legs(funded):
    assert select(funded, "tx-1", "10").json()["legs"] is None


def test_a_failing_leg_leaves_nothing_locked_and_no_selection(funded):
    before = counts()
    legs = [{"currency": "EUR", "quantity": "5"}, {"currency": "USD", "quantity": "81"}]
    response = funded.post(URL, {"tx_id": "tx-1", "wallet": "alice", "legs": legs}, format="json")
    assert response.status_code == 409
    body = response.json()
    assert (body["code"], body["leg"], body["available"]) == ("insufficient_funds", "USD", "80")
    assert counts() == before
    assert FailedSelection.objects.get().currency == "USD"
    # Everything is free again: each currency can be selected whole.
    select(funded, "tx-2", "7", currency="EUR")
    select(funded, "tx-3", "80")


def test_a_leg_held_by_others_answers_funds_locked_and_releases_the_first(funded):
    select(funded, "other", "80")
    before = counts()
    response = funded.post(URL, {"tx_id": "tx-1", "wallet": "alice", "legs": LEGS}, format="json")
    assert response.status_code == 409
    assert (response.json()["code"], response.json()["leg"]) == ("funds_locked", "USD")
    assert counts() == before


def test_identical_repeat_answers_200_and_other_terms_conflict(funded):
    first = select_legs(funded)
    assert select_legs(funded, legs=list(reversed(LEGS)), expect=200) == first
    other = [{"currency": "USD", "quantity": "60"}, {"currency": "EUR", "quantity": "6"}]
    assert select_legs(funded, legs=other, expect=409)["code"] == "tx_id_conflict"
    # A one-currency request matching the first leg is not a repeat either.
    assert select(funded, "tx-1", "5", currency="EUR", expect=409).json()["code"] == (
        "tx_id_conflict"
    )
    assert Selection.objects.count() == 1 and TokenLock.objects.count() == 4


def test_a_tx_id_of_one_currency_is_not_taken_by_legs(funded):
    select(funded, "tx-1", "10")
    assert select_legs(funded, expect=409)["code"] == "tx_id_conflict"
    assert TokenLock.objects.count() == 1


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"currency": "USD"}, "currency"),
        ({"quantity": "5"}, "quantity"),
        ({"wait": 1}, "wait"),
        ({"legs": LEGS[:1]}, "legs"),
        ({"legs": [LEGS[0], LEGS[0]]}, "legs"),
        ({"legs": [{"currency": f"C{i}", "quantity": "1"} for i in range(9)]}, "legs"),
        ({"legs": [LEGS[0], {"currency": "EUR", "quantity": 5}]}, "legs.1.quantity"),
        ({"legs": LEGS, "max_change": "1"}, "max_change"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(funded, extra, field):
    before = counts()
    body = select_legs(funded, **{"legs": LEGS, **extra}, expect=400)
    assert body["code"] == "invalid" and field in body["fields"], body
    assert counts() == before


def test_spend_conserves_value_per_currency(funded):
    select_legs(funded)
    bad = [
        [output(0, "bob", "80"), output(1, "bob", "7", "EUR"), output(2, "bob", "1", "GBP")],
        [output(0, "bob", "80"), output(1, "bob", "6", "EUR")],
        [output(0, "bob", "87")],
        [output(0, "bob", "80"), output(1, "bob", "8", "EUR"), output(2, "bob", "-1")][:2],
    ]
    for outputs in bad:
        response = spend(funded, "tx-1", outputs, expect=422)
        assert response.json()["code"] == "value_not_conserved"
    good = [output(0, "bob", "60"), output(1, "alice", "20"), output(2, "bob", "7", "EUR")]
    body = spend(funded, "tx-1", good).json()
    assert body["status"] == "spent" and len(body["outputs"]) == 3
    assert spend(funded, "tx-1", good).json() == body  # a repeat answers the same
    assert TokenLock.objects.count() == 0
    balances = funded.get("/api/v1/wallets/bob/balances/").json()
    assert {b["currency"]: b["unspent"] for b in balances["balances"]} == {
        "EUR": "7",
        "USD": "60",
    }


def test_release_and_extend_cover_every_leg(funded):
    select_legs(funded)
    extended = funded.post(f"{URL}tx-1/extend/", {"seconds": 120}, format="json")
    assert extended.status_code == 200 and extended.json()["legs"]
    released = funded.post(f"{URL}tx-1/release/", {}, format="json")
    assert released.status_code == 200 and released.json()["status"] == "released"
    assert TokenLock.objects.count() == 0
    assert funded.post(f"{URL}tx-1/release/", {}, format="json").status_code == 200
    select(funded, "tx-2", "80")
    select(funded, "tx-3", "7", currency="EUR")


def test_a_valid_legs_request_is_validated_the_quick_way():
    from common.serializers import SLOW, _quick_mapping
    from locks.request_serializers import select_request

    data = {"tx_id": "tx-1", "wallet": "alice", "legs": LEGS, "strategy": "fewest_tokens"}
    serializer = select_request(data)
    quick = _quick_mapping(serializer, data)
    assert quick is not SLOW
    assert serializer.is_valid() and dict(serializer.validated_data) == {
        "tx_id": "tx-1",
        "wallet": "alice",
        "strategy": "fewest_tokens",
        "legs": [{"currency": "USD", "quantity": 60}, {"currency": "EUR", "quantity": 5}],
    }
