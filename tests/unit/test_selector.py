"""Selector behaviour against the in-memory store, with fake time: results, errors, backoff."""

from __future__ import annotations

import random
import threading
import time

import pytest

from sherdlock import (
    BackoffPolicy,
    Candidate,
    Claim,
    FetchResult,
    FundsLocked,
    InMemoryStore,
    InsufficientFunds,
    InvalidRequest,
    Selection,
    Selector,
    SelectorConfig,
)
from tests.unit.selector_helpers import assert_owns, hold, issue, locks_of, make_selector, warm


def test_select_locks_tokens_reaching_quantity(store, clock, sleeper, key):
    issue(store, key, [5, 7, 11, 13])
    selector = make_selector(store, clock, sleeper)

    selection = selector.select("tx-1", key.wallet, key.currency, 20)

    assert selection.total >= 20
    assert selection.total == sum(c.quantity for c in selection.tokens)
    assert len(set(selection.token_ids)) == len(selection.token_ids)
    assert selection.key == key and selection.quantity == 20
    assert selection.change == selection.total - 20
    assert selection.expires_at == clock() + store.lease
    assert selection.stats.fetches == 1 and selection.stats.rounds == 1
    assert_owns(store, selection)
    assert sleeper.calls == []


def test_select_draws_fence_from_store_unless_given(store, clock, sleeper, key):
    issue(store, key, [1, 1])
    selector = make_selector(store, clock, sleeper)
    warm(selector, key)

    drawn = selector.select("tx-1", key.wallet, key.currency, 1)
    given = selector.select("tx-2", key.wallet, key.currency, 1, fence=99)

    # Drawn by the locking call itself: no round trip of its own.
    assert drawn.fence == 1 and set(store.calls) == {"fetch_and_lock", "try_lock"}
    assert given.fence == 99
    assert store.locks()[given.token_ids[0]][1] == 99


@pytest.mark.parametrize(
    ("tx_id", "wallet", "currency", "quantity", "fence"),
    [
        ("tx", "w", "USD", 0, None),
        ("tx", "w", "USD", -5, None),
        ("tx", "w", "USD", 2**64, None),
        ("tx", "w", "USD", 1.0, None),
        ("tx", "w", "USD", True, None),
        ("", "w", "USD", 1, None),
        ("tx", " ", "USD", 1, None),
        ("tx", "w", "", 1, None),
        (None, "w", "USD", 1, None),
        ("tx", "w", "USD", 1, -1),
    ],
)
def test_invalid_request_is_rejected_before_touching_store(
    store, clock, sleeper, tx_id, wallet, currency, quantity, fence
):
    selector = make_selector(store, clock, sleeper)

    with pytest.raises(InvalidRequest):
        selector.select(tx_id, wallet, currency, quantity, fence)

    assert sum(store.calls.values()) == 0


def test_largest_quantity_is_accepted(store, clock, sleeper, key):
    issue(store, key, [2**64 - 1])
    selection = make_selector(store, clock, sleeper).select("tx", "alice", "USD", 2**64 - 1)
    assert selection.total == 2**64 - 1 and type(selection.total) is int


def test_insufficient_funds_reports_what_others_do_not_hold(store, clock, sleeper, key):
    issue(store, key, [3, 3, 4])
    hold(store, "other", 1, key, 3)
    selector = make_selector(store, clock, sleeper)

    with pytest.raises(InsufficientFunds) as caught:
        selector.select("tx", key.wallet, key.currency, 11)

    assert caught.value.available == 6 and caught.value.requested == 11
    assert caught.value.key == key and caught.value.stats.rounds == 1
    assert locks_of(store, "tx") == set()
    assert sleeper.calls == []  # never retried


