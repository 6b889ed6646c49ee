"""The operators' admin pages: constant query counts, filters, search, counts, dashboard.

What operators may change there, and what each action records, is in
``tests/integration/test_admin_actions.py``.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from common import pagination
from locks.models import FailedSelection, HousekeepingRun, LockAudit, Selection, TokenLock
from tests.factories import lock_tokens, make_selection, make_token, make_tokens
from tests.helpers.admin import LOCKS, SELECTIONS, TOKENS, shown
from tokens.models import Token

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_cache")]

AUDITS = reverse("admin:locks_lockaudit_changelist")
DASHBOARD = reverse("admin-dashboard")


def add_rows(model: str, count: int, user) -> None:
    """Add ``count`` rows that the changelist of ``model`` shows."""
    if model == "tokens":
        make_tokens(count)
    elif model in ("locks", "dashboard"):
        lock_tokens(make_tokens(count, wallet=f"w{TokenLock.objects.count()}"))
    elif model == "selections":
        for token in make_tokens(count):
            make_selection([token], f"sel-{token.pk}")
    if model == "dashboard":
        FailedSelection.objects.bulk_create(
            FailedSelection(
                tx_id=f"f{i}",
                wallet=f"w{i}",
                currency="USD",
                quantity=1,
                outcome=FailedSelection.Outcome.FUNDS_LOCKED,
            )
            for i in range(count)
        )
    if model == "audits":
        LockAudit.objects.bulk_create(
            LockAudit(user=user, reason=f"r{i}", spender_tx_ids=["s"], token_ids=[i], count=1)
            for i in range(count)
        )


def rows_shown(response) -> int:
    if "cl" not in response.context:  # the dashboard: count what it aggregated
        return response.context["data"].locks.live
    return len(list(response.context["cl"].result_list))


@pytest.mark.parametrize(
    ("model", "url", "most"),
    [
        ("tokens", TOKENS, 6),
        ("locks", LOCKS, 6),
        ("selections", SELECTIONS, 7),
        ("audits", AUDITS, 7),
        ("dashboard", DASHBOARD, 12),
    ],
)
def test_page_query_count_does_not_grow_with_rows(
    admin_client, admin_user, django_assert_max_num_queries, model, url, most
):
    add_rows(model, 10, admin_user)
    admin_client.get(url)  # warm caches (content types, currencies) like any running server
    with django_assert_max_num_queries(most) as ten:
        response = admin_client.get(url)
    assert rows_shown(response) == 10
    add_rows(model, 50, admin_user)
    with django_assert_max_num_queries(most) as sixty:
        response = admin_client.get(url)
    assert response.status_code == 200
    assert rows_shown(response) == 60
    assert len(sixty) == len(ten), [q["sql"] for q in sixty.captured_queries]


def test_lock_filters_by_state_currency_wallet_and_age(admin_client):
    live = lock_tokens([make_token(wallet="alice", currency="USD", tx_id="live")])[0]
    expired = lock_tokens([make_token(wallet="bob", currency="EUR", tx_id="old")], ttl=-700)[0]
    spent_token = make_token(wallet="carol", tx_id="spent")
    spent = lock_tokens([spent_token])[0]
    Token.objects.filter(pk=spent_token.pk).update(spent_by="tx", spent_at=timezone.now())
    client = admin_client

    assert shown(client, LOCKS) == {live.pk, expired.pk, spent.pk}
    assert shown(client, LOCKS, state="live") == {live.pk}
    assert shown(client, LOCKS, state="expired") == {expired.pk}
    assert shown(client, LOCKS, state="spent") == {spent.pk}
    assert shown(client, LOCKS, currency="EUR") == {expired.pk}
    assert shown(client, LOCKS, wallet="alice") == {live.pk}
    assert shown(client, LOCKS, wallet="ali") == set()  # exact, not a substring
    assert shown(client, LOCKS, age="10s") == {live.pk, spent.pk}
    assert shown(client, LOCKS, age="old") == {expired.pk}
    assert shown(client, LOCKS, wallet="bob", state="expired") == {expired.pk}
    # The wallet box is a form of its own: it carries the other filters along.
    page = client.get(LOCKS, {"state": "live", "wallet": "alice"}).content.decode()
    assert 'name="wallet" value="alice"' in page
    assert '<input type="hidden" name="state" value="live">' in page


def test_lock_search_by_token_tx_id_spender_and_wallet(admin_client):
    first = lock_tokens([make_token(wallet="alice", tx_id="issue-a", index=2)], spender="sp-1")
    second = lock_tokens([make_token(wallet="bob", tx_id="issue-b")], spender="sp-2")
    with CaptureQueriesContext(connection) as captured:
        for term, expected in (
            ("issue-a", first),
            ("issue-a:2", first),
            ("sp-2", second),
            ("bob", second),
            ("issue", []),
        ):
            assert shown(admin_client, LOCKS, q=term) == {lock.pk for lock in expected}, term
    # Exact comparisons an index serves: "=" in search_fields would mean UPPER(x) = UPPER(y).
    searches = [q["sql"] for q in captured.captured_queries if "issue-a" in q["sql"]]
    assert searches and not any("UPPER(" in sql or "LIKE" in sql for sql in searches)


def test_token_filters_and_search(admin_client):
    plain = make_token(wallet="alice", currency="USD", tx_id="t-plain")
    euro = make_token(wallet="wallet-1", currency="EUR", tx_id="t-euro", index=4)
    make_token(wallet="wallet-10", currency="EUR", tx_id="t-other")
    locked = make_token(wallet="alice", tx_id="t-locked")
    lock_tokens([locked])
    spent = make_token(wallet="alice", tx_id="t-spent", spent_by="x", spent_at=timezone.now())
    client = admin_client

    assert shown(client, TOKENS, currency="USD") == {plain.pk, locked.pk, spent.pk}
    assert shown(client, TOKENS, spent="yes") == {spent.pk}
    assert plain.pk in shown(client, TOKENS, spent="no")
    assert spent.pk not in shown(client, TOKENS, spent="no")
    assert shown(client, TOKENS, locked="yes") == {locked.pk}
    assert locked.pk not in shown(client, TOKENS, locked="no")
    assert shown(client, TOKENS, q="t-euro") == {euro.pk}
    assert shown(client, TOKENS, q="t-euro:4") == {euro.pk}
    assert shown(client, TOKENS, q="wallet-1") == {euro.pk}  # exact: not wallet-10
    assert shown(client, TOKENS, q="alice", spent="yes") == {spent.pk}
    assert shown(client, TOKENS, q=str(plain.pk)) == {plain.pk}
    page = client.get(TOKENS).content.decode()  # each token links its lock
    assert reverse("admin:locks_tokenlock_change", args=[locked.pk]) in page
    assert "live by spender" in page


def test_selection_list_shows_tokens_lease_and_held_locks(admin_client):
    tokens = make_tokens(2, wallet="alice")
    make_selection(tokens, "sel-live")
    make_selection(make_tokens(1), "sel-old", ttl=-5)
    make_selection(make_tokens(1), "sel-spent", status=Selection.Status.SPENT, lock=False)
    page = admin_client.get(SELECTIONS)
    content = page.content.decode()
    assert reverse("admin:tokens_token_change", args=[tokens[1].pk]) in content
    assert "2 / 2" in content
    leases = {
        s.tx_id: page.context["cl"].model_admin.lease(s) for s in page.context["cl"].result_list
    }
    assert leases == {"sel-live": "live", "sel-old": "expired", "sel-spent": "spent"}
    assert shown(admin_client, SELECTIONS, lease="live") == set(
        Selection.objects.filter(tx_id="sel-live").values_list("pk", flat=True)
    )
    assert admin_client.get(reverse("admin:locks_selection_add")).status_code == 403


def test_selection_pages_show_legs(admin_client):
    selection = make_selection(make_tokens(1), "sel-legs")
    selection.legs = [
        {"currency": "EUR", "quantity": "5", "total": "7"},
        {"currency": "USD", "quantity": "60", "total": "80"},
    ]
    selection.save(update_fields=["legs"])
    make_selection(make_tokens(1), "sel-one")
    listed = admin_client.get(SELECTIONS).content.decode()
    assert "EUR 5 (total 7), USD 60 (total 80)" in listed
    change = reverse("admin:locks_selection_change", args=[selection.pk])
    assert "USD 60 (total 80)" in admin_client.get(change).content.decode()


def test_dashboard_shows_supply_locks_contention_outcomes_and_housekeeping(admin_client):
    usd = make_tokens(4, wallet="alice", currency="USD", quantity=10)
    make_tokens(2, wallet="bob", currency="EUR", quantity=7)
    lock_tokens(usd[:1], ttl=60)
    lock_tokens(usd[1:2], spender="soon", ttl=5)
    lock_tokens(usd[2:3], spender="late", ttl=-30)
    make_selection(make_tokens(1, wallet="carol"), "ok-1", lock=False)
    for outcome, n in (
        (FailedSelection.Outcome.FUNDS_LOCKED, 3),
        (FailedSelection.Outcome.INSUFFICIENT_FUNDS, 1),
    ):
        FailedSelection.objects.bulk_create(
            FailedSelection(
                tx_id=f"{outcome}{i}",
                wallet="alice",
                currency="USD",
                quantity=5,
                outcome=outcome,
                lock_conflicts=2,
            )
            for i in range(n)
        )
    HousekeepingRun.objects.create(finished_at=timezone.now(), expired_removed=12)

    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    data = response.context["data"]
    supply = {
        row.currency: (row.supply, row.locked_tokens, row.locked, row.available)
        for row in data.supply
    }
    assert supply == {"USD": (50, 2, 20, 30), "EUR": (14, 0, 0, 14)}
    assert (data.locks.live, data.locks.expiring, data.locks.expired) == (2, 1, 1)
    top = data.contended[0]
    assert (top.wallet, top.funds_locked, top.insufficient_funds, top.lock_conflicts) == (
        "alice",
        3,
        1,
        8,
    )
    assert data.busiest[0].live_locks == 2
    assert len(data.outcomes) == 60
    assert data.outcomes[-1].success == 1 and data.outcomes[-1].funds_locked == 3
    assert data.housekeeping.expired_removed == 12
    content = response.content.decode()
    assert "<svg" in content and 'class="locked"' in content
    assert 'id="locks-live">2<' in content
    assert " s ago)" in content  # the housekeeping run that just happened


def test_admin_index_links_the_dashboard_api_keys_and_beat(admin_client):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert DASHBOARD in page
    assert reverse("admin:clients_apikey_changelist") in page
    assert reverse("admin:django_celery_beat_periodictask_changelist") in page


def analyse(model) -> None:
    connection.cursor().execute(f"ANALYZE {model._meta.db_table}")


def test_unfiltered_lists_use_the_planner_estimate_not_count(admin_client, monkeypatch):
    make_tokens(30)
    analyse(Token)  # reltuples = 30
    make_tokens(12)  # not yet in the statistics
    monkeypatch.setattr(pagination, "EXACT_BELOW", 20)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(TOKENS)
    cl = response.context["cl"]
    assert isinstance(cl.paginator, pagination.EstimatedCountPaginator) and cl.paginator.estimated
    assert cl.result_count == 30  # the estimate: an exact count would say 42
    assert not any("COUNT(" in q["sql"] for q in captured.captured_queries)
    assert "about" in response.content.decode()


def test_filtered_lists_count_exactly_up_to_a_cap_then_estimate(admin_client, monkeypatch):
    make_tokens(30, currency="EUR")
    make_tokens(5, currency="USD")
    analyse(Token)
    monkeypatch.setattr(pagination, "EXACT_BELOW", 20)
    small = admin_client.get(TOKENS, {"currency": "USD"}).context["cl"]
    assert (small.result_count, small.paginator.estimated) == (5, False)
    large = admin_client.get(TOKENS, {"currency": "EUR"}).context["cl"]
    assert large.paginator.estimated and large.result_count >= 20
    monkeypatch.setattr(pagination, "EXACT_BELOW", 100)  # a small table is counted exactly
    cl = admin_client.get(TOKENS).context["cl"]
    assert (cl.result_count, cl.paginator.estimated) == (35, False)


def test_seed_locks_locks_random_unspent_tokens_under_selections():
    make_tokens(40, wallet="a")
    make_tokens(40, wallet="b", currency="EUR")
    call_command(
        "seed_locks",
        count=30,
        ttl_seconds=60,
        expired_fraction=0,
        tokens_per_tx=4,
        no_progress=True,
        stdout=(out := StringIO()),
    )
    assert "locked 30 tokens" in out.getvalue()
    assert TokenLock.objects.live().count() == 30
    for selection in Selection.objects.all():
        held = TokenLock.objects.filter(spender_tx_id=selection.tx_id, fence=selection.fence)
        assert sorted(held.values_list("pk", flat=True)) == sorted(selection.token_ids)
        assert set(
            Token.objects.filter(pk__in=selection.token_ids).values_list("wallet", flat=True)
        ) == {selection.wallet}
    call_command(
        "seed_locks",
        count=100,
        expired_fraction=1,
        no_progress=True,
        stdout=StringIO(),
        stderr=StringIO(),
    )
    assert TokenLock.objects.expired().count() == 50  # only the 50 unlocked ones were left
