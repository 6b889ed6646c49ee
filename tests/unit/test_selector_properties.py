"""Properties of the selector against the in-memory store (no real sleeping)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sherdlock import (
    BackoffPolicy,
    FundsLocked,
    InMemoryStore,
    InsufficientFunds,
    Selection,
    Selector,
    SelectorConfig,
    WalletKey,
)

KEY = WalletKey("alice", "USD")
LEASE = 60.0
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(autouse=True)
def calm_soon(monkeypatch):
    """Let a replica turn calm (longer fetches) within the few tokens an example has."""
    monkeypatch.setattr("sherdlock.cache.CALM_AFTER", 3)


quantities_st = st.lists(st.integers(1, 40), max_size=14)
config_st = st.builds(
    SelectorConfig,
    max_retries=st.integers(0, 2),
    fetch_limit=st.integers(1, 6),
    cold_fetch_limit=st.integers(1, 6),
    calm_fetch_limit=st.integers(1, 12),
    cache_ttl=st.sampled_from([0.5, 1.0, 5.0]),
    backoff=st.builds(BackoffPolicy, attempts=st.integers(0, 2)),
)


@dataclass
class World:
    """One store, several replicas and the selections they handed out."""

    clock: object
    store: InMemoryStore
    replicas: list[Selector]
    live: list[tuple[int, Selection]] = field(default_factory=list)
    expired: list[tuple[int, Selection]] = field(default_factory=list)
    spent: list[Selection] = field(default_factory=list)
    next_token: int = 1

    def issue(self, quantity: int) -> None:
        self.store.add_token(self.next_token, KEY.wallet, KEY.currency, quantity)
        self.next_token += 1


def build_world(make_clock, make_sleeper, config, seed, quantities, replicas=3) -> World:
    clock = make_clock()
    sleeper = make_sleeper(clock)
    store = InMemoryStore(clock=clock, lease=LEASE, rng=random.Random(seed))
    selectors = [
        Selector(store, config, rng=random.Random(seed + i), sleep=sleeper, clock=clock)
        for i in range(1, replicas + 1)
    ]
    world = World(clock, store, selectors)
    for quantity in quantities:
        world.issue(quantity)
    return world


def tx_locks(store: InMemoryStore, tx_id: str) -> set[int]:
    return {t for t, (tx, _, _) in store.locks().items() if tx == tx_id}


def check_selection(world: World, selection: Selection, quantity: int) -> None:
    ids = selection.token_ids
    assert selection.total >= quantity
    assert selection.total == sum(c.quantity for c in selection.tokens)
    assert len(set(ids)) == len(ids), "a token was selected twice"
    live = world.store.live_locks()
    for token_id in ids:
        assert not world.store.is_spent(token_id)
        assert live[token_id][:2] == (selection.tx_id, selection.fence)
    assert tx_locks(world.store, selection.tx_id) == set(ids), "locks beyond the selection"


def check_invariants(world: World) -> None:
    seen: dict[int, str] = {}
    for _, selection in world.live:
        for token_id in selection.token_ids:
            assert token_id not in seen, f"token {token_id} in two live selections"
            seen[token_id] = selection.tx_id
    owners = {(s.tx_id, s.fence) for _, s in world.live} | {(s.tx_id, s.fence) for s in world.spent}
    for token_id, (tx_id, fence, _) in world.store.live_locks().items():
        assert (tx_id, fence) in owners, f"lock of {tx_id} on {token_id} belongs to no one"
        if token_id in seen:
            assert seen[token_id] == tx_id


def select_with_oracle(world: World, replica: int, tx_id: str, quantity: int) -> None:
    """Select sequentially, where the outcome is fully determined by the supply."""
    before = world.store.supply(KEY, tx_id)
    try:
        selection = world.replicas[replica].select(tx_id, KEY.wallet, KEY.currency, quantity)
    except InsufficientFunds as exc:
        assert before.unspent < quantity
        assert exc.available == before.available and exc.requested == quantity
    except FundsLocked as exc:
        assert before.unspent >= quantity > before.available
        assert exc.available == before.available
    else:
        assert before.available >= quantity
        check_selection(world, selection, quantity)
        world.live.append((replica, selection))
        return
    assert tx_locks(world.store, tx_id) == set(), "an aborted selection kept locks"


select_op = st.tuples(st.just("select"), st.integers(0, 2), st.integers(1, 120))
op_st = st.one_of(
    select_op,
    select_op,
    select_op,
    st.tuples(st.just("release"), st.integers(0, 100)),
    st.tuples(st.just("spend"), st.integers(0, 100)),
    st.tuples(st.just("issue"), st.integers(1, 40)),
    st.tuples(st.just("tick"), st.floats(0, 2)),
    st.tuples(st.just("expire")),
)


@SETTINGS
@given(
    quantities=quantities_st,
    config=config_st,
    seed=st.integers(0, 2**16),
    ops=st.lists(op_st, min_size=3, max_size=25),
)
def test_sequential_selections_never_share_tokens(
    make_clock, make_sleeper, quantities, config, seed, ops
):
    world = build_world(make_clock, make_sleeper, config, seed, quantities)
    for step, op in enumerate(ops):
        kind = op[0]
        if kind == "select":
            select_with_oracle(world, op[1], f"tx-{step}", op[2])
        elif kind == "release" and (world.live or world.expired):
            pool = world.live + world.expired
            replica, selection = pool[op[1] % len(pool)]
            # A late release after expiry must not touch whoever took the tokens over.
            world.replicas[replica].release(selection)
            (world.live if (replica, selection) in world.live else world.expired).remove(
                (replica, selection)
            )
        elif kind == "spend" and world.live:
            replica, selection = world.live.pop(op[1] % len(world.live))
            world.store.spend(selection.token_ids, selection.tx_id)
            world.replicas[replica].forget(selection.token_ids, KEY)
            world.spent.append(selection)
        elif kind == "issue":
            world.issue(op[1])
        elif kind == "tick":
            world.clock.advance(op[1])
        elif kind == "expire":
            world.clock.advance(LEASE)
            world.expired += world.live
            world.live = []
            world.spent = []
        check_invariants(world)


class HookedStore:
    """Run another replica's operation just before each call this store forwards."""

    def __init__(self, inner: InMemoryStore, hook) -> None:
        self.inner = inner
        self.hook = hook

    def fetch_and_lock(self, *args):
        self.hook()
        return self.inner.fetch_and_lock(*args)

    def try_lock(self, *args):
        self.hook()
        return self.inner.try_lock(*args)

    def supply(self, *args):
        self.hook()
        return self.inner.supply(*args)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@SETTINGS
