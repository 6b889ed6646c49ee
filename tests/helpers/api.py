"""Calling the REST API from tests: tokens to issue, selections, spends, and row counts."""

from __future__ import annotations

from rest_framework.test import APIClient

from locks.models import Selection, TokenLock
from tokens.models import Token


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
