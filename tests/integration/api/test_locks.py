"""GET /api/v1/locks/: the lock table joined with its tokens."""

from __future__ import annotations

import pytest

from clients.models import ApiKey
from tests.factories import make_selection, make_token

pytestmark = pytest.mark.django_db

URL = "/api/v1/locks/"


@pytest.fixture
def locks(api):
    """Locks of three selections of the ``api`` client, in wallets alice and bob."""
    namespace = ApiKey.objects.get().namespace
    return [
        make_selection(
            [make_token(wallet, currency, quantity, **token)], spender, ttl=ttl, namespace=namespace
        )
        for wallet, currency, quantity, token, spender, ttl in [
            ("alice", "USD", 10, {"tx_id": "t-live", "index": 2}, "spender-a", 60),
            ("alice", "EUR", 20, {"tx_id": "t-old"}, "spender-b", -5),
            ("bob", "USD", 30, {"tx_id": "t-bob"}, "spender-c", 60),
        ]
    ]


def listed(client, query: str = "") -> list[dict]:
    response = client.get(f"{URL}?{query}")
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def test_locks_are_listed_with_their_token(api, locks):
    rows = {row["token"]: row for row in listed(api)}
    assert set(rows) == {"t-live:2", "t-old:0", "t-bob:0"}
    live = rows["t-live:2"]
    assert {
        k: live[k] for k in ("wallet", "currency", "quantity", "spender_tx_id", "fence", "state")
    } == {
        "wallet": "alice",
        "currency": "USD",
        "quantity": "10",
        "spender_tx_id": "spender-a",
        "fence": locks[0].fence,
        "state": "live",
    }
    assert live["created_at"] and live["expires_at"]
    assert rows["t-old:0"]["state"] == "expired"


@pytest.mark.parametrize(
    "query, expected",
    [
        ("wallet=alice", {"t-live:2", "t-old:0"}),
        ("currency=USD", {"t-live:2", "t-bob:0"}),
        ("spender_tx_id=spender-b", {"t-old:0"}),
        ("state=live", {"t-live:2", "t-bob:0"}),
        ("state=expired", {"t-old:0"}),
        ("wallet=alice&state=live", {"t-live:2"}),
    ],
)
def test_locks_filter(api, locks, query, expected):
    assert {row["token"] for row in listed(api, query)} == expected


def test_locks_page_with_a_cursor(api, locks):
    first = api.get(f"{URL}?page_size=2").json()
    assert len(first["results"]) == 2 and first["next"]
    second = api.get(first["next"]).json()
    seen = [r["token"] for r in first["results"] + second["results"]]
    assert sorted(seen) == ["t-bob:0", "t-live:2", "t-old:0"]


def test_an_unknown_state_is_refused(api):
    response = api.get(f"{URL}?state=dead")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
