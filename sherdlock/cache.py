"""Per-replica cache of candidate tokens and of the tokens this replica holds locked."""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass, field

from .interfaces import Clock
from .types import Candidate, WalletKey


@dataclass(slots=True)
class _Queue:
    """Candidates of one wallet/currency in take order, stamped when last filled."""

    stamp: float
    # Removal is lazy: `order` may hold entries no longer in `members`, which take() skips.
    order: deque[Candidate] = field(default_factory=deque)
    members: dict[int, Candidate] = field(default_factory=dict)


@dataclass(slots=True)
class _Contest:
    """What this replica saw lately of the competition for one wallet/currency's queued tokens."""

    missed: float  # moving average of refusals, per token tried
    until: float = 0.0  # the wallet is served by fetches alone until then
    streak: int = 0  # queued tokens locked in a row since the latest refusal or lost fetch row


# The weight of each token tried in a wallet's moving average of refusals, and the average at
# which its queue is given up for a while: two tokens in a row refused, or a batch of several
# mostly refused. A wallet whose queue loses one token in ten never gets there. A contested wallet
# gets no queue for CONTEST_SECONDS, or the ttl if shorter (a listener's 30 s ttl would keep a
# wallet that has calmed down on fetches for too long).
CONTEST_WEIGHT = 0.3
CONTESTED = 0.5
CONTEST_SECONDS = 1.0
# Queued tokens locked in a row, with no refusal and no lost fetch between them, after which a
# wallet is calm: this replica has it to itself (``calm``).
CALM_AFTER = 128


@dataclass(frozen=True, slots=True)
class _Hold:
    """A lock this replica holds on a token, remembered until a deadline."""

    until: float
    owner: Hashable