def test_funds_locked_when_other_replica_never_releases(store, clock, sleeper, key):
    # The seed's livelock, one side frozen: two tokens of 3, both sides ask 4.
    issue(store, key, [3, 3])
    backoff = BackoffPolicy(attempts=2, min_delay=0.01, max_delay=0.02)
    holder = make_selector(store, clock, sleeper, seed=1)
    held = holder.select("tx-a", key.wallet, key.currency, 3)
    assert len(held.tokens) == 1
    sleeper.calls.clear()
    # Without turns (sherdlock.turns, tests/unit/test_turns.py): the rounds and their sleeps.
    config = dict(max_retries=3, backoff=backoff, refetch_delay=(0.001, 0.002), turn_after=0)
    selector = make_selector(store, clock, sleeper, seed=2, **config)

    with pytest.raises(FundsLocked) as caught:
        selector.select("tx-b", key.wallet, key.currency, 4)

    err = caught.value
    assert err.available == 3 and err.requested == 4
    assert err.retry_after == selector.config.retry_after > backoff.max_delay
    assert err.stats.rounds == 3
    backoffs = [s for s in sleeper.calls if s >= 0.01]
    refetches = [s for s in sleeper.calls if s < 0.01]
    assert len(backoffs) == 2 and all(0.01 <= s <= 0.02 for s in backoffs)
    assert err.stats.backoff_seconds == pytest.approx(sum(backoffs))
    assert len(refetches) == 3 * 3  # max_retries stalled refetches per round
    assert locks_of(store, "tx-b") == set()
    assert_owns(store, held)


