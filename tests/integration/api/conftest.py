"""Fixtures for API tests: keys with rights and wallets, and clients that send them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from clients import authentication
from clients.models import ApiKey
from locks import replica
from locks.models import Selection, TokenLock
from tokens.models import Token

ALL_RIGHTS = {"can_issue": True, "can_select": True, "can_read": True}


@pytest.fixture(autouse=True)
def fresh_selector():
    """Give each test a selector with an empty cache (rolled-back ids must not linger)."""
    replica.reset()
    yield
    replica.reset()


@pytest.fixture(autouse=True)
def fresh_key_cache():
    """Give each test an empty API-key cache (keys of rolled-back tests must not linger)."""
    authentication.keys.clear()
    yield
    authentication.keys.clear()


@pytest.fixture
def make_key(db) -> Callable[..., tuple[ApiKey, str]]:
    """Create an API key; return (key, the raw key to send)."""

    def make(wallets=("alice", "bob"), name="client", **rights) -> tuple[ApiKey, str]:
        fields = {**ALL_RIGHTS, **rights}
        return ApiKey.objects.create_key(name=name, wallets=list(wallets), **fields)

    return make


@pytest.fixture
def client_for() -> Callable[[str | None], APIClient]:
    """Return an APIClient sending ``raw`` as its API key (no key when None)."""

    def make(raw: str | None) -> APIClient:
        client = APIClient()
        if raw is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Api-Key {raw}")
        return client

    return make


@pytest.fixture
def api(make_key, client_for) -> APIClient:
    """A client whose key has every right over wallets alice and bob."""
    _, raw = make_key()
    return client_for(raw)


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


def counts() -> tuple[int, int, int]:
    """Return how many tokens, selections and locks exist (to prove nothing was written)."""
    return Token.objects.count(), Selection.objects.count(), TokenLock.objects.count()


def issue(client: APIClient, *tokens: dict, expect: int = 201):
    """Issue tokens through the API and assert the status."""
    response = client.post("/api/v1/tokens/", {"tokens": list(tokens)}, format="json")
    assert response.status_code == expect, response.json()
    return response


def token(
    tx_id: str = "mint",
    index: int = 0,
    wallet: str = "alice",
    currency: str = "USD",
    quantity: str = "100",
) -> dict:
    return {
        "tx_id": tx_id,
        "index": index,
        "wallet": wallet,
        "currency": currency,
        "quantity": quantity,
    }


def select(
    client: APIClient,
    tx_id: str,
    quantity: str,
    wallet: str = "alice",
    currency: str = "USD",
    expect: int | None = 201,
):
    """Select through the API and assert the status."""
    response = client.post(
        "/api/v1/selections/",
        {
            "tx_id": tx_id,
            "wallet": wallet,
            "currency": currency,
            "quantity": quantity,
        },
        format="json",
    )
    if expect is not None:
        assert response.status_code == expect, response.json()
    return response


def spend(client: APIClient, tx_id: str, outputs: list[dict], expect: int | None = 200):
    response = client.post(
        f"/api/v1/selections/{tx_id}/spend/", {"outputs": outputs}, format="json"
    )
    if expect is not None:
        assert response.status_code == expect, response.json()
    return response


def output(index: int, wallet: str, quantity: str, currency: str = "USD") -> dict:
    return {"index": index, "wallet": wallet, "currency": currency, "quantity": quantity}
