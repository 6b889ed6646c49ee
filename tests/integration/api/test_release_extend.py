"""POST /api/v1/selections/{tx_id}/release/ and /extend/: unlocking and renewing leases."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from locks.models import Selection, TokenLock
from tests.helpers.api import issue, output, select, spend, token

pytestmark = pytest.mark.django_db

URL = "/api/v1/selections/"


@pytest.fixture
def selected(api) -> dict:
    issue(api, token("m", 0, quantity="50"), token("m", 1, quantity="30"))
    return select(api, "tx-1", "60").json()


def post(client, tx_id: str, action: str, body: dict | None = None, expect: int = 200):
    response = client.post(f"{URL}{tx_id}/{action}/", body or {}, format="json")
    assert response.status_code == expect, response.json()
    return response.json()


def test_release_unlocks_the_tokens(api, selected):
    body = post(api, "tx-1", "release")
    assert body["status"] == "released" and body["released_at"]
    assert not TokenLock.objects.filter(spender_tx_id="tx-1").exists()
    select(api, "tx-2", "80")  # the released tokens are selectable again


def test_release_is_idempotent(api, selected):
    first = post(api, "tx-1", "release")
    assert post(api, "tx-1", "release") == first
    assert Selection.objects.get(tx_id="tx-1").status == "released"


def test_release_after_spend_is_already_spent(api, selected):
    spend(api, "tx-1", [output(0, "bob", "80")])
    assert post(api, "tx-1", "release", expect=409)["code"] == "already_spent"
    assert not TokenLock.objects.filter(spender_tx_id="tx-1").exists()  # they went with the spend


def test_release_of_an_unknown_selection_is_404(api):
    assert post(api, "ghost", "release", expect=404)["code"] == "not_found"


def test_extend_renews_the_lease(api, selected):
    TokenLock.objects.filter(spender_tx_id="tx-1").update(
        expires_at=timezone.now() + timedelta(seconds=5)
    )
    body = post(api, "tx-1", "extend", {"seconds": 120})
    expires = datetime.fromisoformat(body["expires_at"])
    assert expires > timezone.now() + timedelta(seconds=100)
    for lock in TokenLock.objects.filter(spender_tx_id="tx-1"):
        assert lock.expires_at == expires


def test_extend_without_seconds_uses_the_configured_lease(api, selected, settings):
    body = post(api, "tx-1", "extend")
    lease = settings.SHERDLOCK["LEASE_SECONDS"]
    expires = datetime.fromisoformat(body["expires_at"])
    assert expires > timezone.now() + timedelta(seconds=lease - 10)


def test_extend_is_capped_at_the_maximum_lifetime(api, selected, settings):
    body = post(api, "tx-1", "extend", {"seconds": 86400})
    created = datetime.fromisoformat(body["created_at"])
    cap = timedelta(seconds=settings.SHERDLOCK["MAX_LEASE_SECONDS"])
    assert datetime.fromisoformat(body["expires_at"]) <= created + cap


def test_extend_after_expiry_is_a_lost_lease(api, selected):
    past = timezone.now() - timedelta(minutes=5)
    TokenLock.objects.filter(spender_tx_id="tx-1").update(
        created_at=past, expires_at=past + timedelta(seconds=1)
    )
    assert post(api, "tx-1", "extend", expect=409)["code"] == "lease_lost"


def test_extend_after_release_is_not_locked_and_after_spend_already_spent(api, selected):
    post(api, "tx-1", "release")
    assert post(api, "tx-1", "extend", expect=409)["code"] == "not_locked"
    issue(api, token("m2", 0, quantity="5"))
    select(api, "tx-2", "5")
    spend(api, "tx-2", [output(0, "bob", str(Selection.objects.get(tx_id="tx-2").total))])
    assert post(api, "tx-2", "extend", expect=409)["code"] == "already_spent"


@pytest.mark.parametrize("seconds", [0, -1, "60", 1.5, True, None, 86401])
def test_extend_refuses_bad_seconds(api, selected, seconds):
    before = list(TokenLock.objects.values_list("expires_at", flat=True))
    body = post(api, "tx-1", "extend", {"seconds": seconds}, expect=400)
    assert body["code"] == "invalid" and "seconds" in body["fields"]
    assert list(TokenLock.objects.values_list("expires_at", flat=True)) == before
