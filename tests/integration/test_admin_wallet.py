"""The wallet page: what it shows, what it costs in queries, its actions and who may use them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from clients.models import ApiKey
from clients.rates import Rate
from clients.throttling import consume
from locks import replica as replica_module
from locks.models import FailedSelection, LockAudit, Selection, TokenLock
from locks.wallet import LIST_SIZE
from tests.factories import lock_tokens, make_selection, make_token, make_tokens
from tokens.admin import wallet_url as admin_wallet_url
from tokens.models import Token

pytestmark = pytest.mark.django_db


def wallet_url(wallet: str) -> str:
    return reverse("admin:wallet", args=[wallet])


@pytest.fixture
def replica():
    replica_module.reset()  # release goes through the selector, whose listener must not linger
    yield
    replica_module.reset()


@pytest.fixture
def limits(settings):
    settings.SHERDLOCK_RATE_LIMITS = {
        "selections_per_key": "5/60s",
        "selections_per_wallet": "2/60s",
    }
    return settings


def fail(
    wallet: str, count: int, outcome=FailedSelection.Outcome.INSUFFICIENT_FUNDS, quantity: int = 999
):
    FailedSelection.objects.bulk_create(
        FailedSelection(
            tx_id=f"failed-{wallet}-{i}",
            wallet=wallet,
            currency="USD",
            quantity=quantity,
            outcome=outcome,
            lock_conflicts=i,
        )
        for i in range(count)
    )


def test_the_page_shows_balances_holders_history_and_limits(admin_client, limits):
    usd = make_tokens(5, wallet="alice", currency="USD", quantity=10)
    make_tokens(2, wallet="alice", currency="EUR", quantity=7)
    make_tokens(3, wallet="bob", currency="USD", quantity=100)  # another wallet: not shown
    held = make_selection(usd[:2], "pay-1", ttl=60)
    lock_tokens(usd[2:3], spender="gone", ttl=-30)
    spent = make_token(wallet="alice", tx_id="old-input")
    make_selection([spent], "pay-0", status=Selection.Status.SPENT)
    Token.objects.filter(pk=spent.pk).update(spent_by="pay-0", spent_at=timezone.now())
    fail("alice", 1, quantity=1000)
    fail("bob", 3)
    consume({"selections_per_wallet:alice": Rate(2, 60.0)})
    consume({"selections_per_wallet:alice": Rate(2, 60.0)})  # spent: nothing left
    key, _ = ApiKey.objects.create_key(name="backend", wallets=["alice"], can_select=True)
    ApiKey.objects.create_key(name="bob's", wallets=["bob"])
    ApiKey.objects.create_key(name="ops", all_wallets=True, revoked=True)

    response = admin_client.get(wallet_url("alice"))
    assert response.status_code == 200
    data = response.context["data"]
    balances = {
        b.currency: (b.tokens, b.unspent, b.locked_tokens, b.locked, b.available, b.expired_locks)
        for b in data.balances
    }
    assert balances == {"USD": (5, 50, 2, 20, 30, 1), "EUR": (2, 14, 0, 0, 14, 0)}
    assert [s.tx_id for s in data.live] == ["pay-1"]
    live = data.live.rows[0]
    assert live.held == 2 and 55 < live.seconds_left <= 60 and live.pk == held.pk
    states = {lock.spender_tx_id: lock.state for lock in data.locks}
    assert states == {"pay-1": "live", "gone": "expired", "pay-0": "token spent"}
    assert {s.tx_id: s.lease for s in data.selections} == {"pay-1": "live", "pay-0": "spent"}
    assert [f.tx_id for f in data.failures] == ["failed-alice-0"]
    assert data.bucket.remaining < 1 and not data.bucket.allowed_now
    assert {state.key.name: state.usable for state in data.keys} == {"backend": True, "ops": False}
    assert {state.key.name: state.bucket.remaining for state in data.keys} == {
        "backend": 5.0,
        "ops": 5.0,
    }  # untouched keys' buckets are full
    content = response.content.decode()
    assert "insufficient funds for 1,000 USD (30 available now)" in content
    assert "The per-wallet rate limit is spent" in content
    assert reverse("admin:clients_apikey_change", args=[key.pk]) in content
    assert 'name="csrfmiddlewaretoken"' in content
    assert "bob" not in {s.wallet for s in data.selections}


def test_every_list_is_bounded_and_says_so(admin_client):
    fail("carol", LIST_SIZE + 5)
    tokens = make_tokens(LIST_SIZE + 3, wallet="carol")
    for token in tokens:
        make_selection([token], f"sel-{token.pk}")
    data = admin_client.get(wallet_url("carol")).context["data"]
    for listed in (data.failures, data.live, data.locks, data.selections):
        assert len(listed) == LIST_SIZE and listed.more
    # Newest first, and the live ones by the lease that ends first.
    assert data.failures.rows[0].created_at >= data.failures.rows[-1].created_at
    assert [s.expires_at for s in data.live] == sorted(s.expires_at for s in data.live)


def populate(wallet: str, n: int) -> None:
    """Give ``wallet`` n rows in every list of its page."""
    tokens = make_tokens(n, wallet=wallet)
    for token in tokens[: n // 2]:
        make_selection([token], f"{wallet}-sel-{token.pk}")
    lock_tokens(tokens[n // 2 :], spender=f"{wallet}-raw", ttl=-5)
    fail(wallet, n)
    for i in range(n):
        ApiKey.objects.create_key(name=f"k{wallet}{i}", wallets=[wallet], can_select=True)


def test_the_query_count_does_not_grow_with_the_wallet(
    admin_client, limits, django_assert_max_num_queries
):
    populate("small", 4)
    populate("large", 60)
    admin_client.get(wallet_url("small"))  # warm caches like any running server
    with django_assert_max_num_queries(9) as small:
        assert admin_client.get(wallet_url("small")).status_code == 200
    with django_assert_max_num_queries(9) as large:
        response = admin_client.get(wallet_url("large"))
    assert response.context["data"].failures.more
    assert len(large) == len(small), [q["sql"] for q in large.captured_queries]


def csrf_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def post_action(client: Client, wallet: str, **data):
    page = client.get(wallet_url(wallet))
    token = page.context["csrf_token"]
    return client.post(wallet_url(wallet), {"csrfmiddlewaretoken": str(token), **data}, follow=True)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_release_and_extend_record_who_did_it(admin_user, replica, settings):
    client = csrf_client(admin_user)
    release_me = make_selection(make_tokens(2, wallet="dave"), "pay-r", ttl=30)
    extend_me = make_selection(make_tokens(3, wallet="dave"), "pay-e", ttl=30)

    response = post_action(client, "dave", action="release", selection=release_me.pk)
    assert response.status_code == 200
    assert messages_of(response) == ["pay-r: released, 2 lock(s) removed"]
    release_me.refresh_from_db()
    assert release_me.status == Selection.Status.RELEASED
    assert not TokenLock.objects.filter(spender_tx_id="pay-r").exists()

    before = extend_me.expires_at
    response = post_action(client, "dave", action="extend", selection=extend_me.pk, seconds="300")
    assert messages_of(response)[0].startswith("pay-e: lease extended until ")
    extend_me.refresh_from_db()
    assert extend_me.expires_at > before + timedelta(seconds=200)
    assert set(
        TokenLock.objects.filter(spender_tx_id="pay-e").values_list("expires_at", flat=True)
    ) == {extend_me.expires_at}

    audits = {a.action: a for a in LockAudit.objects.all()}
    assert set(audits) == {"release_selection", "extend_selection"}
    assert audits["release_selection"].user == admin_user
    assert audits["release_selection"].spender_tx_ids == ["pay-r"]
    assert sorted(audits["release_selection"].token_ids) == sorted(release_me.token_ids)
    assert audits["release_selection"].count == 2
    assert (audits["extend_selection"].count, audits["extend_selection"].user) == (3, admin_user)
    assert "300 s" in audits["extend_selection"].reason


def test_actions_address_a_selection_not_a_tx_id_shared_by_two_clients(admin_user, replica):
    client = csrf_client(admin_user)
    older = make_selection(make_tokens(2, wallet="dave"), "pay", ttl=30, namespace="key-one")
    newer = make_selection(make_tokens(3, wallet="dave"), "pay", ttl=30, namespace="key-two")
    page = client.get(wallet_url("dave")).content.decode()
    assert f'name="selection" value="{older.pk}"' in page
    assert f'name="selection" value="{newer.pk}"' in page

    before = older.expires_at
    post_action(client, "dave", action="extend", selection=newer.pk, seconds="300")
    older.refresh_from_db()
    newer.refresh_from_db()
    assert older.expires_at == before and newer.expires_at > before + timedelta(seconds=200)

    for selection in (newer, older):
        response = post_action(client, "dave", action="release", selection=selection.pk)
        assert messages_of(response) == [
            f"pay: released, {len(selection.token_ids)} lock(s) removed"
        ]
        selection.refresh_from_db()
        assert selection.status == Selection.Status.RELEASED
    assert not TokenLock.objects.filter(wallet="dave").exists()
    audits = LockAudit.objects.order_by("pk")
    assert [(a.action, sorted(a.token_ids)) for a in audits] == [
        ("extend_selection", sorted(newer.token_ids)),
        ("release_selection", sorted(newer.token_ids)),
        ("release_selection", sorted(older.token_ids)),
    ]
    assert ["key-two" if "key-two" in a.reason else "key-one" for a in audits] == [
        "key-two",
        "key-two",
        "key-one",
    ]


def test_actions_refuse_what_they_cannot_do_and_write_nothing(admin_user, replica):
    client = csrf_client(admin_user)
    erins = make_selection(make_tokens(1, wallet="erin"), "erin-pay")
    spent = make_selection(
        make_tokens(1, wallet="erin"), "erin-spent", status=Selection.Status.SPENT, lock=False
    )
    franks = make_selection(make_tokens(1, wallet="frank"), "frank-pay")

    other = post_action(client, "erin", action="release", selection=franks.pk)
    assert messages_of(other) == [f"selection {franks.pk}: no selection of wallet erin"]
    done = post_action(client, "erin", action="extend", selection=spent.pk)
    assert messages_of(done)[0].startswith("erin-spent: not extended:")
    bad = post_action(client, "erin", action="explode", selection=erins.pk)
    assert messages_of(bad)[0].startswith("Nothing done:")
    assert TokenLock.objects.filter(spender_tx_id__in=["erin-pay", "frank-pay"]).count() == 2
    assert not LockAudit.objects.exists()

    forged = Client(enforce_csrf_checks=True)
    forged.force_login(admin_user)
    assert (
        forged.post(wallet_url("erin"), {"action": "release", "selection": erins.pk}).status_code
        == 403
    )
    assert TokenLock.objects.filter(spender_tx_id="erin-pay").exists()


def test_viewing_and_acting_need_their_permissions(client, django_user_model):
    ginas = make_selection(make_tokens(1, wallet="gina"), "gina-pay")
    url = wallet_url("gina")
    response = client.get(url)
    assert response.status_code == 302 and "/login/" in response["Location"]
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    client.force_login(viewer)
    assert client.get(url).status_code == 403
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_token", "view_tokenlock", "view_selection"])
    )
    page = client.get(url)
    assert page.status_code == 200 and not page.context["may_change"]
    assert 'name="release"' not in page.content.decode()
    assert client.post(url, {"action": "release", "selection": ginas.pk}).status_code == 403
    assert Selection.objects.get(tx_id="gina-pay").status == Selection.Status.LOCKED


@pytest.mark.parametrize(
    "wallet",
    [
        "a/b",
        "with space",
        "100%",
        "x?y#z&q=1",
        "émoji 🪙",
        "line\nbreak",
        "trailing/",
        "//twice",
        "-/",
    ],
)
def test_any_issued_wallet_name_has_a_page(admin_client, wallet):
    make_tokens(2, wallet=wallet, quantity=4)
    assert admin_wallet_url(wallet) == wallet_url(wallet)  # the lists' shortcut to reverse()
    response = admin_client.get(wallet_url(wallet))
    assert response.status_code == 200
    assert response.context["data"].wallet == wallet
    assert [b.unspent for b in response.context["data"].balances] == [8]


@pytest.mark.parametrize("wallet", ["nul\x00here", "x" * 129])
def test_a_name_no_wallet_can_have_is_not_found(admin_client, wallet):
    assert admin_client.get(wallet_url(wallet)).status_code == 404


def test_every_wallet_in_the_admin_links_to_its_page(admin_client):
    token = make_token(wallet="hank")
    make_selection([token], "hank-pay")
    fail("hank", 1, outcome=FailedSelection.Outcome.FUNDS_LOCKED)
    link = f'href="{wallet_url("hank")}"'
    for name in ("tokens_token", "locks_tokenlock", "locks_selection", "locks_failedselection"):
        page = admin_client.get(reverse(f"admin:{name}_changelist")).content.decode()
        assert link in page, name
    dashboard = admin_client.get(reverse("admin-dashboard")).content.decode()
    assert dashboard.count(link) == 2  # most contended, and most live locks
