"""A fetch that loses every token it tried to a concurrent selection: the next follows at once.

Such a fetch read enough free tokens (it reports no shortfall), and selections that started after
its snapshot took all of those it picked (its conflicts). Nothing says that others hold what is
needed, so a patient round refetches without the sleep it takes after a shortfall; the lost
fetch still counts as a stall, so a round that keeps losing ends as a stalled one does.
"""

from __future__ import annotations

import pytest

from sherdlock import BackoffPolicy, Claim, FetchResult, FundsLocked, InMemoryStore
from tests.unit.selector_helpers import hold, issue, make_selector

# Turns and backoff rounds aside: the sleeps counted are the refetches' own.
CONFIG = dict(
    max_retries=3,
    refetch_delay=(0.001, 0.002),
    turn_after=0,
    backoff=BackoffPolicy(attempts=0, min_delay=0.01, max_delay=0.02),
)


class LosingStore:
    """Answer the first ``losses`` fetches as lost races: nothing granted, every pick taken."""

    def __init__(self, inner: InMemoryStore, losses: int) -> None:
        self.inner = inner
        self.losses = losses
        self.fetches = 0

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        self.fetches += 1
        if self.fetches > self.losses:
            return self.inner.fetch_and_lock(claim, limit)
        return FetchResult(conflicts=2, fence=claim.fence or 41, batch_rows=4, batch_total=40)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def test_a_fetch_that_lost_its_picks_is_followed_by_another_at_once(store, clock, sleeper, key):
    issue(store, key, [10, 10, 10, 10])
    losing = LosingStore(store, losses=2)
    selector = make_selector(losing, clock, sleeper, **CONFIG)

    selection = selector.select("tx", key.wallet, key.currency, 15)

    assert selection.total >= 15 and losing.fetches == 3
    assert sleeper.calls == []


def test_a_round_that_keeps_losing_ends_after_its_stalls(store, clock, sleeper, key):
    issue(store, key, [10, 10, 10, 10])
    losing = LosingStore(store, losses=100)
    selector = make_selector(losing, clock, sleeper, **CONFIG)

    with pytest.raises(FundsLocked):
        selector.select("tx", key.wallet, key.currency, 15)

    assert losing.fetches == CONFIG["max_retries"] + 1
    assert sleeper.calls == []


def test_a_fetch_short_of_free_tokens_still_sleeps_before_the_next(store, clock, sleeper, key):
    # The contrast: others hold what is needed (a shortfall), so the round waits for them.
    issue(store, key, [10, 10])
    hold(store, "other", 7, key, 1)
    selector = make_selector(store, clock, sleeper, **CONFIG)

    with pytest.raises(FundsLocked):
        selector.select("tx", key.wallet, key.currency, 15)

    assert len(sleeper.calls) == CONFIG["max_retries"]
    assert all(0.001 <= s <= 0.002 for s in sleeper.calls)