class TokenCache:
    """Keep per-wallet queues of candidate tokens and the ids this replica holds; thread-safe.

    The cache is a hint, never the truth: a cached token may be locked or spent by another
    replica meanwhile, which only costs a failed lock attempt. Queues expire `ttl` seconds
    after they were last filled and at most `max_wallets` queues are kept (LRU).

    A wallet whose queued tokens keep turning out taken (``tried``) is contested: other replicas
    take its free tokens faster than a queue ages, so every queued token is a likely wasted
    attempt. For a while (CONTEST_SECONDS, or `ttl` if shorter) it gets no queue (``take``
    finds nothing, ``put`` and ``add`` keep nothing) and its selections lock from fetches, which
    see what is free now. Then one queue is tried again.
    """

    def __init__(
        self, ttl: float = 1.0, max_wallets: int = 10_000, clock: Clock = time.monotonic
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl!r}")
        if max_wallets < 1:
            raise ValueError(f"max_wallets must be positive, got {max_wallets!r}")
        self.ttl = ttl
        self.max_wallets = max_wallets
        self._clock = clock
        self._lock = threading.Lock()
        self._queues: OrderedDict[WalletKey, _Queue] = OrderedDict()
        # Which queue a cached token sits in, so forgetting a spent token needs no key.
        self._where: dict[int, WalletKey] = {}
        self._held: dict[int, _Hold] = {}
        self._prune_held_at = 1024
        self._contests: OrderedDict[WalletKey, _Contest] = OrderedDict()

    def put(self, key: WalletKey, candidates: Iterable[Candidate]) -> None:
        """Fill the queue of `key` with freshly fetched candidates and restamp it.

        A stale queue is replaced; a fresh one is extended, skipping ids already queued.
        """
        candidates = list(candidates)
        with self._lock:
            now = self._clock()
            queue = self._fresh(key, now)
            if not candidates or self._contested(key, now):
                return  # nothing learned; creating a queue could evict a useful one
            if queue is None:
                queue = self._create(key, now)
            queue.stamp = now
            self._append(key, queue, candidates)

    def add(
        self,
        key: WalletKey,
        candidates: Iterable[Candidate],
        create: bool = True,
        rng: random.Random | None = None,
        limit: int | None = None,
    ) -> None:
        """Append newly issued tokens to the queue of `key` without restamping it.

        With `create` False tokens are added only to a fresh queue that already exists: news
        about every wallet in the system must not crowd out the queues this replica uses.
        With `rng` each token goes to a random place in the queue instead of its end: replicas
        that all hear of the same tokens would otherwise all try them in the same order.
        With `limit` tokens are added only while the queue holds fewer than that many.
        """
        candidates = list(candidates)
        with self._lock:
            now = self._clock()
            queue = self._fresh(key, now)
            if not candidates or (queue is None and not create) or self._contested(key, now):
                return
            if queue is None:
                queue = self._create(key, now)
            self._append(key, queue, candidates, rng, limit)

    def take(
        self, key: WalletKey, need: int, exclude: Collection[int] = frozenset()
    ) -> list[Candidate]:
        """Pop candidates of `key` until their quantities reach `need`; may return fewer.

        Ids in `exclude` or held by this replica are dropped from the queue, not returned:
        they are locked by us and come back through a fetch once released.
        """
        with self._lock:
            now = self._clock()
            queue = self._fresh(key, now)
            # A contested wallet has no queue: ``tried`` removed it and ``put``/``add`` keep none.
            if queue is None or need <= 0:
                return []
            taken: list[Candidate] = []
            reached = 0
            while queue.order and reached < need:
                candidate = queue.order.popleft()
                token_id = candidate.token_id
                if queue.members.get(token_id) is not candidate:
                    continue  # discarded, or superseded by a later entry
                del queue.members[token_id]
                self._where.pop(token_id, None)
                if token_id in exclude or self._is_held(token_id, now):
                    continue
                taken.append(candidate)
                reached += candidate.quantity
            self._drop_if_empty(key, queue)
            return taken

    def tried(self, key: WalletKey, offered: int, refused: int) -> None:
        """Record that `refused` of `offered` queued tokens of `key` were found taken.

        A refusal drops the rest of the queue (it is as likely taken); a wallet whose recent
        try-locks were mostly refused is contested for a while (see the class).
        """
        if offered <= 0:
            return
        with self._lock:
            now = self._clock()
            contest = self._contests.get(key)
            if contest is None:
                contest = self._contests[key] = _Contest(0.0)
                while len(self._contests) > self.max_wallets:
                    self._contests.popitem(last=False)
            self._contests.move_to_end(key)
            # Each token tried is one observation: a batch of many mostly refused tokens is as
            # clear a sign as several batches of one.
            keep = (1 - CONTEST_WEIGHT) ** offered
            contest.missed = contest.missed * keep + (1 - keep) * refused / offered
            contest.streak = 0 if refused else contest.streak + offered
            if refused:
                if key in self._queues:
                    self._remove(key)
                if contest.missed >= CONTESTED:
                    contest.until = now + min(self.ttl, CONTEST_SECONDS)

    def lost(self, key: WalletKey, conflicts: int) -> None:
        """Record that a fetch of `key` lost `conflicts` rows it tried to lock: if any, not calm."""
        if conflicts <= 0:
            return
        with self._lock:
            if (contest := self._contests.get(key)) is not None:
                contest.streak = 0

    def calm(self, key: WalletKey) -> bool:
        """Tell whether the latest CALM_AFTER queued tokens of `key` were all locked.

        No other replica took one first, nor a row one of this replica's fetches tried: a
        replica alone on a wallet, where a queue does not go stale and a longer one saves
        fetches.
        """
        with self._lock:
            contest = self._contests.get(key)
            return contest is not None and contest.streak >= CALM_AFTER

    def contested(self, key: WalletKey) -> bool:
        """Tell whether `key` is served by fetches alone for now (see the class)."""
        with self._lock:
            return self._contested(key, self._clock())

    def peek(self, key: WalletKey) -> list[Candidate]:
        """Return the usable queued candidates of `key` in take order, without popping."""
        with self._lock:
            queue = self._fresh(key, self._clock())
            if queue is None:
                return []
            seen: set[int] = set()
            out = []
            for candidate in queue.order:
                token_id = candidate.token_id
                if queue.members.get(token_id) is candidate and token_id not in seen:
                    seen.add(token_id)
                    out.append(candidate)
            return out

    def discard(self, key: WalletKey | None, token_ids: Iterable[int]) -> int:
        """Remove tokens known to be locked or spent from the queue of `key` (None: any)."""
        removed = 0
        with self._lock:
            for token_id in token_ids:
                where = self._where.get(token_id)
                if where is None or (key is not None and where != key):
                    continue
                queue = self._queues[where]
                del queue.members[token_id]
                del self._where[token_id]
                removed += 1
                self._compact(queue)
                self._drop_if_empty(where, queue)
        return removed

    def invalidate(self, key: WalletKey | None = None) -> None:
        """Drop the queue of `key`, or every queue when `key` is None."""
        with self._lock:
            if key is None:
                self._queues.clear()
                self._where.clear()
            elif key in self._queues:
                self._remove(key)

    def __len__(self) -> int:
        """Return the number of wallet/currency queues kept, fresh or not."""
        with self._lock:
            return len(self._queues)

    def hold(self, token_ids: Iterable[int], until: float, owner: Hashable = None) -> None:
        """Remember that this replica holds locks on `token_ids` until monotonic time `until`."""
        with self._lock:
            entry = _Hold(until, owner)
            for token_id in token_ids:
                self._held[token_id] = entry
            if len(self._held) >= self._prune_held_at:
                # Expired holds are otherwise only removed when looked up.
                now = self._clock()
                self._held = {t: h for t, h in self._held.items() if h.until > now}
                self._prune_held_at = max(1024, 2 * len(self._held))

    def unhold(self, token_ids: Iterable[int]) -> None:
        """Forget holds on `token_ids`."""
        with self._lock:
            for token_id in token_ids:
                self._held.pop(token_id, None)

    def unhold_owner(self, owner: Hashable) -> int:
        """Forget every hold recorded for `owner`; return how many."""
        with self._lock:
            ids = [t for t, h in self._held.items() if h.owner == owner]
            for token_id in ids:
                del self._held[token_id]
            return len(ids)

    def is_held(self, token_id: int) -> bool:
        """Tell whether this replica still holds a lock on `token_id`."""
        with self._lock:
            return self._is_held(token_id, self._clock())

    def _contested(self, key: WalletKey, now: float) -> bool:
        contest = self._contests.get(key)
        return contest is not None and now < contest.until

    def _is_held(self, token_id: int, now: float) -> bool:
        """Tell whether `token_id` is held at `now`, dropping an expired hold."""
        entry = self._held.get(token_id)
        if entry is None:
            return False
        if entry.until <= now:
            del self._held[token_id]
            return False
        return True

    def _fresh(self, key: WalletKey, now: float) -> _Queue | None:
        """Return the usable queue of `key`, dropping it if stale; mark it recently used."""
        queue = self._queues.get(key)
        if queue is None:
            return None
        if now - queue.stamp >= self.ttl:
            self._remove(key)
            return None
        self._queues.move_to_end(key)
        return queue

    def _create(self, key: WalletKey, now: float) -> _Queue:
        """Create an empty queue for `key`, evicting least recently used queues over the bound."""
        if key in self._queues:
            self._remove(key)  # stale leftover
        queue = _Queue(stamp=now)
        self._queues[key] = queue
        while len(self._queues) > self.max_wallets:
            oldest = next(iter(self._queues))
            self._remove(oldest)
        return queue

    def _append(
        self,
        key: WalletKey,
        queue: _Queue,
        candidates: Iterable[Candidate],
        rng: random.Random | None = None,
        limit: int | None = None,
    ) -> None:
        """Append candidates not yet queued (with `rng`, insert each at a random place)."""
        for candidate in candidates:
            token_id = candidate.token_id
            if token_id in queue.members:
                continue
            if limit is not None and len(queue.members) >= limit:
                break
            other = self._where.get(token_id)
            if other is not None and other != key:
                # A token belongs to one wallet/currency; trust the newest information.
                self._queues[other].members.pop(token_id, None)
            queue.members[token_id] = candidate
            if rng is None:
                queue.order.append(candidate)
            else:
                queue.order.insert(rng.randint(0, len(queue.order)), candidate)
            self._where[token_id] = key

    def _compact(self, queue: _Queue) -> None:
        """Rebuild the order of a queue once lazily removed entries dominate it."""
        if len(queue.order) <= 2 * len(queue.members) + 64:
            return
        seen: set[int] = set()
        order: deque[Candidate] = deque()
        for candidate in queue.order:
            token_id = candidate.token_id
            if queue.members.get(token_id) is candidate and token_id not in seen:
                seen.add(token_id)
                order.append(candidate)
        queue.order = order

    def _drop_if_empty(self, key: WalletKey, queue: _Queue) -> None:
        """Remove a queue that has nothing left to offer."""
        if not queue.members and self._queues.get(key) is queue:
            del self._queues[key]

    def _remove(self, key: WalletKey) -> None:
        """Remove the queue of `key` and its index entries."""
        queue = self._queues.pop(key)
        for token_id in queue.members:
            if self._where.get(token_id) == key:
                del self._where[token_id]
