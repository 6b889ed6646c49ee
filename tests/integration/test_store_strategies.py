"""The PostgreSQL store's statements for the strategies: ordered fetches and windows."""

from __future__ import annotations

import pytest

from locks.models import Selection, TokenLock
from locks.sql import locking
from locks.store import PostgresTokenStore
from sherdlock import Claim, WalletKey
from tests.factories import make_lock, make_token

pytestmark = pytest.mark.django_db
KEY = WalletKey("alice", "USD")


@pytest.fixture
def store() -> PostgresTokenStore:
    return PostgresTokenStore(lease=30)


@pytest.fixture
def tokens():
    return [make_token(quantity=q, index=i) for i, q in enumerate([7, 1, 3, 1, 20, 3])]


@pytest.mark.parametrize(
    "order, need, locked, spare",
    [
        ("ascending", 4, [1, 1, 3], [3, 7, 20]),
        ("descending", 21, [20, 7], [3, 3, 1, 1]),
    ],
)
def test_an_ordered_fetch_locks_the_covering_prefix_in_its_order(
    store, tokens, order, need, locked, spare
):
    result = store.fetch_and_lock(Claim("tx", KEY, need, 1, order=order), 64)
    assert sorted(c.quantity for c in result.granted) == sorted(locked)
    assert sorted(c.quantity for c in result.spare) == sorted(spare)
    assert TokenLock.objects.count() == len(locked)


def test_an_ordered_fetch_reads_the_smallest_first_up_to_its_limit(store, tokens):
    make_lock(tokens[1], "other")  # a 1, held: skipped
    result = store.fetch_and_lock(Claim("tx", KEY, 1, 1, order="ascending"), 3)
    assert [c.quantity for c in result.granted] == [1]
    assert sorted(c.quantity for c in result.spare) == [3, 3]


def test_a_full_batch_that_cannot_cover_is_locked_when_the_wallet_can(store, tokens):
    # The three smallest (1, 1, 3) cannot make 30; the largest free tokens can (20 + 7 + 3).
    result = store.fetch_and_lock(Claim("tx", KEY, 30, 1, order="ascending"), 3)
    assert sorted(c.quantity for c in result.granted) == [1, 1, 3]
    assert result.shortfall is None


def test_a_full_batch_short_of_what_the_wallet_has_free_reports_the_shortfall(store, tokens):
    make_lock(tokens[4], "other")  # the 20, held: 15 free of 35 unspent
    result = store.fetch_and_lock(Claim("tx", KEY, 16, 1, order="ascending"), 3)
    assert result.granted == []
    assert result.shortfall is not None
    assert (result.shortfall.unspent, result.shortfall.locked_by_others) == (35, 20)
    assert TokenLock.objects.count() == 1


def test_a_window_reads_the_smallest_and_the_largest_under_a_cap(store, tokens):
    make_lock(tokens[0], "other")  # the 7, held
    window = store.candidates(KEY, 2, 2, cap=10)
    assert sorted(c.quantity for c in window) == [1, 1, 3, 3]
    assert sorted(c.quantity for c in store.candidates(KEY, 0, 1)) == [20]
    assert sorted(c.quantity for c in store.candidates(KEY, 1, 1)) == [1, 20]
    assert TokenLock.objects.count() == 1  # a window locks nothing


def test_the_completing_statement_names_the_strategy(store, tokens):
    claim = Claim("tx", KEY, 3, None, record=True, order="ascending", strategy="smallest_first")
    result = store.fetch_and_lock(claim, 64)
    assert result.record is not None
    assert Selection.objects.get(tx_id="tx").strategy == "smallest_first"


def test_a_recording_statement_names_the_strategy_it_is_given(store, tokens):
    claim = Claim("tx-default", KEY, 3, None, record=True)
    assert store.fetch_and_lock(claim, 64).record is not None
    assert Selection.objects.get(tx_id="tx-default").strategy == "random"


def test_only_the_fetches_in_quantity_order_read_an_ordered_batch():
    for variant, text in locking.LOCK_STATEMENTS.items():
        assert ("%(strategy)s" in text) == variant.record, variant
        ordered_batch = "OVER (ORDER BY quantity" in text
        assert ordered_batch == (variant.choice in ("ascending", "descending")), variant
