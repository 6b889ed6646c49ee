"""API keys: authentication (401), rights and wallet scope (403/404), staff sessions, admin."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from clients import authentication
from clients.models import ApiKey
from locks.models import Selection, TokenLock
from tests.factories import make_lock, make_token
from tests.helpers.api import counts, issue, output, select, token

pytestmark = pytest.mark.django_db

SELECTION = {"tx_id": "tx", "wallet": "alice", "currency": "USD", "quantity": "1"}
ENDPOINTS = [
    ("get", "/api/v1/tokens/", None),
    ("post", "/api/v1/tokens/", {"tokens": [token()]}),
    ("get", "/api/v1/wallets/alice/balances/", None),
    ("get", "/api/v1/selections/", None),
    ("post", "/api/v1/selections/", SELECTION),
    ("get", "/api/v1/selections/tx/", None),
    ("post", "/api/v1/selections/tx/spend/", {"outputs": []}),
    ("post", "/api/v1/selections/tx/release/", {}),
    ("post", "/api/v1/selections/tx/extend/", {}),
    ("get", "/api/v1/locks/", None),
]
RIGHT_FOR = {"/api/v1/tokens/": "can_issue"}


def call(client: APIClient, method: str, url: str, body: dict | None):
    if body is None:
        return getattr(client, method)(url)
    return getattr(client, method)(url, body, format="json")


@pytest.mark.parametrize("method, url, body", ENDPOINTS)
def test_no_key_is_401_with_a_challenge(anon, method, url, body):
    before = counts()
    response = call(anon, method, url, body)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Api-Key"
    assert counts() == before


@pytest.mark.parametrize(
    "header",
    [
        "Api-Key nope.nope",
        "Api-Key ",
        "Api-Key bad\x01key",
        "api-key " + "x" * 500,
    ],
)
def test_an_invalid_key_is_401(header, make_key):
    make_key()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/tokens/")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert response["WWW-Authenticate"] == "Api-Key"


def test_another_scheme_counts_as_no_key(make_key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer something")
    assert client.get("/api/v1/tokens/").json()["code"] == "not_authenticated"


def test_revoked_and_expired_keys_are_401_once_the_key_cache_has_let_them_go(
    make_key, client_for, monkeypatch
):
    now = [1000.0]
    monkeypatch.setattr(authentication.keys, "_clock", lambda: now[0])
    revoked, raw_revoked = make_key(name="revoked")
    expired, raw_expired = make_key(name="expired")
    for raw in (raw_revoked, raw_expired):
        assert client_for(raw).get("/api/v1/tokens/").status_code == 200
    revoked.revoked = True
    revoked.save()
    expired.expiry_date = timezone.now() - timedelta(seconds=1)
    expired.save()
    assert client_for(raw_revoked).get("/api/v1/tokens/").status_code == 200  # still cached
    now[0] += authentication.KEY_CACHE_SECONDS
    for raw in (raw_revoked, raw_expired):
        response = client_for(raw).get("/api/v1/tokens/")
        assert response.status_code == 401
        assert response.json()["code"] == "authentication_failed"


def test_a_cached_key_still_checks_the_secret(make_key, client_for):
    key, raw = make_key(name="cached")
    assert client_for(raw).get("/api/v1/tokens/").status_code == 200
    forged = f"{key.prefix}.{'x' * 32}"
    with CaptureQueriesContext(connection) as queries:
        assert client_for(forged).get("/api/v1/tokens/").status_code == 401
    assert not [q for q in queries if "clients_apikey" in q["sql"]]  # answered from the cache


@pytest.mark.parametrize("method, url, body", ENDPOINTS)
def test_a_key_without_the_right_is_403(make_key, client_for, method, url, body):
    right = "can_read" if method == "get" else RIGHT_FOR.get(url, "can_select")
    _, raw = make_key(**{right: False})
    before = counts()
    response = call(client_for(raw), method, url, body)
    assert response.status_code == 403
    assert response.json() == {
        "code": "permission_denied",
        "detail": response.json()["detail"],
        "fields": {},
    }
    assert f"lacks the {right.removeprefix('can_')} right" in response.json()["detail"]
    assert counts() == before


def test_each_right_alone_grants_only_its_operations(make_key, client_for):
    _, raw = make_key(can_issue=True, can_select=False, can_read=False)
    issuer = client_for(raw)
    issue(issuer, token())
    assert select(issuer, "tx", "1", expect=403).json()["code"] == "permission_denied"
    assert issuer.get("/api/v1/tokens/").status_code == 403


@pytest.mark.parametrize(
    "tokens",
    [
        [token(wallet="carol")],
        [token(wallet="alice"), token(index=1, wallet="carol")],
    ],
    ids=["other", "mixed"],
)
def test_issuing_to_a_wallet_outside_the_scope_is_403_and_writes_nothing(api, tokens):
    before = counts()
    response = api.post("/api/v1/tokens/", {"tokens": tokens}, format="json")
    assert response.status_code == 403
    assert "carol" in response.json()["detail"]
    assert counts() == before


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/wallets/carol/balances/",
        "/api/v1/tokens/?wallet=carol",
        "/api/v1/selections/?wallet=carol",
        "/api/v1/locks/?wallet=carol",
    ],
)
def test_reading_a_wallet_outside_the_scope_is_403(api, url):
    response = api.get(url)
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_selecting_from_a_wallet_outside_the_scope_is_403(api):
    make_token("carol", quantity=10)
    before = counts()
    response = select(api, "steal", "5", wallet="carol", expect=403)
    assert response.json()["code"] == "permission_denied"
    assert counts() == before


@pytest.fixture
def carols_selection(make_key, client_for):
    _, raw = make_key(wallets=["carol"], name="carol", namespace="carol-backend")
    carol = client_for(raw)
    issue(carol, token("c", 0, wallet="carol", quantity="10"))
    select(carol, "carol-tx", "10", wallet="carol")
    return carol


@pytest.mark.parametrize(
    "method, suffix, body",
    [
        ("get", "", None),
        ("post", "spend/", {"outputs": [output(0, "alice", "10")]}),
        ("post", "release/", {}),
        ("post", "extend/", {}),
    ],
)
def test_another_clients_selection_is_404_not_403(api, carols_selection, method, suffix, body):
    before = counts()
    response = call(api, method, f"/api/v1/selections/carol-tx/{suffix}", body)
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert counts() == before
    assert Selection.objects.get(tx_id="carol-tx").status == "locked"
    assert TokenLock.objects.filter(spender_tx_id="carol-tx").exists()


def test_listings_without_a_wallet_filter_show_only_the_keys_wallets(api, carols_selection):
    issue(api, token("a", 0, quantity="10"))
    select(api, "alice-tx", "10")
    make_lock(make_token("carol", tx_id="c-extra"), "carol-2")
    assert {t["wallet"] for t in api.get("/api/v1/tokens/").json()["results"]} == {"alice"}
    assert [s["tx_id"] for s in api.get("/api/v1/selections/").json()["results"]] == ["alice-tx"]
    assert {lock["wallet"] for lock in api.get("/api/v1/locks/").json()["results"]} == {"alice"}


def test_spend_outputs_may_pay_a_wallet_outside_the_scope(api):
    issue(api, token(quantity="10"))
    select(api, "pay", "10")
    response = api.post(
        "/api/v1/selections/pay/spend/", {"outputs": [output(0, "carol", "10")]}, format="json"
    )
    assert response.status_code == 200, response.json()


def test_an_all_wallets_key_may_use_any_wallet(make_key, client_for, carols_selection):
    _, raw = make_key(wallets=[], all_wallets=True, name="ops", namespace="carol-backend")
    ops = client_for(raw)
    assert ops.get("/api/v1/selections/carol-tx/").status_code == 200
    issue(ops, token("z", 0, wallet="zed"))
    assert {t["wallet"] for t in ops.get("/api/v1/tokens/").json()["results"]} == {"carol", "zed"}


def test_transaction_ids_belong_to_the_client_that_uses_them(
    make_key, client_for, carols_selection
):
    # Another client sees carol's wallet (all wallets) but not her transaction ids: it can
    # neither look hers up, nor list them, nor be kept from using the same id itself.
    _, raw = make_key(wallets=[], all_wallets=True, name="other")
    other = client_for(raw)
    assert other.get("/api/v1/selections/carol-tx/").status_code == 404
    assert other.get("/api/v1/selections/?wallet=carol").json()["results"] == []
    assert other.get("/api/v1/locks/?wallet=carol").json()["results"] == []
    issue(other, token("o", 0, wallet="dan", quantity="5"))
    assert select(other, "carol-tx", "5", wallet="dan").json()["wallet"] == "dan"
    issue(other, token("c", 0, wallet="dan", quantity="1"))  # carol's token id, other's namespace


VIEW_ALL = ("view_token", "view_selection", "view_tokenlock")
STAFF_READS = {
    "/api/v1/tokens/": {"view_token"},
    "/api/v1/wallets/carol/balances/": {"view_token", "view_tokenlock"},
    "/api/v1/selections/": {"view_selection", "view_token"},
    "/api/v1/selections/carol-tx/": {"view_selection", "view_token"},
    "/api/v1/locks/": {"view_tokenlock", "view_token"},
}


def staff_client(*codenames: str, name: str = "operator") -> APIClient:
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def staff(carols_selection) -> APIClient:
    return staff_client(*VIEW_ALL)


def test_staff_sessions_with_view_permissions_read_every_wallet(staff):
    assert staff.get("/api/v1/selections/carol-tx/").status_code == 200
    assert staff.get("/api/v1/wallets/carol/balances/").status_code == 200
    for url in ("/api/v1/tokens/", "/api/v1/selections/", "/api/v1/locks/"):
        response = staff.get(url)
        assert response.status_code == 200
        assert response.json()["results"]


def test_staff_sessions_may_not_write(staff):
    before = counts()
    assert staff.post("/api/v1/tokens/", {"tokens": [token()]}, format="json").status_code == 403
    assert staff.post("/api/v1/selections/carol-tx/release/").status_code == 403
    assert counts() == before


@pytest.mark.parametrize(
    "granted",
    [
        (),
        ("view_token",),
        ("view_selection",),
        ("view_tokenlock",),
        ("view_token", "view_selection"),
        ("view_token", "view_tokenlock"),
    ],
    ids=repr,
)
def test_staff_sessions_read_only_what_their_permissions_show(carols_selection, granted):
    client = staff_client(*granted)
    for url, needed in STAFF_READS.items():
        response = client.get(url)
        if needed <= set(granted):
            assert response.status_code == 200, (url, response.json())
        else:
            assert response.status_code == 403, (url, granted)
            assert response.json()["code"] == "permission_denied"


def test_superusers_read_without_explicit_permissions(carols_selection, admin_user):
    client = APIClient()
    client.force_login(admin_user)
    assert all(client.get(url).status_code == 200 for url in STAFF_READS)


def test_non_staff_sessions_are_refused(carols_selection):
    user = get_user_model().objects.create_user("someone", password="pw")
    client = APIClient()
    client.force_login(user)
    response = client.get("/api/v1/tokens/")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_the_admin_shows_a_new_key_once_with_its_wallets_and_rights(admin_client, client_for):
    response = admin_client.post(
        reverse("admin:clients_apikey_add"),
        {
            "name": "wallet-backend",
            "wallets": "alice,bob",
            "can_select": "on",
            "can_read": "on",
        },
        follow=True,
    )
    assert response.status_code == 200
    key = ApiKey.objects.get(name="wallet-backend")
    assert (key.wallets, key.can_issue, key.can_select) == (["alice", "bob"], False, True)
    shown = [str(m) for m in response.context["messages"]]
    raw = shown[0].split("The API key for wallet-backend is: ")[1].split(". ")[0]
    assert client_for(raw).get("/api/v1/wallets/alice/balances/").status_code == 200
    changelist = admin_client.get(reverse("admin:clients_apikey_changelist") + "?q=alice")
    assert b"wallet-backend" in changelist.content and b"alice, bob" in changelist.content
    assert raw.encode() not in changelist.content
    change = admin_client.get(reverse("admin:clients_apikey_change", args=[key.pk]))
    assert change.status_code == 200 and raw.encode() not in change.content


def test_create_api_key_prints_a_working_key_once(client_for):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_api_key", "backend", "--wallet", "alice", "--select", stdout=out, stderr=err
    )
    raw = out.getvalue().strip()
    key = ApiKey.objects.get(name="backend")
    assert (key.wallets, key.can_issue, key.can_select, key.can_read) == (
        ["alice"],
        False,
        True,
        True,
    )
    assert raw.startswith(key.prefix) and raw not in err.getvalue()
    assert key.hashed_key != raw and raw not in key.hashed_key
    client = client_for(raw)
    assert client.get("/api/v1/wallets/alice/balances/").status_code == 200
    assert client.post("/api/v1/tokens/", {"tokens": [token()]}, format="json").status_code == 403


@pytest.mark.parametrize("argv", [["x"], ["x", "--wallet", ""], ["", "--all-wallets"]])
def test_create_api_key_refuses_unscoped_or_bad_input(argv):
    with pytest.raises(CommandError):
        call_command("create_api_key", *argv, stdout=io.StringIO(), stderr=io.StringIO())
    assert not ApiKey.objects.exists()
