"""GET /api/v1/wallets/{wallet}/balances/: unspent, locked and available per currency."""

from __future__ import annotations

import pytest

from tests.factories import make_lock, make_token
from tests.helpers.api import issue, select, token

pytestmark = pytest.mark.django_db


def balances(client, wallet: str = "alice", query: str = "") -> dict:
    response = client.get(f"/api/v1/wallets/{wallet}/balances/{query}")
    assert response.status_code == 200, response.json()
    return response.json()


def test_balances_split_unspent_into_locked_and_available_per_currency(api):
    issue(
        api,
        token("m", 0, quantity="70"),
        token("m", 1, quantity="30"),
        token("m", 2, currency="EUR", quantity="5"),
    )
    selected = select(api, "tx-1", "60").json()
    body = balances(api)
    assert body["wallet"] == "alice"
    by_currency = {b["currency"]: b for b in body["balances"]}
    assert by_currency["EUR"] == {
        "currency": "EUR",
        "unspent": "5",
        "locked": "0",
        "available": "5",
    }
    usd = by_currency["USD"]
    assert usd["unspent"] == "100"
    assert usd["locked"] == selected["total"]
    assert int(usd["available"]) == 100 - int(selected["total"])


def test_expired_locks_do_not_count_as_locked(api):
    held = make_token("alice", "USD", 40)
    make_lock(held, "old-spender", ttl=-5)
    make_lock(make_token("alice", "USD", 2), "live-spender", ttl=60)
    usd = balances(api)["balances"][0]
    assert (usd["unspent"], usd["locked"], usd["available"]) == ("42", "2", "40")


def test_balances_are_exact_beyond_float_precision(api):
    issue(api, token("m", 0, quantity=str(2**64 - 1)), token("m", 1, quantity="1"))
    usd = balances(api)["balances"][0]
    assert usd["unspent"] == str(2**64)  # a sum may exceed one token's maximum


def test_currency_filter_and_an_empty_wallet(api):
    issue(api, token("m", 0), token("m", 1, currency="EUR"))
    assert [b["currency"] for b in balances(api, query="?currency=EUR")["balances"]] == ["EUR"]
    assert balances(api, wallet="bob") == {"wallet": "bob", "balances": []}


@pytest.mark.parametrize("currency", ["C" * 33, "a%00b"])
def test_a_malformed_currency_filter_is_400(api, currency):
    response = api.get(f"/api/v1/wallets/alice/balances/?currency={currency}")
    assert response.status_code == 400
    assert "currency" in response.json()["fields"]
