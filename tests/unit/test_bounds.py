"""The selector's bound on tokens, against the in-memory store (as the PostgreSQL store does)."""

from __future__ import annotations

import pytest

from sherdlock import InsufficientFunds, SelectionTooLarge, Strategy
from sherdlock.strategies import MAX_EXAMINED
from tests.unit.selector_helpers import issue, make_selector


@pytest.mark.parametrize("strategy", ["random", "smallest_first", "fewest_tokens"])
def test_covering_needs_more_tokens_than_the_bound(store, clock, sleeper, key, strategy):
    issue(store, key, [1] * (2 * MAX_EXAMINED))
    selector = make_selector(store, clock, sleeper)
    with pytest.raises(SelectionTooLarge) as raised:
        selector.select(
            "tx", key.wallet, key.currency, MAX_EXAMINED + 1, strategy=Strategy(strategy)
        )
    assert raised.value.limit == MAX_EXAMINED
    assert store.locks() == {}


def test_small_tokens_first_stop_at_the_bound(store, clock, sleeper, key):
    # The two large tokens could cover it; smallest_first takes the small ones first.
    issue(store, key, [1] * (MAX_EXAMINED + 100) + [10 * MAX_EXAMINED] * 2)
    selector = make_selector(store, clock, sleeper)
    with pytest.raises(SelectionTooLarge):
        selector.select(
            "tx", key.wallet, key.currency, MAX_EXAMINED + 50, strategy=Strategy("smallest_first")
        )
    assert store.locks() == {}


def test_within_the_bound_a_large_wallet_selects_and_a_small_one_is_short(
    store, clock, sleeper, key
):
    issue(store, key, [1] * (2 * MAX_EXAMINED))
    selector = make_selector(store, clock, sleeper)
    selection = selector.select("tx", key.wallet, key.currency, MAX_EXAMINED)
    assert len(selection.tokens) == MAX_EXAMINED
    with pytest.raises(InsufficientFunds):
        selector.select("tx-2", "small", key.currency, 10)