@given(
    quantities=st.lists(st.integers(1, 20), min_size=4, max_size=16),
    config=config_st,
    seed=st.integers(0, 2**16),
    requests=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    data=st.data(),
)
def test_interleaved_selections_never_share_tokens(
    make_clock, make_sleeper, quantities, config, seed, requests, data
):
    world = build_world(make_clock, make_sleeper, config, seed, quantities, replicas=1)
    other = world.replicas[0]
    budget = [12]

    def interleave() -> None:
        if budget[0] == 0:
            return
        budget[0] -= 1
        action = data.draw(st.sampled_from(["none", "select", "select", "release", "spend"]))
        if action == "select":
            tx_id = f"b-{budget[0]}-{len(world.live)}"
            try:
                selection = other.select(
                    tx_id, KEY.wallet, KEY.currency, data.draw(st.integers(1, 25))
                )
            except (InsufficientFunds, FundsLocked):
                assert tx_locks(world.store, tx_id) == set()
            else:
                world.live.append((0, selection))
        elif action in ("release", "spend") and world.live:
            _, selection = world.live.pop(data.draw(st.integers(0, len(world.live) - 1)))
            if action == "release":
                other.release(selection)
            else:
                world.store.spend(selection.token_ids, selection.tx_id)
                other.forget(selection.token_ids, KEY)
                world.spent.append(selection)

    hooked = HookedStore(world.store, interleave)
    sleeper = make_sleeper(world.clock)
    mine = Selector(hooked, config, rng=random.Random(seed), sleep=sleeper, clock=world.clock)
    for n, quantity in enumerate(requests):
        tx_id = f"a-{n}"
        try:
            selection = mine.select(tx_id, KEY.wallet, KEY.currency, quantity)
        except (InsufficientFunds, FundsLocked):
            assert tx_locks(world.store, tx_id) == set()
        else:
            check_selection(world, selection, quantity)
            world.live.append((1, selection))
        check_invariants(world)


