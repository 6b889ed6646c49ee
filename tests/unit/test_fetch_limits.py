"""How many rows a replica's fetch reads: cold, warm, calm and contested wallets."""

from __future__ import annotations

from sherdlock import Claim, FetchResult, InMemoryStore
from sherdlock.cache import CALM_AFTER
from tests.unit.selector_helpers import SpyStore, hold, issue, make_selector, warm


class LimitSpy(SpyStore):
    """Record the row limit of every fetch."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(inner)
        self.limits: list[int] = []
        self.spare: list[bool] = []  # whether each fetch asked for the rows it did not lock

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        self.limits.append(limit)
        self.spare.append(claim.spare)
        return self.inner.fetch_and_lock(claim, limit)


def test_a_wallet_selected_from_its_queue_stays_warm(store, clock, sleeper, key):
    issue(store, key, [1] * 40)
    spy = LimitSpy(store)
    # A cold fetch reads the one token needed, so that it leaves nothing to queue. A warm one
    # reads twice as many, worth it at a pace of two selections a ttl: a gap under 0.5 s.
    selector = make_selector(spy, clock, sleeper, fetch_limit=2, cold_fetch_limit=1, cache_ttl=1.0)

    selector.select("tx-1", key.wallet, key.currency, 1)  # cold: a short fetch, no spare asked
    clock.advance(0.4)
    selector.select("tx-2", key.wallet, key.currency, 1)  # warm: a full batch, the rest queued
    assert (spy.limits, spy.spare) == ([1, 2], [False, True])
    clock.advance(0.4)
    selector.select("tx-3", key.wallet, key.currency, 1)  # from the queue: no fetch
    assert len(spy.limits) == 2 and len(spy.submitted) == 1
    # The latest fetch is 0.8 s old, too long ago for a warm pace, but the wallet was selected
    # from (its queue) 0.4 s ago: still in demand here, so the fetch is a warm one.
    clock.advance(0.4)
    selector.select("tx-4", key.wallet, key.currency, 1)
    assert (spy.limits[-1], spy.spare[-1]) == (2, True)
    # Quiet for longer than the ttl: cold again.
    clock.advance(1.5)
    selector.select("tx-5", key.wallet, key.currency, 1)
    assert (spy.limits[-1], spy.spare[-1]) == (1, False)


def test_a_wallet_this_replica_has_to_itself_gets_longer_fetches(store, clock, sleeper, key):
    issue(store, key, [1] * 400)
    spy = LimitSpy(store)
    selector = make_selector(
        spy, clock, sleeper, fetch_limit=8, cold_fetch_limit=4, calm_fetch_limit=32
    )
    # Alone on the wallet, every queued token is granted: calm once CALM_AFTER of them were.
    n = 0
    while len(spy.submitted) < CALM_AFTER:
        assert set(spy.limits) <= {4, 8}  # not calm yet: cold, then warm fetches
        selector.select(f"tx-{n}", key.wallet, key.currency, 2)
        n += 1
    while len(selector.cache.peek(key)) < 2 or spy.limits[-1] != 32:
        selector.select(f"tx-{n}", key.wallet, key.currency, 2)
        n += 1
    assert spy.limits[0] == 4 and spy.limits.count(32) == 1

    # Another replica takes the queued tokens: the refusals end the calm and make the wallet
    # contested, whose fetch reads what its need takes (twice 2 tokens of 1), no less than cold.
    hold(store, "other", 7, key, *[c.token_id for c in selector.cache.peek(key)])
    selector.select("tx-after", key.wallet, key.currency, 2)
    assert selector.cache.contested(key) and spy.limits[-1] == 4


def test_a_contested_wallets_fetch_reads_what_the_need_takes(store, clock, sleeper, key):
    issue(store, key, [1] * 400)
    spy = LimitSpy(store)
    selector = make_selector(spy, clock, sleeper, fetch_limit=32, cold_fetch_limit=4)
    warm(selector, key)
    selector.select("tx-0", key.wallet, key.currency, 2)  # a warm fetch: 32 rows, 30 queued
    assert spy.limits == [32]
    # Another replica takes the queued tokens: refused, the wallet is contested.
    hold(store, "other", 7, key, *[c.token_id for c in selector.cache.peek(key)])
    selector.select("tx-1", key.wallet, key.currency, 2)
    assert selector.cache.contested(key) and spy.limits[-1] == 4  # twice 2 tokens, or cold

    for need, limit in ((10, 20), (16, 32), (20, 32)):
        selector.select(f"tx-{need}", key.wallet, key.currency, need)
        assert (spy.limits[-1], spy.spare[-1]) == (limit, False)
