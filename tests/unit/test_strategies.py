"""Selection strategies: their choices, and the selector running them on the in-memory store."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sherdlock import (
    STRATEGIES,
    Candidate,
    Claim,
    FundsLocked,
    InMemoryStore,
    InsufficientFunds,
    InvalidRequest,
    NoExactMatch,
    Selector,
    SelectorConfig,
    Strategy,
    TooManyInputs,
    WalletKey,
)
from sherdlock.strategies import arrange, branch_and_bound, consolidate

KEY = WalletKey("alice", "USD")
PROPERTIES = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def world(*quantities: int, seed: int = 1) -> tuple[InMemoryStore, Selector]:
    store = InMemoryStore(rng=random.Random(seed))
    for token_id, quantity in enumerate(quantities, start=1):
        store.add_token(token_id, KEY.wallet, KEY.currency, quantity)
    selector = Selector(store, SelectorConfig(), rng=random.Random(seed), sleep=lambda s: None)
    return store, selector


def select(selector: Selector, quantity: int, strategy: Strategy, tx_id: str = "tx"):
    return selector.select(tx_id, KEY.wallet, KEY.currency, quantity, strategy=strategy)


def held_by(store: InMemoryStore, tx_id: str) -> set[int]:
    return {t for t, (holder, _, _) in store.live_locks().items() if holder == tx_id}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "cheapest"},
        {"name": "random", "max_change": 1},
        {"name": "smallest_first", "max_tokens": 3},
        {"name": "exact", "max_change": -1},
        {"name": "exact", "max_change": 2**64},
        {"name": "consolidate", "max_tokens": 0},
        {"name": "consolidate", "max_tokens": 1001},
        {"name": "random", "fallback": True},
        {"name": "exact", "max_change": 1.5},
    ],
)
def test_bad_terms_are_invalid_requests(kwargs):
    with pytest.raises(InvalidRequest):
        Strategy(**kwargs)


@pytest.mark.parametrize("name", ["smallest_first", "exact"])
def test_a_small_payment_takes_the_small_token(name):
    # The incident: a 1-unit payment drew the wallet's one large token.
    for seed in range(20):
        store, selector = world(1, 200, seed=seed)
        selection = select(selector, 1, Strategy(name))
        assert [c.quantity for c in selection.tokens] == [1]
        assert selection.change == 0 and selection.strategy == name
        assert held_by(store, "tx") == {1}


def test_fewest_tokens_takes_the_largest():
    _, selector = world(1, 2, 3, 200)
    selection = select(selector, 4, Strategy("fewest_tokens"))
    assert selection.token_ids == (4,) and selection.change == 196


def test_smallest_first_shuffles_only_within_equal_amounts():
    firsts = set()
    for seed in range(30):
        ordered = arrange([Candidate(i, q) for i, q in enumerate([5, 1, 1, 1, 3])], "ascending")
        assert [c.quantity for c in ordered] == [1, 1, 1, 3, 5]
        _, selector = world(5, 1, 1, 1, 3, seed=seed)
        firsts.add(select(selector, 1, Strategy("smallest_first")).token_ids)
    assert firsts == {(2,), (3,), (4,)}  # each of the equal tokens, none of the others


def test_exact_allows_change_up_to_max_change_and_prefers_less():
    _, selector = world(7, 12, 20)
    with pytest.raises(NoExactMatch):
        select(selector, 10, Strategy("exact"))
    selection = select(selector, 10, Strategy("exact", max_change=5))
    assert selection.total == 12


def test_exact_falls_back_to_random_only_when_asked():
    store, selector = world(7, 12, 20)
    with pytest.raises(NoExactMatch) as caught:
        select(selector, 10, Strategy("exact"))
    assert caught.value.strategy == "exact"
    assert store.live_locks() == {}
    selection = select(selector, 10, Strategy("exact", fallback=True))
    assert selection.strategy == "random" and selection.total >= 10
    assert held_by(store, "tx") == set(selection.token_ids)


def test_exact_tells_short_and_held_funds_from_no_match():
    _, selector = world(5, 5)
    with pytest.raises(InsufficientFunds):
        select(selector, 11, Strategy("exact"))
    select(selector, 5, Strategy("exact"), tx_id="other")
    with pytest.raises(FundsLocked):
        select(selector, 10, Strategy("exact"))


def test_consolidate_sweeps_the_smallest_up_to_max_tokens():
    store, selector = world(9, 1, 2, 1, 30, 3)
    selection = select(selector, 2, Strategy("consolidate", max_tokens=4))
    assert sorted(c.quantity for c in selection.tokens) == [1, 1, 2, 3]
    assert held_by(store, "tx") == set(selection.token_ids)


def test_consolidate_takes_a_large_token_when_the_small_ones_cannot_cover():
    _, selector = world(1, 1, 1, 1, 30)
    selection = select(selector, 20, Strategy("consolidate", max_tokens=3))
    assert sorted(c.quantity for c in selection.tokens) == [1, 1, 30]
    _, selector = world(1, 1, 1, 1, 5)
    with pytest.raises(TooManyInputs):
        select(selector, 9, Strategy("consolidate", max_tokens=2))


class StaleWindow(InMemoryStore):
    """A store whose windows still show tokens another selection has locked since."""

    def __init__(self, stale: list[Candidate], **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.stale = stale

    def candidates(self, key, smallest, largest, cap=None):
        fresh = super().candidates(key, smallest, largest, cap)
        ids = {c.token_id for c in fresh}
        return fresh + [c for c in self.stale if c.token_id not in ids]


def test_exact_gives_back_a_partial_hold_it_cannot_complete():
    store = StaleWindow([Candidate(1, 5)], rng=random.Random(1))
    for token_id, quantity in enumerate([5, 3, 4, 4], start=1):
        store.add_token(token_id, KEY.wallet, KEY.currency, quantity)
    store.try_lock(Claim("other", KEY, 5), [Candidate(1, 5)])
    selector = Selector(store, rng=random.Random(1), sleep=lambda s: None)
    selection = select(selector, 8, Strategy("exact"))
    # 5 + 3 was chosen, only the 3 granted; 3 cannot complete 8 from 4s: given back.
    assert sorted(selection.token_ids) == [3, 4] and selection.total == 8
    assert held_by(store, "tx") == {3, 4}
    assert selection.stats.lock_conflicts >= 1


def subsets(pool: list[Candidate]):
    for size in range(len(pool) + 1):
        yield from itertools.combinations(pool, size)


pools = st.lists(st.integers(1, 30), max_size=12).map(
    lambda qs: [Candidate(i, q) for i, q in enumerate(qs)]
)


@PROPERTIES
@given(pool=pools, need=st.integers(1, 120), max_change=st.integers(0, 10))
def test_branch_and_bound_finds_a_changeless_set_whenever_one_exists(pool, need, max_change):
    found = branch_and_bound(pool, need, max_change)
    sums = {sum(c.quantity for c in s) for s in subsets(pool)}
    if need in sums:
        assert found is not None and sum(c.quantity for c in found) == need
    elif any(need <= s <= need + max_change for s in sums):
        assert found is not None
        best = min(s for s in sums if s >= need)
        assert sum(c.quantity for c in found) == best
    else:
        assert found is None
    if found is not None:
        assert need <= sum(c.quantity for c in found) <= need + max_change
        assert len({c.token_id for c in found}) == len(found)
        assert {c.token_id for c in found} <= {c.token_id for c in pool}


@PROPERTIES
@given(pool=pools, need=st.integers(1, 120), max_tokens=st.integers(1, 6))
def test_consolidate_covers_within_max_tokens_whenever_it_can(pool, need, max_tokens):
    found = consolidate(pool, need, max_tokens)
    largest = sorted((c.quantity for c in pool), reverse=True)[:max_tokens]
    if sum(largest) < need:
        assert found is None
        return
    assert found is not None and len(found) <= max_tokens
    assert sum(c.quantity for c in found) >= need
    assert len({c.token_id for c in found}) == len(found)


terms = st.one_of(
    st.sampled_from([Strategy(name) for name in STRATEGIES]),
    st.builds(Strategy, st.just("exact"), max_change=st.integers(0, 8), fallback=st.booleans()),
    st.builds(Strategy, st.just("consolidate"), max_tokens=st.integers(1, 8)),
)


@PROPERTIES
@given(
    quantities=st.lists(st.integers(1, 25), min_size=1, max_size=14),
    held=st.lists(st.integers(0, 13), max_size=4),
    quantity=st.integers(1, 120),
    strategy=terms,
    seed=st.integers(0, 1000),
)
def test_no_strategy_locks_more_than_it_returns(quantities, held, quantity, strategy, seed):
    store, selector = world(*quantities, seed=seed)
    taken = {1 + i for i in held if i < len(quantities)}
    if taken:
        others = [Candidate(t, quantities[t - 1]) for t in sorted(taken)]
        store.try_lock(Claim("other", KEY, 1), others)
    config = SelectorConfig(fetch_limit=4, cold_fetch_limit=2)
    selector = Selector(store, config, rng=random.Random(seed), sleep=lambda s: None)
    try:
        selection = selector.select("tx", KEY.wallet, KEY.currency, quantity, strategy=strategy)
    except (InsufficientFunds, FundsLocked, NoExactMatch, TooManyInputs):
        assert held_by(store, "tx") == set()
        return
    assert held_by(store, "tx") == set(selection.token_ids)
    assert not taken & set(selection.token_ids)
    assert selection.total == sum(c.quantity for c in selection.tokens) >= quantity
    if strategy.name == "exact" and selection.strategy == "exact":
        assert selection.change <= strategy.change_allowed
    if strategy.name == "consolidate":
        assert selection.inputs <= strategy.inputs_allowed
