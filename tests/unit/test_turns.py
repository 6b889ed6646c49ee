"""A key's turn (sherdlock.turns): a selection that waited long goes before newcomers."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter

import pytest

from sherdlock import (
    FundsLocked,
    InMemoryStore,
    Selector,
    SelectorConfig,
    Strategy,
    WalletKey,
)
from tests.helpers.processes import wait_for
from tests.helpers.turns import Worker, assert_turns_go_in_the_order_asked
from tests.unit.selector_helpers import assert_owns, hold, issue, locks_of, make_selector


def _contested(selector: Selector, key: WalletKey) -> None:
    """Make the selector's cache see ``key`` contested: its queued tokens were all refused."""
    selector.cache.tried(key, 8, 8)
    assert selector.cache.contested(key)


def test_a_selection_that_waited_takes_the_turn_polls_at_its_pace_and_gives_it_back(
    store, clock, sleeper, key
):
    issue(store, key, [3, 3])
    hold(store, "tx-holder", 1, key, 1, 2)  # everything held: the selection waits for funds
    selector = make_selector(store, clock, sleeper, turn_after=0.02, max_retries=3)

    with pytest.raises(FundsLocked) as caught:
        selector.select("tx-1", key.wallet, key.currency, 4)

    stats = caught.value.stats
    assert stats.turns == 1 and store.calls["take_turn"] == 1
    assert store.turns.held == {}  # given back when the selection ended
    taken_at = next(i for i, s in enumerate(sleeper.calls) if s == 0.0)  # refetches at once
    assert sum(sleeper.calls[:taken_at]) >= 0.02
    assert set(sleeper.calls[taken_at + 1 :]) == {selector.config.turn_poll}  # rounds too
    # A holder's refetches weigh as much as their share of a refetch delay: a round of the
    # holder waits as long as one of anybody's, in more, shorter polls than max_retries.
    low, high = selector.config.refetch_delay
    assert len(sleeper.calls[taken_at + 1 :]) >= 3 * (low + high) / 2 / selector.config.turn_poll


def test_a_turn_goes_back_as_soon_as_it_locks_something(store, clock, sleeper, key):
    issue(store, key, [3, 3, 3])
    hold(store, "tx-holder", 1, key, 1, 2, 3)
    # One row per fetch: the selection gathers its two tokens in two calls.
    selector = make_selector(
        store, clock, sleeper, turn_after=0.02, fetch_limit=1, cold_fetch_limit=1
    )
    given_back_holding: list[set[int]] = []
    end_turn = store.end_turn

    def spy(k: WalletKey) -> None:
        given_back_holding.append(locks_of(store, "tx-1"))
        end_turn(k)

    def sleep(seconds: float) -> None:
        sleeper(seconds)
        if store.turns.held and locks_of(store, "tx-holder") == {1, 2, 3}:
            store.unlock("tx-holder", 1, [1, 2])  # the selection holds the turn: funds free

    store.end_turn, selector._sleep = spy, sleep
    selection = selector.select("tx-1", key.wallet, key.currency, 6)

    assert sorted(selection.token_ids) == [1, 2] and selection.stats.turns == 1
    assert [len(held) for held in given_back_holding] == [1]  # after its first token
    assert store.turns.held == {}
    assert_owns(store, selection)


def test_without_turn_after_nobody_takes_or_waits_for_a_turn(store, clock, sleeper, key):
    issue(store, key, [3])
    hold(store, "tx-holder", 1, key, 1)
    selector = make_selector(store, clock, sleeper, turn_after=0)
    _contested(selector, key)

    with pytest.raises(FundsLocked):
        selector.select("tx-1", key.wallet, key.currency, 2)

    assert store.calls["take_turn"] == store.calls["await_turn"] == 0


