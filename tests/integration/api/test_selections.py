"""POST/GET /api/v1/selections/: selecting, idempotent repeats, conflicts, reading, listing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from locks import replica
from locks.models import FailedSelection, Selection, TokenLock
from sherdlock import BackoffPolicy, SelectorConfig
from tests.helpers.api import counts, issue, select, token

pytestmark = pytest.mark.django_db

URL = "/api/v1/selections/"


@pytest.fixture
def funded(api):
    issue(
        api,
        token("m", 0, quantity="50"),
        token("m", 1, quantity="30"),
        token("m", 2, quantity="20"),
    )
    return api


def test_select_locks_tokens_covering_the_quantity(funded):
    response = select(funded, "tx-1", "60")
    body = response.json()
    assert response["Location"] == "/api/v1/selections/tx-1/"
    assert {k: body[k] for k in ("tx_id", "wallet", "currency", "quantity", "status")} == {
        "tx_id": "tx-1",
        "wallet": "alice",
        "currency": "USD",
        "quantity": "60",
        "status": "locked",
    }
    assert int(body["total"]) >= 60
    assert sum(int(t["quantity"]) for t in body["tokens"]) == int(body["total"])
    assert body["change"] == str(int(body["total"]) - 60)
    assert {t["tx_id"] for t in body["tokens"]} == {"m"}
    assert body["fence"] > 0 and body["created_at"] and body["expires_at"]
    selection = Selection.objects.get(tx_id="tx-1")
    assert TokenLock.objects.filter(spender_tx_id="tx-1").count() == len(selection.token_ids)


def test_an_identical_repeat_answers_200_with_the_same_body(funded):
    first = select(funded, "tx-1", "60").json()
    again = select(funded, "tx-1", "60", expect=200)
    assert again.json() == first
    assert Selection.objects.count() == 1


def test_the_same_tx_id_with_other_terms_is_a_conflict(funded):
    select(funded, "tx-1", "60")
    before = counts()
    response = select(funded, "tx-1", "61", expect=409)
    assert response.json()["code"] == "tx_id_conflict"
    assert counts() == before


def test_short_supply_is_insufficient_funds_with_the_available_quantity(funded):
    before = counts()
    response = select(funded, "tx-1", "101", expect=409)
    body = response.json()
    assert body["code"] == "insufficient_funds"
    assert body["available"] == "100"
    assert body["fields"] == {}
    assert counts() == before
    assert FailedSelection.objects.filter(tx_id="tx-1", outcome="insufficient_funds").exists()


def test_supply_held_by_others_is_funds_locked_with_retry_after(funded, monkeypatch):
    # No refetch and no backoff round: the answer comes from the first round.
    untiring = SelectorConfig(max_retries=0, backoff=BackoffPolicy(attempts=0))
    monkeypatch.setattr(replica, "selector_config", lambda listening=False: untiring)
    replica.reset()
    select(funded, "holder", "100")
    response = select(funded, "waiter", "10", expect=409)
    assert response.json()["code"] == "funds_locked"
    assert response.json()["available"] == "0"
    assert int(response["Retry-After"]) >= 1
    assert not Selection.objects.filter(tx_id="waiter").exists()
    assert not TokenLock.objects.filter(spender_tx_id="waiter").exists()


def test_get_a_selection(funded):
    created = select(funded, "tx-1", "60").json()
    response = funded.get(f"{URL}tx-1/")
    assert response.status_code == 200
    assert response.json() == created


def test_get_an_unknown_selection_is_404(api):
    response = api.get(f"{URL}nope/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_list_filters_by_wallet_currency_and_status(api):
    issue(api, token("m", 0), token("m", 1, wallet="bob"), token("m", 2, currency="EUR"))
    select(api, "a-usd", "10")
    select(api, "b-usd", "10", wallet="bob")
    select(api, "a-eur", "10", currency="EUR")
    api.post(f"{URL}a-eur/release/")

    def ids(query: str) -> list[str]:
        response = api.get(f"{URL}?{query}")
        assert response.status_code == 200, response.json()
        return [s["tx_id"] for s in response.json()["results"]]

    assert ids("") == ["a-eur", "b-usd", "a-usd"]
    assert ids("wallet=alice") == ["a-eur", "a-usd"]
    assert ids("currency=USD") == ["b-usd", "a-usd"]
    assert ids("status=released") == ["a-eur"]
    assert ids("status=locked&wallet=bob") == ["b-usd"]
    listed = api.get(f"{URL}?wallet=bob").json()["results"][0]
    assert listed == api.get(f"{URL}b-usd/").json()


def test_an_unknown_status_filter_is_refused(api):
    response = api.get(f"{URL}?status=bogus")
    assert response.status_code == 400
    assert "status" in response.json()["fields"]


def test_a_tx_id_with_a_slash_is_refused_since_it_could_not_be_addressed(funded):
    before = counts()
    response = select(funded, "a/b", "10", expect=400)
    assert "tx_id" in response.json()["fields"]
    assert counts() == before


def test_a_selection_reports_its_real_state_lost_then_expired(funded):
    select(funded, "tx-state", "10")
    TokenLock.objects.filter(spender_tx_id="tx-state").delete()  # e.g. an operator's release
    assert funded.get(f"{URL}tx-state/").json()["status"] == "lost"
    past = timezone.now() - timedelta(minutes=5)  # before now(), the test transaction's start
    Selection.objects.filter(tx_id="tx-state").update(expires_at=past)
    assert funded.get(f"{URL}tx-state/").json()["status"] == "expired"
    listed = funded.get(f"{URL}?status=expired").json()["results"]
    assert [(s["tx_id"], s["status"]) for s in listed] == [("tx-state", "expired")]
    assert funded.get(f"{URL}?status=locked").json()["results"] == []


@pytest.mark.parametrize(
    "header, applied",
    [
        ("wait=5", "wait=5"),
        ("respond-async, wait=7", "wait=7"),
        ('wait="3"', "wait=3"),
        ("wait=600", "wait=60"),  # capped at the longest wait the server grants
        ("wait=soon", None),
        ("handling=lenient", None),  # hints: ignored when not understood
    ],
)
def test_a_prefer_wait_header_is_honoured_and_says_so(funded, header, applied):
    response = funded.post(
        URL,
        {"tx_id": f"tx-{len(header)}", "wallet": "alice", "currency": "USD", "quantity": "10"},
        format="json",
        HTTP_PREFER=header,
    )
    assert response.status_code == 201
    assert response.get("Preference-Applied") == applied


def test_a_wait_field_outside_its_range_is_refused(funded):
    for wait in (-1, 61, "5", 1.5):
        response = funded.post(
            URL,
            {"tx_id": "tx", "wallet": "alice", "currency": "USD", "quantity": "10", "wait": wait},
            format="json",
        )
        assert response.status_code == 400 and "wait" in response.json()["fields"], wait


def test_funds_locked_tells_how_long_to_wait_precisely(funded):
    select(funded, "tx-all", "100")
    response = select(funded, "tx-more", "1", expect=409)
    body = response.json()
    assert body["code"] == "funds_locked" and 0 < body["retry_after"] <= 30
    assert int(response["Retry-After"]) >= body["retry_after"]
