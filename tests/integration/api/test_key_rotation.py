"""Rotating a key: a new key in the old key's namespace takes over its open selections."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from clients.models import ApiKey
from locks.models import Selection, TokenLock
from tests.helpers.api import issue, output, select, spend, token

pytestmark = pytest.mark.django_db


@pytest.fixture
def old(make_key, client_for):
    """The key to replace, with two open selections in wallet alice."""
    key, raw = make_key(wallets=["alice"], name="old")
    client = client_for(raw)
    issue(client, token("mint", 0, quantity="10"), token("mint", 1, currency="EUR", quantity="20"))
    select(client, "pay-1", "10")
    select(client, "pay-2", "20", currency="EUR")
    return key


def takes_over(new) -> None:
    """Assert that ``new`` sees, spends and releases the old key's open selections."""
    listed = new.get("/api/v1/selections/?wallet=alice").json()["results"]
    assert sorted(s["tx_id"] for s in listed) == ["pay-1", "pay-2"]
    assert len(new.get("/api/v1/locks/").json()["results"]) == 2
    assert new.get("/api/v1/selections/pay-1/").status_code == 200
    spend(new, "pay-1", [output(0, "alice", "10")])
    assert new.post("/api/v1/selections/pay-2/release/").status_code == 200
    assert set(Selection.objects.values_list("tx_id", "status")) == {
        ("pay-1", "spent"),
        ("pay-2", "released"),
    }
    assert not TokenLock.objects.exists()


def test_create_api_key_gives_a_new_key_the_old_keys_namespace(old, client_for):
    out, err = StringIO(), StringIO()
    call_command(
        "create_api_key",
        "new",
        "--wallet",
        "alice",
        "--select",
        "--namespace",
        old.namespace,
        stdout=out,
        stderr=err,
    )
    new = ApiKey.objects.get(name="new")
    assert new.namespace == old.namespace and new.prefix != old.prefix
    assert f"shares namespace {old.namespace!r} with {old.prefix} (old)" in err.getvalue()
    takes_over(client_for(out.getvalue().strip()))


def test_without_a_namespace_a_new_key_gets_its_own(old):
    call_command(
        "create_api_key", "fresh", "--wallet", "alice", stdout=StringIO(), stderr=StringIO()
    )
    fresh = ApiKey.objects.get(name="fresh")
    assert fresh.namespace == f"key-{fresh.prefix}" != old.namespace


@pytest.mark.parametrize("namespace", [" ", "a\x00b", "x" * 65])
def test_create_api_key_refuses_an_unusable_namespace(namespace):
    with pytest.raises(CommandError, match="namespace"):
        call_command(
            "create_api_key",
            "bad",
            "--wallet",
            "alice",
            "--namespace",
            namespace,
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert not ApiKey.objects.exists()


def test_the_admin_gives_a_new_key_the_old_keys_namespace(old, admin_client, client_for):
    response = admin_client.post(
        reverse("admin:clients_apikey_add"),
        {
            "name": "new",
            "wallets": "alice",
            "namespace": old.namespace,
            "can_select": "on",
            "can_read": "on",
            "_save": "Save",
        },
        follow=True,
    )
    assert response.status_code == 200
    text = " ".join(str(m) for m in response.context["messages"])
    raw = re.search(r"The API key for new is: (\S+)\. ", text)
    assert raw, text
    new = ApiKey.objects.get(name="new")
    assert new.namespace == old.namespace
    assert f"shares namespace {old.namespace!r} with {old.prefix} (old)" in text
    takes_over(client_for(raw[1]))

    # Once a key exists its namespace is fixed: it could strand or take over selections.
    change = admin_client.get(reverse("admin:clients_apikey_change", args=[new.pk]))
    assert 'name="namespace"' not in change.content.decode()
    assert old.namespace in change.content.decode()


def test_the_admin_refuses_an_unusable_namespace(admin_client):
    response = admin_client.post(
        reverse("admin:clients_apikey_add"),
        {"name": "bad", "wallets": "alice", "namespace": "a\tb", "can_read": "on", "_save": "Save"},
    )
    assert response.status_code == 200  # the form again, with its error
    assert "namespace" in response.context["adminform"].form.errors
    assert not ApiKey.objects.exists()
