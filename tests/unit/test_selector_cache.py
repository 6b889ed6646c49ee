"""Selector and its replica cache: local holds, stale and expired queues, stats."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sherdlock import (
    BackoffPolicy,
    Claim,
    FetchResult,
    FundsLocked,
    InMemoryStore,
    InsufficientFunds,
)
from tests.unit.selector_helpers import (
    SpyStore,
    assert_owns,
    hold,
    issue,
    locks_of,
    make_selector,
    warm,
)


def test_held_tokens_are_never_submitted_again(store, clock, sleeper, key):
    issue(store, key, [1] * 8)
    spy = SpyStore(store)
    selector = make_selector(spy, clock, sleeper)
    warm(selector, key)
    held = selector.select("tx-a", key.wallet, key.currency, 3)
    # A concurrent fetch that started before our locks puts them back as spare.
    selector.cache.put(key, [*held.tokens, *selector.cache.peek(key)])
    assert set(held.token_ids) <= {c.token_id for c in selector.cache.peek(key)}

    other = selector.select("tx-b", key.wallet, key.currency, 4)

    assert spy.submitted, "the cache was used"
    assert set(spy.submitted).isdisjoint(held.token_ids)
    assert other.stats.lock_conflicts == 0
    assert set(other.token_ids).isdisjoint(held.token_ids)


def test_without_local_hold_the_store_still_refuses(store, clock, sleeper, key):
    issue(store, key, [1] * 8)
    spy = SpyStore(store)
    selector = make_selector(spy, clock, sleeper)
    held = selector.select("tx-a", key.wallet, key.currency, 3)
    selector.cache.unhold(held.token_ids)
    selector.cache.invalidate()
    selector.cache.put(key, held.tokens)

    other = selector.select("tx-b", key.wallet, key.currency, 3)

    assert set(spy.submitted) == set(held.token_ids)
    assert other.stats.lock_conflicts == 3
    assert set(other.token_ids).isdisjoint(held.token_ids)


def test_stale_cache_yields_conflicts_never_double_grants(store, clock, sleeper, key):
    issue(store, key, [1] * 12)
    a = make_selector(store, clock, sleeper, seed=1)
    b = make_selector(store, clock, sleeper, seed=2)
    warm(a, key)
    first = a.select("tx-a1", key.wallet, key.currency, 1)
    cached = {c.token_id for c in a.cache.peek(key)}
    taken = b.select("tx-b", key.wallet, key.currency, 9)  # leaves 2 tokens free

    second = a.select("tx-a2", key.wallet, key.currency, 2)

    assert second.stats.lock_conflicts > 0
    # Every attempt was either refused or granted, whether from the queue or a fetch.
    assert second.stats.lock_attempts == second.stats.lock_conflicts + len(second.token_ids)
    assert set(second.token_ids).isdisjoint(taken.token_ids)
    assert set(second.token_ids).isdisjoint(first.token_ids)
    assert cached & set(taken.token_ids)
    for selection in (first, taken, second):
        assert_owns(store, selection)


def test_a_refused_queued_token_sends_the_rest_of_the_queue_to_a_fetch(store, clock, sleeper, key):
    # Under contention a queue goes stale faster than it ages out: once one queued token turns
    # out taken, the rest are as likely taken, so the next tokens come from a fetch of what is
    # free now instead of one refused try after another.
    issue(store, key, [1] * 12)
    a = make_selector(store, clock, sleeper, seed=1)
    b = make_selector(store, clock, sleeper, seed=2)
    warm(a, key)
    a.select("tx-a1", key.wallet, key.currency, 1)
    queued = len(a.cache.peek(key))
    taken = b.select("tx-b", key.wallet, key.currency, 9)  # 2 tokens left free

    second = a.select("tx-a2", key.wallet, key.currency, 2)

    assert queued > 2 and second.stats.fetches == 1
    assert second.stats.lock_conflicts < queued - 2  # not every stale queued token was tried
    assert set(second.token_ids).isdisjoint(taken.token_ids) and second.total == 2
    assert not {c.token_id for c in a.cache.peek(key)} & set(taken.token_ids)


def test_expired_cache_is_not_used(store, clock, sleeper, key):
    issue(store, key, [1] * 6)
    selector = make_selector(store, clock, sleeper, cache_ttl=0.5)
    warm(selector, key)
    selector.select("tx-1", key.wallet, key.currency, 1)
    assert selector.cache.peek(key)

    clock.advance(0.5)
    selection = selector.select("tx-2", key.wallet, key.currency, 2)

    # Both tokens came from a fresh fetch, none from the stale cache.
    assert selection.stats.cache_hits == 0 and selection.stats.fetches == 1
    assert selection.stats.lock_attempts == 2


def test_fresh_cache_saves_fetches(store, clock, sleeper, key):
    issue(store, key, [1] * 6)
    selector = make_selector(store, clock, sleeper)
    warm(selector, key)
    selector.select("tx-1", key.wallet, key.currency, 1)

    selection = selector.select("tx-2", key.wallet, key.currency, 2)

    assert selection.stats.fetches == 0 and selection.stats.cache_hits == 2


def test_selection_spanning_many_fetches_is_not_cut_short(store, clock, sleeper, key):
    # The first (random) batch is short and locks nothing, but that is not contention; each
    # later fetch (largest first) locks something. So no fetch counts as a retry.
    issue(store, key, [1] * 50)
    selector = make_selector(store, clock, sleeper, fetch_limit=2, max_retries=0)

    selection = selector.select("tx", key.wallet, key.currency, 40)

    assert selection.total == 40 and selection.stats.fetches == 1 + 20
    assert sleeper.calls == []


class ExpiryStore(SpyStore):
    """Report a different lease expiry per call."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.expiries = iter([50.0, 40.0, 45.0])

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        result = self.inner.fetch_and_lock(claim, limit)
        if not result.granted:  # a short batch: no lease to report
            return result
        return replace(result, expires_at=next(self.expiries))


