"""The dashboard's figures: supply from the summary, every lock figure from one statement."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from locks.dashboard import build_dashboard, lock_figures
from locks.models import FailedSelection, Selection
from tests.factories import lock_tokens, make_tokens
from tokens.models import CurrencySupply

pytestmark = pytest.mark.django_db


def test_lock_figures_count_states_value_and_wallets_in_one_statement():
    alice = make_tokens(6, wallet="alice", currency="USD", quantity=10)
    bob = make_tokens(4, wallet="bob", currency="EUR", quantity=3)
    carol = make_tokens(3, wallet="carol", currency="USD", quantity=100)
    lock_tokens(alice[:3], spender="a", ttl=60)
    lock_tokens(alice[3:4], spender="a2", ttl=5)  # live, expiring soon
    lock_tokens(bob[:2], spender="b", ttl=60)
    lock_tokens(carol, spender="c", ttl=-30)  # expired: not locked value, not busy
    with CaptureQueriesContext(connection) as captured:
        figures = lock_figures()
    assert len(captured.captured_queries) == 1
    assert (figures.counts.live, figures.counts.expiring, figures.counts.expired) == (6, 1, 3)
    assert figures.locked == {"USD": (4, Decimal(40)), "EUR": (2, Decimal(6))}
    assert [(w.wallet, w.live_locks) for w in figures.busiest] == [("alice", 4), ("bob", 2)]


def test_busiest_wallets_are_the_top_ones_by_live_locks_then_name():
    for n, wallet in enumerate(["w1", "w2", "w3", "w4"]):
        lock_tokens(make_tokens(n + 1, wallet=wallet), spender=wallet)
    lock_tokens(make_tokens(4, wallet="w0"), spender="w0")  # ties with w4: name decides
    busiest = lock_figures(top=3).busiest
    assert [(w.wallet, w.live_locks) for w in busiest] == [("w0", 4), ("w4", 4), ("w3", 3)]


def test_supply_rows_come_from_the_summary_with_their_locked_share():
    tokens = make_tokens(5, wallet="alice", currency="USD", quantity=20)
    lock_tokens(tokens[:2])
    CurrencySupply.objects.create(currency="XTS", supply=0)  # issued, all spent since
    rows = {
        r.currency: (r.supply, r.locked_tokens, r.locked, r.available)
        for r in build_dashboard().supply
    }
    assert rows == {"USD": (100, 2, 40, 60), "XTS": (0, 0, 0, 0)}


def test_the_dashboard_is_the_same_handful_of_queries_whatever_the_data(
    django_assert_max_num_queries,
):
    with django_assert_max_num_queries(9) as empty:
        build_dashboard()
    for wallet in ("a", "b", "c"):
        lock_tokens(make_tokens(20, wallet=wallet, currency=wallet.upper()), spender=wallet)
    with django_assert_max_num_queries(9) as full:
        data = build_dashboard()
    assert len(data.supply) == 3 and data.locks.live == 60
    assert len(full) == len(empty)


def test_the_dashboard_counts_selections_inputs_and_change_per_strategy():
    for tx_id, quantity, total, ids, strategy in [
        ("a", 10, 12, [1, 2], "exact"),
        ("b", 10, 20, [3], "random"),
        ("c", 5, 5, [4, 5, 6], "exact"),
    ]:
        Selection.objects.create(
            tx_id=tx_id,
            wallet="alice",
            currency="USD",
            quantity=quantity,
            total=total,
            token_ids=ids,
            strategy=strategy,
        )
    FailedSelection.objects.create(
        tx_id="d", wallet="alice", currency="USD", quantity=7, outcome="no_match", strategy="exact"
    )
    rows = {r.strategy: r for r in build_dashboard().strategies}
    exact, random = rows["exact"], rows["random"]
    assert (exact.selections, exact.failed, exact.inputs, exact.change) == (2, 1, 5, 2)
    assert (exact.inputs_per_selection, exact.change_per_selection) == (2.5, 1)
    assert (random.selections, random.failed, random.change) == (1, 0, 10)
    assert sum(m.no_match for m in build_dashboard().outcomes) == 1
