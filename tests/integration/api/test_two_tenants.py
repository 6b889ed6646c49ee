"""Two clients share wallet alice: each sees the wallet, neither sees the other's transactions.

Both keys drive every endpoint (and every filter of every listing) over the same wallet, with
selections in each state and one tx id both chose; an operator then drives every admin page
over the same rows. A client's transactions are its selections' tx ids and fences; the
wallet's tokens (named by the transactions that issued them) are the wallet's, seen by both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from clients.models import ApiKey
from locks.models import LockAudit, Selection, TokenLock
from tests.helpers.api import issue, output, select, spend, token

pytestmark = pytest.mark.django_db

SELECTIONS = "/api/v1/selections/"
STATES = ("open", "released", "extended", "spent", "expired", "lost", "legs")


@dataclass
class Tenant:
    name: str  # "a" or "b": its tx ids start with it
    key: ApiKey
    client: APIClient
    tx_ids: set[str] = field(default_factory=set)

    @property
    def selections(self):
        return Selection.objects.filter(namespace=self.key.namespace)

    @property
    def fences(self) -> set[int]:
        return set(self.selections.values_list("fence", flat=True))


def run_a_day(tenant: Tenant) -> None:
    """Select in wallet alice, and leave a selection in each state; one tx id is "same"."""
    me, client = tenant.name, tenant.client
    tenant.tx_ids = {f"{me}-{state}" for state in STATES}
    for state in ("open", "released", "extended", "spent", "expired", "lost"):
        select(client, f"{me}-{state}", "10")
    legs = [{"currency": "EUR", "quantity": "5"}, {"currency": "USD", "quantity": "10"}]
    response = client.post(
        SELECTIONS, {"tx_id": f"{me}-legs", "wallet": "alice", "legs": legs}, format="json"
    )
    assert response.status_code == 201, response.json()
    select(client, "same", "10")
    select(client, f"{me}-short", "100000", expect=409)  # recorded as a failed selection
    tenant.tx_ids.add(f"{me}-short")
    assert client.post(f"{SELECTIONS}{me}-released/release/").status_code == 200
    extended = client.post(f"{SELECTIONS}{me}-extended/extend/", {"seconds": 90}, format="json")
    assert extended.status_code == 200
    # Spent into a wallet of its own: outputs in alice would be alice's tokens, seen by both.
    spend(client, f"{me}-spent", [output(0, f"{me}-only", "10")])
    expired = tenant.selections.filter(tx_id=f"{me}-expired")
    TokenLock.objects.filter(fence=expired.get().fence).update(expires_at=Now())
    expired.update(expires_at=Now())
    # Its locks were taken over, as housekeeping records it.
    lost = tenant.selections.filter(tx_id=f"{me}-lost")
    TokenLock.objects.filter(fence=lost.get().fence).delete()
    lost.update(status=Selection.Status.LOST)


@pytest.fixture
def tenants(make_key, client_for) -> tuple[Tenant, Tenant]:
    pair = []
    for name in ("a", "b"):
        key, raw = make_key(wallets=["alice", f"{name}-only"], name=name)
        pair.append(Tenant(name, key, client_for(raw)))
    a, b = pair
    issue(a.client, *(token("mint-a", i, quantity="10") for i in range(8)))
    issue(b.client, *(token("mint-b", i, quantity="10") for i in range(8)))
    issue(a.client, token("mint-a", 8, currency="EUR", quantity="5"))
    issue(b.client, token("mint-b", 8, currency="EUR", quantity="5"))
    for tenant in pair:
        run_a_day(tenant)
    assert a.key.namespace != b.key.namespace and not a.fences & b.fences
    return a, b


READS = [
    "/api/v1/",
    "/api/v1/wallets/alice/balances/",
    "/api/v1/wallets/alice/balances/?currency=USD",
    "/api/v1/tokens/",
    "/api/v1/tokens/?wallet=alice",
    "/api/v1/tokens/?spent=true",
    "/api/v1/tokens/?spent=false&currency=EUR",
    f"{SELECTIONS}",
    f"{SELECTIONS}?wallet=alice",
    f"{SELECTIONS}?currency=USD",
    f"{SELECTIONS}?currency=EUR",
    *(f"{SELECTIONS}?status={status}" for status in Selection.Status.values),
    f"{SELECTIONS}?wallet=alice&status=locked&currency=USD",
    f"{SELECTIONS}?page_size=1",
    "/api/v1/locks/",
    "/api/v1/locks/?wallet=alice",
    "/api/v1/locks/?currency=USD",
    "/api/v1/locks/?currency=EUR",
    "/api/v1/locks/?state=live",
    "/api/v1/locks/?state=expired",
    "/api/v1/locks/?spender_tx_id=same",
    "/api/v1/locks/?page_size=1",
]


def read_all(client: APIClient, url: str) -> list[dict]:
    """GET ``url`` and every next page; return the bodies."""
    bodies = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, (url, response.json())
        bodies.append(response.json())
        url = bodies[-1].get("next") if isinstance(bodies[-1], dict) else None
    return bodies


def fences_in(body: object) -> set[int]:
    """Return every "fence" value anywhere in ``body``."""
    if isinstance(body, dict):
        found = {body["fence"]} if "fence" in body else set()
        return found.union(*(fences_in(value) for value in body.values()))
    if isinstance(body, list):
        return set().union(*(fences_in(item) for item in body))
    return set()


def assert_sees_nothing_of(bodies: list, other: Tenant, url: str) -> None:
    text = json.dumps(bodies)
    seen = {tx_id for tx_id in other.tx_ids if f'"{tx_id}"' in text}
    assert not seen, f"{url} shows {seen}"
    assert not fences_in(bodies) & other.fences, f"{url} shows the other client's fences"


@pytest.mark.parametrize("url", READS)
def test_no_listing_or_filter_shows_the_other_clients_transactions(tenants, url):
    for me, other in (tenants, tenants[::-1]):
        bodies = read_all(me.client, url)
        assert_sees_nothing_of(bodies, other, url)
        assert fences_in(bodies) <= me.fences
        # A filter naming the other's transaction finds nothing either.
        for tx_id in sorted(other.tx_ids):
            if "spender_tx_id" in url:
                lone = me.client.get(f"/api/v1/locks/?spender_tx_id={tx_id}").json()
                assert lone["results"] == []


def test_each_client_lists_all_of_its_own_selections_and_locks(tenants):
    for me, _ in (tenants, tenants[::-1]):
        listed = {
            s["tx_id"]: s
            for body in read_all(me.client, f"{SELECTIONS}?page_size=2")
            for s in body["results"]
        }
        assert set(listed) == (me.tx_ids - {f"{me.name}-short"}) | {"same"}
        assert listed["same"]["fence"] in me.fences
        assert {s["status"] for s in listed.values()} == set(Selection.Status.values)
        locks = [row for body in read_all(me.client, "/api/v1/locks/") for row in body["results"]]
        held = TokenLock.objects.filter(fence__in=me.fences)
        assert sorted(row["token"] for row in locks) == sorted(str(lock.token) for lock in held)
        spent = me.client.get("/api/v1/tokens/?spent=true").json()["results"]
        # The wallet's spent tokens are listed; only its own spends name their spender.
        assert sorted(t["spent_by"] or "" for t in spent) == ["", f"{me.name}-spent"]


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize(
    "suffix, body",
    [
        ("", None),
        ("spend/", {"outputs": [output(0, "alice", "10")]}),
        ("release/", {}),
        ("extend/", {}),
    ],
)
def test_the_other_clients_selection_is_not_found_and_untouched(tenants, state, suffix, body):
    for me, other in (tenants, tenants[::-1]):
        theirs = other.selections.get(tx_id=f"{other.name}-{state}")
        locks = sorted(TokenLock.objects.filter(fence=theirs.fence).values_list("pk", "expires_at"))
        url = f"{SELECTIONS}{other.name}-{state}/{suffix}"
        response = me.client.get(url) if body is None else me.client.post(url, body, format="json")
        assert response.status_code == 404 and response.json()["code"] == "not_found"
        again = Selection.objects.get(pk=theirs.pk)
        assert (again.status, again.expires_at) == (theirs.status, theirs.expires_at)
        assert (
            sorted(TokenLock.objects.filter(fence=theirs.fence).values_list("pk", "expires_at"))
            == locks
        )


def test_a_tx_id_both_chose_names_each_clients_own_selection(tenants):
    a, b = tenants
    mine = {t.name: t.selections.get(tx_id="same") for t in tenants}
    for me in tenants:
        assert me.client.get(f"{SELECTIONS}same/").json()["fence"] == mine[me.name].fence
    assert a.client.post(f"{SELECTIONS}same/release/").status_code == 200
    spend(b.client, "same", [output(0, "b-only", "10")])
    statuses = {t.name: Selection.objects.get(pk=mine[t.name].pk).status for t in tenants}
    assert statuses == {"a": "released", "b": "spent"}
    # a's "same" was released: b's spend of "same" is not a's to see.
    spenders = {
        t.name: {
            r["spent_by"] for r in t.client.get("/api/v1/tokens/?spent=true").json()["results"]
        }
        for t in tenants
    }
    assert spenders == {"a": {"a-spent", None}, "b": {"b-spent", "same", None}}


def test_balances_are_the_wallets_for_both(tenants):
    a, b = tenants
    assert read_all(a.client, "/api/v1/wallets/alice/balances/") == read_all(
        b.client, "/api/v1/wallets/alice/balances/"
    )


def operator_pages(tenants) -> list[str]:
    a = tenants[0]
    same = [t.selections.get(tx_id="same") for t in tenants]
    lock = TokenLock.objects.filter(fence=same[0].fence).first()
    return [
        reverse("admin:index"),
        reverse("admin-dashboard"),
        reverse("admin:wallet", args=["alice"]),
        reverse("admin:locks_selection_changelist"),
        reverse("admin:locks_selection_changelist") + "?q=same",
        reverse("admin:locks_selection_changelist") + "?lease=live",
        *(reverse("admin:locks_selection_change", args=[s.pk]) for s in same),
        reverse("admin:locks_tokenlock_changelist") + "?q=same",
        reverse("admin:locks_tokenlock_changelist") + "?wallet=alice",
        reverse("admin:locks_tokenlock_change", args=[lock.pk]),
        reverse("admin:tokens_token_changelist") + "?q=alice",
        reverse("admin:tokens_token_change", args=[lock.pk]),
        reverse("admin:locks_failedselection_changelist") + "?q=alice",
        reverse("admin:locks_lockaudit_changelist"),
        reverse("admin:clients_apikey_changelist"),
        reverse("admin:clients_apikey_change", args=[a.key.pk]),
    ]


def test_every_admin_page_shows_both_clients_and_acts_on_the_one_chosen(
    tenants, admin_user, settings
):
    a, b = tenants
    operator = Client()
    operator.force_login(admin_user)
    for url in operator_pages(tenants):
        assert operator.get(url).status_code == 200, url
    # The operator tells the two selections of "same" apart by their namespaces.
    listed = operator.get(reverse("admin:locks_selection_changelist") + "?q=same")
    assert {s.namespace for s in listed.context["cl"].result_list} == {
        a.key.namespace,
        b.key.namespace,
    }
    wallet = operator.get(reverse("admin:wallet", args=["alice"])).content.decode()
    assert a.key.namespace in wallet and b.key.namespace in wallet

    # The wallet page releases b's "same", the selection list a's: each its own, audited.
    b_same, a_same = (t.selections.get(tx_id="same") for t in (b, a))
    page = operator.get(reverse("admin:wallet", args=["alice"]))
    operator.post(
        reverse("admin:wallet", args=["alice"]),
        {
            "action": "release",
            "selection": b_same.pk,
            "csrfmiddlewaretoken": page.context["csrf_token"],
        },
    )
    assert Selection.objects.get(pk=b_same.pk).status == "released"
    assert Selection.objects.get(pk=a_same.pk).status == "locked"
    operator.post(
        reverse("admin:locks_selection_changelist"),
        {"action": "release", "_selected_action": [a_same.pk]},
    )
    assert Selection.objects.get(pk=a_same.pk).status == "released"
    audits = LockAudit.objects.order_by("pk")
    assert [sorted(audit.token_ids) for audit in audits] == [
        sorted(b_same.token_ids),
        sorted(a_same.token_ids),
    ]
    assert [re.search(r"namespace '([^']*)'", audit.reason)[1] for audit in audits] == [
        b.key.namespace,
        a.key.namespace,
    ]
    # Neither client sees what the operator did to the other's selection.
    for me, other in (tenants, tenants[::-1]):
        for url in READS:
            assert_sees_nothing_of(read_all(me.client, url), other, url)