def test_expiry_is_the_earliest_reported(store, clock, sleeper, key):
    issue(store, key, [1] * 3)
    selector = make_selector(ExpiryStore(store), clock, sleeper, fetch_limit=1)

    selection = selector.select("tx", key.wallet, key.currency, 3)

    assert selection.expires_at == 40.0


def test_refetch_waits_only_without_progress(store, clock, sleeper, key):
    issue(store, key, [1, 1, 1])
    hold(store, "other", 1, key, 3)
    selector = make_selector(
        store, clock, sleeper, fetch_limit=1, max_retries=2, backoff=BackoffPolicy(attempts=0)
    )

    with pytest.raises(FundsLocked) as caught:
        selector.select("tx", key.wallet, key.currency, 3)

    # The free tokens (2) never make up 3. The first fetch's batch is short, so at once the
    # largest tokens are fetched, then twice more after a wait: none of them locks anything.
    assert caught.value.stats.fetches == 1 + 3 and caught.value.stats.lock_attempts == 0
    assert len(sleeper.calls) == 2
    assert all(0.001 <= s <= 0.010 for s in sleeper.calls)


def test_a_fetch_locks_batch_by_batch_only_what_can_make_up_the_quantity(
    store, clock, sleeper, key
):
    issue(store, key, [1] * 6)
    selector = make_selector(store, clock, sleeper, fetch_limit=2, cold_fetch_limit=2)

    selection = selector.select("tx", key.wallet, key.currency, 5)

    # A short random batch (nothing locked), then the largest tokens by twos: 2, 2, 1.
    assert selection.total == 5 and selection.stats.fetches == 1 + 3
    with pytest.raises(InsufficientFunds):
        selector.select("tx-2", key.wallet, key.currency, 7)
    with pytest.raises(FundsLocked) as caught:
        selector.select("tx-3", key.wallet, key.currency, 2, patient=False)
    assert caught.value.available == 1 and caught.value.stats.lock_attempts == 0
    assert locks_of(store, "tx-2") == locks_of(store, "tx-3") == set()
    assert sleeper.calls == []  # an impatient selection never sleeps


class EchoStore(SpyStore):
    """Report every granted token twice, as a buggy store might."""

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        result = self.inner.fetch_and_lock(claim, limit)
        return replace(result, granted=result.granted * 2)


def test_token_reported_twice_is_counted_once(store, clock, sleeper, key):
    issue(store, key, [2, 2, 2])
    selector = make_selector(EchoStore(store), clock, sleeper, fetch_limit=1)

    selection = selector.select("tx", key.wallet, key.currency, 4)

    assert len(set(selection.token_ids)) == len(selection.token_ids) == 2
    assert selection.total == 4


