"""Fixtures for API tests: keys with rights and wallets, and clients that send them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from clients import authentication
from clients.models import ApiKey
from locks import replica

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