def _select_in_thread(
    selector: Selector, key: WalletKey, got: dict, strategy: Strategy | None = None
) -> threading.Thread:
    def run() -> None:
        try:
            got["selection"] = selector.select(
                "tx-new", key.wallet, key.currency, 1, strategy=strategy
            )
        except Exception as exc:  # surfaced by the assertions
            got["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _real_time_selector(store: InMemoryStore, **config) -> Selector:
    return Selector(store, SelectorConfig(**config), rng=random.Random(3))


def _hold_turn(store: InMemoryStore, key: WalletKey, taken: threading.Event, done: threading.Event):
    """Hold the turn of ``key`` from another thread until ``done``, as a waiting selection."""

    def run() -> None:
        assert store.take_turn(key, 1.0)
        taken.set()
        done.wait(10)
        store.end_turn(key)

    thread = threading.Thread(target=run)
    thread.start()
    assert taken.wait(5)
    return thread


@contextlib.contextmanager
def _newcomer_while_a_turn_is_held(
    key: WalletKey, yield_limit: float, contested: bool = True, strategy: Strategy | None = None
):
    """Hold the turn of ``key`` (a free token of 5 in it) in one thread and start a newcomer's
    selection of 1 in another; yield the store, the newcomer's thread, what it got, and the
    event that ends the turn (set on the way out whatever happened)."""
    store = InMemoryStore()
    issue(store, key, [5])
    selector = _real_time_selector(store, yield_limit=yield_limit)
    if contested:
        _contested(selector, key)
    taken, done, got = threading.Event(), threading.Event(), {}
    holder = _hold_turn(store, key, taken, done)
    try:
        yield store, _select_in_thread(selector, key, got, strategy), got, done
    finally:
        done.set()
        holder.join(5)


def test_a_newcomer_to_a_contested_key_waits_for_the_turn_to_end(key):
    with _newcomer_while_a_turn_is_held(key, yield_limit=10.0) as (store, newcomer, got, done):
        # Inside its wait for the turn, which cannot end while the turn is held.
        wait_for(lambda: store.calls["await_turn"], "the newcomer to wait for the turn")
        assert newcomer.is_alive() and got == {}  # waits, though the token is free
        # Its one fetch yielded to the turn and locked nothing.
        assert store.calls["fetch_and_lock"] == 1 and store.calls["try_lock"] == 0
        assert store.live_locks() == {}
        done.set()
        newcomer.join(5)
        assert not newcomer.is_alive() and got["selection"].token_ids == (1,)
        assert store.calls["fetch_and_lock"] == 2 and store.calls["await_turn"] == 1


def test_a_newcomer_choosing_its_tokens_waits_for_the_turn_before_it_reads_any(key):
    exact = Strategy("exact", fallback=True)  # none sums to 1: it falls back to random
    with _newcomer_while_a_turn_is_held(key, 10.0, strategy=exact) as (store, newcomer, got, done):
        wait_for(lambda: store.calls["await_turn"], "the newcomer to wait for the turn")
        assert newcomer.is_alive() and got == {}
        assert store.calls["candidates"] == store.calls["try_lock"] == 0
        done.set()
        newcomer.join(5)
        assert not newcomer.is_alive() and got["selection"].token_ids == (1,)
        assert store.calls["await_turn"] == 1  # once per selection


def test_a_newcomer_to_a_contested_key_nobody_holds_the_turn_of_fetches_without_waiting(key):
    store = InMemoryStore()
    issue(store, key, [5])
    selector = _real_time_selector(store, yield_limit=10.0)
    _contested(selector, key)
    calls = store.calls.copy()

    selection = selector.select("tx-new", key.wallet, key.currency, 1)

    assert selection.token_ids == (1,)
    assert store.calls - calls == Counter(fetch_and_lock=1)  # its fetch alone asked


def test_a_newcomer_waits_for_a_turn_no_longer_than_yield_limit(key):
    # The holder never gives the turn back.
    with _newcomer_while_a_turn_is_held(key, yield_limit=0.05) as (_, newcomer, got, _):
        newcomer.join(5)
        assert not newcomer.is_alive() and got["selection"].token_ids == (1,)


def test_a_newcomer_to_a_calm_key_does_not_wait(key):
    calm = _newcomer_while_a_turn_is_held(key, yield_limit=10.0, contested=False)
    with calm as (store, newcomer, got, _):
        newcomer.join(5)
        assert got["selection"].token_ids == (1,) and store.calls["await_turn"] == 0


def test_a_selection_refused_the_turn_once_asks_no_more(store, clock, sleeper, key):
    issue(store, key, [3])
    hold(store, "tx-holder", 1, key, 1)
    taken, done = threading.Event(), threading.Event()
    holder = _hold_turn(store, key, taken, done)  # held throughout by another selection
    try:
        selector = make_selector(store, clock, sleeper, turn_after=0.02, yield_limit=0.01)
        with pytest.raises(FundsLocked) as caught:
            selector.select("tx-1", key.wallet, key.currency, 2)
    finally:
        done.set()
        holder.join(5)

    # One wait of at most yield_limit, then it polled on as before: its patience is unchanged.
    assert store.calls["take_turn"] == 2 and caught.value.stats.turns == 0  # with the holder's
    assert selector.config.turn_poll not in sleeper.calls


def test_turns_are_taken_in_the_order_asked(key):
    store = InMemoryStore()

    def until_queued(count: int) -> None:
        deadline = time.monotonic() + 5
        while len(store.turns.asking[key]) < count:
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.001)

    assert_turns_go_in_the_order_asked(store, key, Worker, until_queued)


@pytest.mark.parametrize("name", ["turn_after", "turn_poll", "yield_limit"])
def test_turn_settings_must_be_non_negative_seconds(name):
    with pytest.raises(ValueError, match=name):
        SelectorConfig(**{name: -1.0})
