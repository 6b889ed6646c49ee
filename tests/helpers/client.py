"""The client distribution (``sherdlock_client``) as the end-to-end tests drive it.

Either variant behind one awaitable surface (``Awaited``), an API key for the wallets the
tests use, and tokens to issue.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sherdlock_client import AsyncClient, Client, NewToken


def api_key(**rights: Any) -> str:
    from clients.models import ApiKey

    wallets = ["alice", "bob", "carol", "dave"]
    _, raw = ApiKey.objects.create_key(
        name="client", wallets=wallets, can_issue=True, can_select=True, **rights
    )
    return raw


class Awaited:
    """Either client behind one awaitable surface: listings come back as lists."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self.client = client

    def __getattr__(self, name: str):
        method = getattr(self.client, name)

        async def call(*args, **kwargs):
            result = method(*args, **kwargs)
            if isinstance(result, Iterator):
                return list(result)
            if isinstance(result, AsyncIterator):
                return [item async for item in result]
            return await result if inspect.isawaitable(result) else result

        return call


def mint(wallet: str, currency: str, *quantities: int, tx: str = "mint") -> list[NewToken]:
    return [NewToken(f"{tx}-{wallet}", i, wallet, currency, q) for i, q in enumerate(quantities)]


def clients(base: str, key: str, variant: str, **options: Any) -> Client | AsyncClient:
    return (Client if variant == "sync" else AsyncClient)(base, key, **options)