class StagedStore:
    """Make each transaction's first fetch lock a different one of two tokens, then wait.

    This forces the seed's interleaving where each replica holds half of what both need,
    as two fetches with the same snapshot do when SKIP LOCKED splits their picks.
    """

    def __init__(self, inner: InMemoryStore, parties: int) -> None:
        self.inner = inner
        self.barrier = threading.Barrier(parties)
        self.staged: dict[str, int] = {}
        self.lock = threading.Lock()

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        with self.lock:
            first = claim.tx_id not in self.staged
            if first:
                self.staged[claim.tx_id] = token_id = len(self.staged) + 1
        if not first:
            return self.inner.fetch_and_lock(claim, limit)
        outcome = self.inner.try_lock(claim, [Candidate(token_id, 3)])
        self.barrier.wait(timeout=5)
        return FetchResult(
            granted=outcome.granted, expires_at=outcome.expires_at, fence=outcome.fence
        )

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.mark.parametrize("winner_action", ["spend", "release"])
def test_livelock_resolves_with_backoff(key, winner_action):
    inner = InMemoryStore(rng=random.Random(3))
    issue(inner, key, [3, 3])
    staged = StagedStore(inner, parties=2)
    config = SelectorConfig(
        max_retries=2,
        refetch_delay=(0.0005, 0.001),
        backoff=BackoffPolicy(attempts=100, min_delay=0.001, max_delay=0.02),  # a stalled winner
    )
    outcomes: dict[str, object] = {}
    first_seen: list[str] = []

    def run(tx_id: str, seed: int) -> None:
        selector = Selector(staged, config, rng=random.Random(seed))
        try:
            selection = selector.select(tx_id, key.wallet, key.currency, 4)
        except Exception as exc:
            outcomes[tx_id] = exc
            return
        first_seen.append(tx_id)
        outcomes[tx_id] = selection
        if winner_action == "spend":
            inner.spend(selection.token_ids, tx_id)
            selector.forget(selection.token_ids, key)
        else:
            selector.release(selection)

    threads = [threading.Thread(target=run, args=(f"tx-{i}", i)) for i in range(2)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    assert time.monotonic() - started < 5
    assert set(staged.staged) == {"tx-0", "tx-1"}  # the livelock really was staged

    winner = first_seen[0]
    loser = "tx-1" if winner == "tx-0" else "tx-0"
    assert isinstance(outcomes[winner], Selection)
    assert outcomes[winner].total == 6
    if winner_action == "spend":
        assert isinstance(outcomes[loser], InsufficientFunds)
        assert outcomes[loser].available == 0
    else:
        assert isinstance(outcomes[loser], Selection)
        assert set(outcomes[loser].token_ids) == {1, 2}
        assert locks_of(inner, winner) == set()
    assert outcomes[winner].stats.rounds + outcomes[loser].stats.rounds > 2  # backoff ran


@pytest.fixture
def cached_selector(store, clock, sleeper, key) -> Selector:
    """Return a selector whose cache holds spare tokens 1..10 (quantity 1 each) but one."""
    issue(store, key, [1] * 10)
    selector = make_selector(store, clock, sleeper)
    warm(selector, key)
    first = selector.select("tx-0", key.wallet, key.currency, 1)
    assert len(selector.cache.peek(key)) == 9
    selector.release(first, token_ids=[])  # keep it locked, but exercise the no-op path
    return selector


def test_try_lock_failure_propagates_unchanged_and_leaves_no_lock(
    cached_selector, store, sleeper, key
):
    boom = ConnectionError("server closed the connection")
    store.fail_next("try_lock", boom)
    calls_before = store.calls["try_lock"]

    with pytest.raises(ConnectionError) as caught:
        cached_selector.select("tx-1", key.wallet, key.currency, 3)

    assert caught.value is boom
    assert store.calls["try_lock"] == calls_before + 1  # not retried as contention
    assert store.calls["fetch_and_lock"] == 1
    assert locks_of(store, "tx-1") == set()
    assert sleeper.calls == []


def test_try_lock_failure_after_commit_releases_in_flight_tokens(cached_selector, store, key):
    store.fail_next("try_lock", ConnectionError("lost during commit"), after_commit=True)

    with pytest.raises(ConnectionError):
        cached_selector.select("tx-1", key.wallet, key.currency, 3, fence=7)

    assert locks_of(store, "tx-1") == set()


def test_locks_of_a_lost_call_that_drew_the_fence_expire_with_their_lease(
    cached_selector, store, clock, key
):
    # The call committed, then its answer (and so the fence it drew) was lost: its rows
    # cannot be named for an unlock, and nobody else's could be touched by trying.
    store.fail_next("try_lock", ConnectionError("lost during commit"), after_commit=True)

    with pytest.raises(ConnectionError):
        cached_selector.select("tx-1", key.wallet, key.currency, 3)

    assert locks_of(store, "tx-1")
    clock.advance(store.lease)
    assert not any(tx == "tx-1" for tx, _, _ in store.live_locks().values())


@pytest.mark.parametrize("after_commit", [False, True])
def test_fetch_failure_releases_earlier_grants(store, clock, sleeper, key, after_commit):
    issue(store, key, [1] * 5)
    selector = make_selector(store, clock, sleeper, fetch_limit=1)
    boom = TimeoutError("statement timeout")
    store.fail_next("fetch_and_lock", boom, skip=1, after_commit=after_commit)

    with pytest.raises(TimeoutError) as caught:
        selector.select("tx", key.wallet, key.currency, 3)

    assert caught.value is boom
    assert store.calls["fetch_and_lock"] == 2
    assert locks_of(store, "tx") == set()
    assert not any(selector.cache.is_held(t) for t in range(1, 6))


def test_failed_release_keeps_original_error_and_notes_it(store, clock, sleeper, key):
    issue(store, key, [1] * 5)
    selector = make_selector(store, clock, sleeper, fetch_limit=1)
    boom = TimeoutError("statement timeout")
    # The first fetch's batch is short (locks nothing), the second locks a token.
    store.fail_next("fetch_and_lock", boom, skip=2)
    store.fail_next("unlock", ConnectionError("gone"))

    with pytest.raises(TimeoutError) as caught:
        selector.select("tx", key.wallet, key.currency, 3)

    assert caught.value is boom
    assert any("ConnectionError('gone')" in note for note in caught.value.__notes__)
    assert len(locks_of(store, "tx")) == 1  # left to expire with its lease


def test_interrupt_releases_locks(cached_selector, store, key):
    store.fail_next("try_lock", KeyboardInterrupt())

    with pytest.raises(KeyboardInterrupt):
        cached_selector.select("tx-1", key.wallet, key.currency, 3)

    assert locks_of(store, "tx-1") == set()