class RacingStore(SpyStore):
    """Lose one row of the first fetch to a concurrent selection, as PostgreSQL may."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.raced = False

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        if not self.raced:
            self.raced = True
            racer = Claim("racer", claim.key, 1, 1)
            free = self.inner.fetch_and_lock(racer, 1).granted
            result = self.inner.fetch_and_lock(claim, limit)
            return replace(result, conflicts=len(free))
        return self.inner.fetch_and_lock(claim, limit)


def test_fetch_conflicts_are_counted(store, clock, sleeper, key):
    issue(store, key, [1] * 4)
    selector = make_selector(RacingStore(store), clock, sleeper)

    selection = selector.select("tx", key.wallet, key.currency, 3)

    # The fetch tried to lock 4 tokens (3 granted, 1 lost to the racer).
    assert selection.stats.lock_conflicts == 1 and selection.stats.lock_attempts == 4
    assert locks_of(store, "racer").isdisjoint(selection.token_ids)


def test_a_wallet_whose_queue_keeps_going_stale_is_served_by_fetches(store, clock, sleeper, key):
    # Two replicas on four tokens, each taking what the other has queued. Once a's queued
    # tokens have been refused twice in a row, a stops queueing the wallet for one ttl: its
    # selections lock from fetches and waste no attempt on a queue.
    issue(store, key, [1] * 4)
    a = make_selector(store, clock, sleeper, seed=1, cache_ttl=1.0)
    b = make_selector(store, clock, sleeper, seed=2)
    warm(a, key)
    a1 = a.select("a1", key.wallet, key.currency, 1)  # queues the other three
    b1 = b.select("b1", key.wallet, key.currency, 3)  # takes all three
    a.release(a1)
    a2 = a.select("a2", key.wallet, key.currency, 1)  # a queued token refused, then a fetch
    assert a2.stats.lock_conflicts == 1 and a2.stats.fetches == 1
    assert not a.cache.contested(key)
    a.release(a2)  # queued again
    b.select("b2", key.wallet, key.currency, 1)  # takes it
    b.release(b1)

    a3 = a.select("a3", key.wallet, key.currency, 1)  # refused again: contested

    assert a3.stats.lock_conflicts == 1 and a3.stats.fetches == 1
    assert a.cache.contested(key) and a.cache.peek(key) == []  # the fetch's spares not queued
    a.release(a3)
    assert a.cache.peek(key) == []
    claims = []
    fetch = store.fetch_and_lock

    def recording(claim, limit):
        claims.append(claim)
        return fetch(claim, limit)

    store.fetch_and_lock = recording
    a4 = a.select("a4", key.wallet, key.currency, 1)
    assert (a4.stats.fetches, a4.stats.cache_hits, a4.stats.lock_conflicts) == (1, 0, 0)
    a.release(a4)

    clock.advance(1.0)
    a.release(a.select("a5", key.wallet, key.currency, 1))
    a.cache.invalidate(key)
    a.select("a6", key.wallet, key.currency, 1)
    assert not a.cache.contested(key) and a.cache.peek(key)
    # The store is told which fetches are a contested wallet's (a newcomer's may yield to the
    # key's turn), and whether the rows a fetch does not lock are kept (it may leave them out):
    # not those of a contested wallet, nor those of a cold one (a5's: a4 was fetched one ttl
    # ago), only a warm one's (a6's).
    assert [claim.contested for claim in claims] == [True, False, False]
    assert [claim.spare for claim in claims] == [False, False, True]


class OrderSpy(SpyStore):
    """Record the order of every fetch."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.orders: list[str] = []

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        self.orders.append(claim.order)
        return self.inner.fetch_and_lock(claim, limit)


def test_a_short_random_batch_is_followed_by_the_largest_tokens(store, clock, sleeper, key):
    # Two random tokens never make up 101 (at most 50 + 50); a hundred tokens of 1 could help.
    issue(store, key, [1] * 100 + [50, 50, 50])
    spy = OrderSpy(store)
    selector = make_selector(spy, clock, sleeper, fetch_limit=2, cold_fetch_limit=2, max_retries=0)

    selection = selector.select("tx", key.wallet, key.currency, 101)

    # The random batch locks nothing; then the largest first, by twos: 50 + 50, then 50.
    assert spy.orders == ["random", "descending", "descending"]
    assert [c.quantity for c in selection.tokens] == [50, 50, 50]
    assert selection.stats.lock_attempts == 3 and sleeper.calls == []
    # Only the last fetch's spare (the token of 1 after the last 50) is queued: not what the
    # short batch saw, which the cache would have offered before the large tokens.
    assert [c.quantity for c in selector.cache.peek(key)] == [1]
