"""Multi-currency selections in the core: every leg locked under one fence, or none."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sherdlock import (
    FundsLocked,
    InMemoryStore,
    InsufficientFunds,
    InvalidRequest,
    Leg,
    Strategy,
    WalletKey,
    select_legs,
)
from sherdlock.legs import MAX_LEGS, ordered_legs
from tests.unit.conftest import FakeClock, FakeSleeper
from tests.unit.selector_helpers import hold, issue, locks_of, make_selector


def test_legs_are_locked_in_currency_order_under_one_fence(store, clock, sleeper):
    issue(store, WalletKey("alice", "USD"), [5, 7, 11], first_id=1)
    issue(store, WalletKey("alice", "EUR"), [3, 4], first_id=10)
    selector = make_selector(store, clock, sleeper)

    legs = select_legs(selector, "tx-1", "alice", [("USD", 12), ("EUR", 7)])

    assert [leg.key.currency for leg in legs] == ["EUR", "USD"]
    assert legs[0].fence == legs[1].fence
    assert legs[0].total == 7 and legs[1].total >= 12
    assert locks_of(store, "tx-1") == {i for leg in legs for i in leg.token_ids}


@pytest.mark.parametrize("strategy", [None, Strategy("fewest_tokens"), Strategy("exact")])
def test_strategy_applies_to_every_leg(store, clock, sleeper, strategy):
    issue(store, WalletKey("alice", "EUR"), [1, 2, 5], first_id=1)
    issue(store, WalletKey("alice", "USD"), [3, 4, 9], first_id=10)
    selector = make_selector(store, clock, sleeper)

    legs = select_legs(selector, "tx-1", "alice", [("EUR", 5), ("USD", 9)], strategy=strategy)

    assert {leg.strategy for leg in legs} == {strategy.name if strategy else "random"}
    if strategy is not None:  # exact and fewest_tokens both take the 5 and the 9
        assert [leg.total for leg in legs] == [5, 9]


@pytest.mark.parametrize(
    ("usd", "error"), [([5], InsufficientFunds), ([20], FundsLocked)], ids=["short", "held"]
)
def test_a_failing_leg_releases_the_legs_before_it(store, clock, sleeper, usd, error):
    issue(store, WalletKey("alice", "EUR"), [10], first_id=1)
    issue(store, WalletKey("alice", "USD"), usd, first_id=10)
    issue(store, WalletKey("alice", "GBP"), [1], first_id=20)
    hold(store, "other", 99, WalletKey("alice", "USD"), 10)
    selector = make_selector(store, clock, sleeper)

    with pytest.raises(error) as raised:
        select_legs(selector, "tx-1", "alice", [("USD", 15), ("EUR", 10)], patient=False)

    assert raised.value.leg == "USD"
    assert locks_of(store, "tx-1") == set()
    # The released EUR token went back to the cache: a later selection finds it.
    assert select_legs(selector, "tx-2", "alice", [("EUR", 10), ("GBP", 1)], patient=False)


def test_a_failed_release_is_noted_and_the_error_kept(store, clock, sleeper, monkeypatch):
    issue(store, WalletKey("alice", "EUR"), [10], first_id=1)
    selector = make_selector(store, clock, sleeper)

    def broken(*args, **kwargs):
        raise ConnectionError("gone")

    monkeypatch.setattr(store, "unlock", broken)
    with pytest.raises(InsufficientFunds) as raised:
        select_legs(selector, "tx-1", "alice", [("EUR", 10), ("USD", 1)], patient=False)
    assert "releasing leg alice/EUR" in raised.value.__notes__[0]


@pytest.mark.parametrize(
    "legs",
    [
        [("USD", 1)],
        [("USD", 1), ("USD", 2)],
        [(f"C{i}", 1) for i in range(MAX_LEGS + 1)],
        [("USD", 0), ("EUR", 1)],
    ],
    ids=["one", "same-currency", "too-many", "zero"],
)
def test_bad_legs_are_refused_before_anything_is_locked(store, clock, sleeper, legs):
    issue(store, WalletKey("alice", "USD"), [10], first_id=1)
    selector = make_selector(store, clock, sleeper)
    with pytest.raises(InvalidRequest):
        select_legs(selector, "tx-1", "alice", legs)
    assert store.locks() == {}


def test_ordered_legs_sorts_by_currency():
    assert ordered_legs([Leg("b", 1), ("a", 2)]) == (Leg("a", 2), Leg("b", 1))


@settings(max_examples=40, deadline=None)
@given(
    wallets=st.lists(st.lists(st.integers(1, 9), min_size=0, max_size=6), min_size=3, max_size=3),
    asked=st.lists(st.integers(1, 25), min_size=3, max_size=3),
    count=st.integers(2, 3),
)
def test_all_legs_or_none(wallets, asked, count):
    clock = FakeClock()
    store = InMemoryStore(clock=clock, lease=60.0, rng=random.Random(3))
    currencies = ["A", "B", "C"][:count]
    for n, (currency, quantities) in enumerate(zip(currencies, wallets, strict=False)):
        issue(store, WalletKey("w", currency), quantities, first_id=100 * n + 1)
    selector = make_selector(store, clock, FakeSleeper(clock))
    legs = list(zip(currencies, asked, strict=False))
    try:
        picked = select_legs(selector, "tx", "w", legs, patient=False)
    except InsufficientFunds:
        assert any(sum(q) < a for q, a in list(zip(wallets, asked, strict=True))[:count])
        assert locks_of(store, "tx") == set()
        return
    assert all(leg.total >= need for leg, (_, need) in zip(picked, sorted(legs), strict=True))
    assert locks_of(store, "tx") == {i for leg in picked for i in leg.token_ids}
    assert len({leg.fence for leg in picked}) == 1