@SETTINGS
@given(quantities=quantities_st, quantity=st.integers(1, 300), config=config_st, seed=st.integers())
def test_without_contention_funds_are_short_iff_supply_is(
    make_clock, make_sleeper, quantities, quantity, config, seed
):
    world = build_world(make_clock, make_sleeper, config, seed, quantities, replicas=1)
    try:
        selection = world.replicas[0].select("tx", KEY.wallet, KEY.currency, quantity)
    except InsufficientFunds as exc:
        assert sum(quantities) < quantity
        assert exc.available == sum(quantities)
        assert exc.stats.rounds == 1
        assert world.store.locks() == {}
    else:
        assert sum(quantities) >= quantity
        check_selection(world, selection, quantity)


@SETTINGS
@given(
    quantities=st.lists(st.integers(1, 20), min_size=1, max_size=12),
    quantity=st.integers(1, 100),
    config=config_st,
    seed=st.integers(0, 2**16),
    method=st.sampled_from(["try_lock", "fetch_and_lock", "supply"]),
    skip=st.integers(0, 4),
    after_commit=st.booleans(),
    warm=st.booleans(),
)
def test_store_failure_propagates_and_leaves_no_lock(
    make_clock, make_sleeper, quantities, quantity, config, seed, method, skip, after_commit, warm
):
    world = build_world(make_clock, make_sleeper, config, seed, quantities, replicas=0)
    drew = FenceWitness(world.store)  # tells which call drew the fence
    selector = Selector(
        drew, config, rng=random.Random(seed), sleep=make_sleeper(world.clock), clock=world.clock
    )
    if warm:  # fill the cache so that try_lock gets used
        selector.release(selector.select("warm", KEY.wallet, KEY.currency, 1))
    boom = OSError("connection lost")
    world.store.fail_next(method, boom, skip=skip, after_commit=after_commit)
    calls_before = sum(world.store.calls.values())
    try:
        selection = selector.select("tx", KEY.wallet, KEY.currency, quantity)
    except OSError as exc:
        assert exc is boom
        if drew.lost_fence:
            # The call that drew the fence committed but its answer was lost: its locks
            # cannot be named, and run out with their lease.
            world.clock.advance(LEASE)
            assert not any(tx == "tx" for tx, _, _ in world.store.live_locks().values())
        else:
            assert tx_locks(world.store, "tx") == set()
    except (InsufficientFunds, FundsLocked):
        assert tx_locks(world.store, "tx") == set()
    else:
        check_selection(world, selection, quantity)
    assert sum(world.store.calls.values()) > calls_before


class FenceWitness:
    """Forward to a store; note whether a locking call that had to draw the fence raised."""

    def __init__(self, inner: InMemoryStore) -> None:
        self.inner = inner
        self.lost_fence = False

    def fetch_and_lock(self, claim, limit):
        return self._watch(claim, self.inner.fetch_and_lock, limit)

    def try_lock(self, claim, candidates):
        return self._watch(claim, self.inner.try_lock, candidates)

    def _watch(self, claim, call, arg):
        try:
            return call(claim, arg)
        except OSError:
            self.lost_fence = claim.fence is None
            raise

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
