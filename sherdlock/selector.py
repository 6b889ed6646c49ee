"""Select and lock tokens for a transaction without ever handing a token to two of them."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Sequence

from . import choosing, turns
from .cache import TokenCache
from .config import SelectorConfig
from .demand import Demand
from .errors import FundsLocked, InsufficientFunds, InvalidRequest, NoExactMatch
from .interfaces import Clock, Sleeper, TokenStore
from .round import Round, validate
from .strategies import DEFAULT, ORDER_RANDOM, Strategy, arrange
from .types import Candidate, Selection, SelectionStats, Supply, WalletKey


class Selector:
    """Select tokens worth at least a quantity and lock them for one transaction.

    One instance serves a whole replica and may be shared by its threads. The lock table
    behind `store` is the source of truth; the cache only saves queries.
    """

    def __init__(
        self,
        store: TokenStore,
        config: SelectorConfig | None = None,
        cache: TokenCache | None = None,
        rng: random.Random | None = None,
        sleep: Sleeper = time.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        self._store = store
        self._config = config if config is not None else SelectorConfig()
        self._clock = clock
        self._cache = (
            cache
            if cache is not None
            else TokenCache(self._config.cache_ttl, self._config.cache_max_wallets, clock)
        )
        self._rng = rng if rng is not None else random.Random()
        self._sleep = sleep
        # When this replica last selected from each key (by a fetch or from its queue) and
        # what its tokens are worth: how many rows a fetch of it reads.
        self._demand = Demand(self._config, self._cache.ttl, clock)
        self._lock = threading.Lock()  # for adding an ordered cache
        # Candidates read in quantity order, per order: kept apart from the random queues,
        # whose order would defeat the strategies that read them. Holds stay in `_cache`.
        self._ordered: dict[str, TokenCache] = {}

    @property
    def config(self) -> SelectorConfig:
        """Return the configuration in use."""
        return self._config

    @property
    def cache(self) -> TokenCache:
        """Return the candidate cache of this replica."""
        return self._cache

    @property
    def store(self) -> TokenStore:
        """Return the store this selector locks in."""
        return self._store

    def select(
        self,
        tx_id: str,
        wallet: str,
        currency: str,
        quantity: int,
        fence: int | None = None,
        *,
        patient: bool = True,
        record: bool = False,
        namespace: str = "",
        strategy: Strategy | None = None,
    ) -> Selection:
        """Lock tokens of `wallet` in `currency` summing to at least `quantity` for `tx_id`.

        Raise InvalidRequest for bad arguments, InsufficientFunds when the unspent supply is
        short, FundsLocked when others hold what is needed. A patient call waits for them:
        it refetches after short sleeps and backs off between rounds before it gives up; an
        impatient one (patient=False) never sleeps and answers FundsLocked as soon as the
        store reports that the free tokens cannot make up the quantity. Store failures
        propagate unchanged. On any failure this call holds no lock. Without `fence` the
        first locking statement draws one. With `record` the store records the selection
        as it completes it (see Claim.record) and may refuse with ClaimRefused when `tx_id`
        is taken in `namespace`. `strategy` (default: random) decides which free tokens are
        locked; an exact one raises NoExactMatch, or TooManyInputs for consolidate, when no
        set of the free tokens meets its terms (an exact one with `fallback` selects as random
        instead).
        """
        key = validate(tx_id, wallet, currency, quantity, fence)
        stats = SelectionStats()
        first = Round(tx_id, key, quantity, fence, stats, recording=record, namespace=namespace)
        first.turn = turns.Turn(self._clock())
        # A newcomer to a contested key lets whoever holds or asks for its turn go first.
        turns_on = patient and bool(self._config.turn_after)
        first.turn.newcomer = turns_on and self._cache.contested(key)
        first.strategy = strategy if strategy is not None else DEFAULT
        try:
            return self._rounds(first, patient)
        except NoExactMatch:
            if not first.strategy.fallback:
                raise
        return self._rounds(first.fresh(DEFAULT), patient)

    def _rounds(self, rnd: Round, patient: bool) -> Selection:
        """Run a selection's first round, then backoff rounds while it loses to contention."""
        stats, backoff = rnd.stats, self._config.backoff
        rounds = backoff.attempts + 1 if patient else 1
        try:
            for attempt in range(rounds):
                if attempt:
                    # Both sides of a livelock have released everything; sleeping for
                    # different random times lets the first to wake take all it needs.
                    # A selection holding its key's turn keeps it, and polls at its pace.
                    held = rnd.turn.held
                    delay = self._config.turn_poll if held else backoff.delay(self._rng)
                    stats.backoff_seconds += delay
                    self._sleep(delay)
                    # Cached candidates are the ones just fought over; start from the store.
                    self._cache.invalidate(rnd.key)
                    self._cache_for(rnd.strategy.order).invalidate(rnd.key)
                    rnd = rnd.fresh()  # later rounds keep the fence the first one drew
                stats.rounds += 1
                try:
                    return self._run_round(rnd, patient)
                except FundsLocked:
                    if attempt == rounds - 1:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            turns.give_back(self._store, rnd)

    def release(
        self,
        selection: Selection | str,
        fence: int | None = None,
        token_ids: Sequence[int] | None = None,
    ) -> int:
        """Unlock a selection (or `tx_id` and `fence`), only `token_ids` if given; count rows.

        Released tokens of a Selection go back to the cache. After a spend call forget().
        """
        if isinstance(selection, Selection):
            if fence is not None and fence != selection.fence:
                raise InvalidRequest(
                    f"fence {fence} does not match the selection's {selection.fence}"
                )
            tx_id, fence, wallet = selection.tx_id, selection.fence, selection.key.wallet
        else:
            tx_id, wallet = selection, None
            if fence is None:
                raise InvalidRequest("fence is required when releasing by tx_id")
        ids = None if token_ids is None else list(token_ids)
        released = self._store.unlock(tx_id, fence, ids, wallet)
        if ids is None:
            self._cache.unhold_owner((tx_id, fence))
        else:
            self._cache.unhold(ids)
        if isinstance(selection, Selection):
            wanted = None if ids is None else set(ids)
            freed = [c for c in selection.tokens if wanted is None or c.token_id in wanted]
            self._cache.add(selection.key, freed)
        return released

    def released(self, key: WalletKey, tokens: Iterable[Candidate]) -> None:
        """Take back tokens whose locks were removed elsewhere (e.g. by one statement)."""
        tokens = list(tokens)
        self._cache.unhold(c.token_id for c in tokens)
        self._cache.add(key, tokens)

    def issued(self, tokens: Iterable[tuple[WalletKey, Candidate]]) -> None:
        """Queue tokens this replica has just created, such as a spend's change, by key.

        Spent tokens leave a busy wallet's queue for good, so without its own outputs the
        queue runs dry and costs a refetch every few hundred selections. Only a fresh queue
        that exists takes them, and only up to a batch: a replica that does not serve the
        wallet now keeps no queue for it. The lock statement checks them like any candidate.
        """
        by_key: dict[WalletKey, list[Candidate]] = {}
        for key, candidate in tokens:
            by_key.setdefault(key, []).append(candidate)
        config = self._config
        limit = max(config.fetch_limit, config.calm_fetch_limit)
        for key, candidates in by_key.items():
            self._cache.add(key, candidates, create=False, limit=limit)

    def forget(self, token_ids: Iterable[int], key: WalletKey | None = None) -> None:
        """Drop spent tokens from the local holds and from the cache."""
        ids = list(token_ids)
        self._cache.unhold(ids)
        self._cache.discard(key, ids)
        for cache in list(self._ordered.values()):
            cache.discard(key, ids)

    def _cache_for(self, order: str) -> TokenCache:
        """Return the candidate cache that keeps candidates in `order`."""
        if order == ORDER_RANDOM:
            return self._cache
        cache = self._ordered.get(order)
        if cache is None:
            with self._lock:
                cache = self._ordered.setdefault(
                    order, TokenCache(self._cache.ttl, self._cache.max_wallets, self._clock)
                )
        return cache

    def _run_round(self, rnd: Round, patient: bool) -> Selection:
        """Run one round; on any failure release exactly its locks and re-raise."""
        try:
            self._gather(rnd, patient)
        except BaseException as exc:
            # BaseException too: an interrupt must not leave locks until their lease ends.
            rnd.abort(exc, self._store, self._cache)
            raise
        assert rnd.fence is not None
        now = self._clock()
        # Refresh the local check: a cached list filled before our locks lives at most ttl.
        self._cache.hold(rnd.ids, now + self._config.cache_ttl, owner=(rnd.tx_id, rnd.fence))
        return Selection(
            tx_id=rnd.tx_id,
            key=rnd.key,
            quantity=rnd.quantity,
            fence=rnd.fence,
            tokens=tuple(rnd.locked),
            total=rnd.total,
            expires_at=min(rnd.expiries) if rnd.expiries else None,  # type: ignore[type-var]
            stats=rnd.stats,
            record=rnd.record,
            strategy=rnd.strategy.name,
        )

    def _gather(self, rnd: Round, patient: bool) -> None:
        """Lock tokens from the cache, refetching when it runs dry, until the quantity is met."""
        store, config, stats = self._store, self._config, rnd.stats
        if rnd.strategy.chooses:
            turns.enter(store, rnd, config)
            choosing.gather(self, rnd, patient)
            return
        cache = self._cache_for(rnd.strategy.order)
        # Fetches in a row that locked nothing before the round gives up. An impatient round
        # refetches at once, and a patient one after a lost race (below): picks all taken by
        # concurrent statements say nothing about what is free now; only a shortfall tells that
        # others hold what is needed.
        allowed_stalls = config.max_retries
        fetches = total_before_fetch = 0
        stalled = 0.0  # refetches with nothing locked since the previous fetch (turns: weighed)
        shortfall: Supply | None = None  # as of the latest fetch
        # Once a random batch comes back short (FetchResult.short_batch) the round fetches the
        # wallet's largest free tokens; its cache holds no better ones.
        largest_first = just_switched = False
        # The latest fetch lost every token it tried to selections that took them after its
        # snapshot: what it read covered the need, so the next fetch follows at once. It still
        # counts as a stall, so a round of lost races ends as one of stalls does.
        lost_race = False
        while rnd.total < rnd.quantity:
            rnd.bound()
            need = rnd.quantity - rnd.total
            batch = [] if largest_first else cache.take(rnd.key, need, exclude=rnd.ids)
            if cache is not self._cache:  # this replica's holds live in the random cache
                batch = [c for c in batch if not self._cache.is_held(c.token_id)]
            if batch:
                turns.enter(store, rnd, config)
                self._demand.selected(rnd.key)
                # Not granted means someone else holds, spent or is touching the token. It
                # left the queue and comes back only if a later fetch sees it free.
                missed = self._try_lock(rnd, batch)
                stats.cache_hits += len(batch) - len(missed)
                # A refusal drops the rest of the queue: a fetch reads what is free now. A
                # wallet whose queues keep being refused is left to fetches for a while.
                cache.tried(rnd.key, len(batch), len(missed))
                continue

            # A short batch's refetch follows at once: that fetch found no contention.
            if fetches and not just_switched:
                progress = rnd.total != total_before_fetch
                stalled = 0 if progress else stalled + rnd.turn.stall(config)
                if stalled > allowed_stalls:
                    if shortfall is None:
                        shortfall = store.supply(rnd.key, rnd.tx_id)
                    rnd.raise_short(shortfall, self._config.retry_after)
                if stalled and patient and not lost_race:
                    now = self._clock()
                    self._sleep(turns.wait_for_funds(store, rnd, config, now, self._rng))
            total_before_fetch = rnd.total
            rnd.pending = None
            # A fetch for a contested or a cold wallet does not ask for the rows it does not lock.
            crowded = cache.contested(rnd.key) or rnd.turn.newcomer
            sized = crowded and not largest_first and rnd.strategy.order == ORDER_RANDOM
            limit, warm = self._demand.fetch_limit(rnd.key, cache, need if sized else 0)
            claim = rnd.claim(crowded, largest_first, warm and not crowded)
            result = store.fetch_and_lock(claim, limit)
            rnd.pending = []
            stats.fetches += 1
            if result.turn_taken:  # it locked nothing: wait for the turn to end, then fetch
                rnd.adopt(result.fence, None)
                turns.enter(store, rnd, config)
                continue
            rnd.turn.newcomer = False
            if claim.order == ORDER_RANDOM:
                self._demand.measured(rnd.key, result.batch_rows, result.batch_total)
            fetches += 1
            lost_race = bool(result.conflicts) and not result.granted and result.shortfall is None
            # The prefix a fetch tried to lock counts as attempts, like a try_lock batch.
            stats.lock_attempts += len(result.granted) + result.conflicts
            stats.lock_conflicts += result.conflicts
            cache.lost(rnd.key, result.conflicts)
            rnd.adopt(result.fence, result.record)
            self._accept(rnd, result.granted, result.expires_at, None)
            rnd.bound(result.too_many)
            if result.short_batch:
                # A few large tokens rather than a batch of small ones and then another; the
                # small ones stay out of the cache, which would offer them first.
                largest_first = just_switched = True
                continue
            just_switched = False
            if rnd.total >= rnd.quantity:
                self._cache_spare(rnd, result.spare)
                break
            shortfall = result.shortfall
            if shortfall is not None:
                # The free tokens cannot make up what is missing, so nothing was locked (and
                # what was seen is not worth locking now).
                rnd.bound(not shortfall.complete and shortfall.unspent < rnd.quantity)
                if shortfall.unspent < rnd.quantity:
                    raise InsufficientFunds(rnd.key, rnd.quantity, shortfall.available, stats=stats)
                if not patient:
                    rnd.raise_short(shortfall, self._config.retry_after)
                continue  # others hold enough: wait for them to spend or release
            self._cache_spare(rnd, result.spare)

    def _try_lock(self, rnd: Round, batch: Sequence[Candidate]) -> set[int]:
        """Lock `batch` for the round in one call; return the ids that were not granted."""
        submitted = {c.token_id for c in batch}
        rnd.pending = sorted(submitted)
        outcome = self._store.try_lock(rnd.claim(), batch)
        rnd.pending = []
        rnd.adopt(outcome.fence, outcome.record)
        hits = self._accept(rnd, outcome.granted, outcome.expires_at, submitted)
        rnd.stats.lock_attempts += len(batch)
        rnd.stats.lock_conflicts += len(batch) - hits
        return submitted - {c.token_id for c in outcome.granted}

    def _cache_spare(self, rnd: Round, spare: Iterable[Candidate]) -> None:
        """Queue what a fetch saw but did not lock, for this and later selections."""
        spare = [c for c in spare if c.token_id not in rnd.ids]
        # Stores already permute rows; shuffling again keeps replicas apart even if one
        # does not. An ordered queue is replaced, not extended: appending would break its order.
        spare = arrange(spare, order := rnd.strategy.order, self._rng)
        if order != ORDER_RANDOM:
            self._cache_for(order).invalidate(rnd.key)
        self._cache_for(order).put(rnd.key, spare)

    def _accept(
        self,
        rnd: Round,
        granted: Iterable[Candidate],
        expires_at: object | None,
        submitted: set[int] | None,
    ) -> int:
        """Add newly locked tokens to the round; return how many of `submitted` were granted."""
        new: list[int] = []
        hits = 0
        for candidate in granted:
            token_id = candidate.token_id
            if token_id in rnd.ids:
                continue  # a store reporting a token twice must not make us count it twice
            if submitted is not None and token_id in submitted:
                hits += 1
            rnd.ids.add(token_id)
            rnd.locked.append(candidate)
            rnd.total += candidate.quantity
            new.append(token_id)
        if new:
            if expires_at is not None:
                rnd.expiries.append(expires_at)
            # Hold at once so concurrent selections of this replica skip these tokens.
            until = self._clock() + self._config.cache_ttl
            self._cache.hold(new, until, owner=(rnd.tx_id, rnd.fence))
            # Its turn got it something: the next in line need not wait for the rest.
            turns.give_back(self._store, rnd)
        return hits
