"""Tokens coming back to a replica's queue, or leaving it: released, spent, newly issued."""

from __future__ import annotations

import pytest

from sherdlock import InvalidRequest, WalletKey
from tests.unit.selector_helpers import issue, locks_of, make_selector, warm


def test_release_returns_tokens_to_cache_and_drops_holds(store, clock, sleeper, key):
    issue(store, key, [2, 2, 2])
    selector = make_selector(store, clock, sleeper)
    selection = selector.select("tx", key.wallet, key.currency, 6)
    assert all(selector.cache.is_held(t) for t in selection.token_ids)

    assert selector.release(selection) == 3

    assert locks_of(store, "tx") == set()
    assert not any(selector.cache.is_held(t) for t in selection.token_ids)
    assert {c.token_id for c in selector.cache.peek(key)} == set(selection.token_ids)
    again = selector.select("tx-2", key.wallet, key.currency, 6)
    assert again.stats.fetches == 0


def test_release_by_tx_id_needs_fence(store, clock, sleeper, key):
    issue(store, key, [2, 2])
    selector = make_selector(store, clock, sleeper)
    selection = selector.select("tx", key.wallet, key.currency, 4)

    with pytest.raises(InvalidRequest):
        selector.release("tx")
    with pytest.raises(InvalidRequest):
        selector.release(selection, fence=selection.fence + 1)
    assert selector.release("tx", selection.fence + 1) == 0
    assert selector.release("tx", selection.fence, [selection.token_ids[0]]) == 1
    assert selector.release("tx", selection.fence) == 1
    assert not any(selector.cache.is_held(t) for t in selection.token_ids)


def test_forget_drops_spent_tokens_from_cache_and_holds(store, clock, sleeper, key):
    issue(store, key, [1] * 6)
    selector = make_selector(store, clock, sleeper)
    warm(selector, key)
    selection = selector.select("tx", key.wallet, key.currency, 2)
    spare = selector.cache.peek(key)[0]
    store.spend([*selection.token_ids, spare.token_id], "tx")

    selector.forget([*selection.token_ids, spare.token_id])

    assert spare not in selector.cache.peek(key)
    assert not any(selector.cache.is_held(t) for t in selection.token_ids)


def test_a_spends_change_is_queued_and_selected_without_a_fetch(store, clock, sleeper, key):
    issue(store, key, [5] * 6)
    selector = make_selector(store, clock, sleeper)
    warm(selector, key)
    selection = selector.select("tx", key.wallet, key.currency, 8)
    store.spend(selection.token_ids, "tx")
    selector.forget(selection.token_ids, key)
    change = store.add_token(9, key.wallet, key.currency, 2)

    selector.issued([(key, change)])

    assert selector.cache.peek(key)[-1] == change
    again = selector.select("tx-2", key.wallet, key.currency, 22)  # all four left and the change
    assert 9 in again.token_ids
    assert again.stats.fetches == 0


def test_issued_tokens_make_no_queue_and_fill_one_only_up_to_a_batch(store, clock, sleeper, key):
    other = WalletKey("bob", key.currency)
    issue(store, key, [1] * 3)
    selector = make_selector(store, clock, sleeper, fetch_limit=4, calm_fetch_limit=4)
    warm(selector, key)
    selector.select("tx", key.wallet, key.currency, 1)
    queued = len(selector.cache.peek(key))

    news = [(other, store.add_token(10, other.wallet, other.currency, 1))]
    news += [(key, store.add_token(20 + i, key.wallet, key.currency, 1)) for i in range(9)]
    selector.issued(news)

    assert selector.cache.peek(other) == []
    assert len(selector.cache.peek(key)) == 4 > queued
