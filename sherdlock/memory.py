"""In-memory token store: the reference TokenStore for tests and documentation."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from .errors import ClaimRefused
from .interfaces import Clock
from .strategies import MAX_EXAMINED, ORDER_RANDOM, arrange, prefix
from .turns import Turns
from .types import Candidate, Claim, FetchResult, LockOutcome, Supply, WalletKey


@dataclass(slots=True)
class _Token:
    """A token row."""

    key: WalletKey
    quantity: int
    spent_by: str | None = None


@dataclass(frozen=True, slots=True)
class _LockRow:
    """A row of the lock table."""

    tx_id: str
    fence: int
    created_at: float
    expires_at: float


@dataclass(slots=True)
class _Fault:
    """An exception to raise from a later call of one store method."""

    exc: BaseException
    skip: int
    after_commit: bool


class InMemoryStore:
    """Keep tokens and the lock table in memory behind one mutex; thread-safe.

    Mirrors the semantics a database store must honour: locks are live until `lease`
    seconds after they were taken, expired locks may be taken over, spent tokens keep
    their lock rows (as a database store does until housekeeping), unlock only ever
    touches rows of the given transaction and fence, and a fetch locks nothing when the
    free tokens cannot make up the need.
    """

    def __init__(
        self, clock: Clock = time.monotonic, lease: float = 60.0, rng: random.Random | None = None
    ) -> None:
        if lease <= 0:
            raise ValueError(f"lease must be positive, got {lease!r}")
        self._clock = clock
        self.lease = lease
        self._rng = rng if rng is not None else random.Random()
        self._mutex = threading.RLock()
        self._tokens: dict[int, _Token] = {}
        self._unspent: defaultdict[WalletKey, set[int]] = defaultdict(set)
        self._locks: dict[int, _LockRow] = {}
        self._fences = itertools.count(1)
        self._faults: defaultdict[str, list[_Fault]] = defaultdict(list)
        self.calls: Counter[str] = Counter()
        # Selections recorded for recording claims, by (namespace, tx id).
        self.records: dict[tuple[str, str], dict[str, object]] = {}
        self.turns = Turns(self._mutex, self.calls)  # each key's turn (sherdlock.turns)

    # -- test helpers -------------------------------------------------------------

    def add_token(self, token_id: int, wallet: str, currency: str, quantity: int) -> Candidate:
        """Issue a new unspent token."""
        candidate = Candidate(token_id, quantity)  # validates types
        key = WalletKey(wallet, currency)
        with self._mutex:
            if token_id in self._tokens:
                raise ValueError(f"token {token_id} already exists")
            self._tokens[token_id] = _Token(key, quantity)
            self._unspent[key].add(token_id)
        return candidate

    def spend(self, token_ids: Iterable[int], tx_id: str) -> None:
        """Mark tokens spent by `tx_id`, all or none; keep their lock rows.

        Raise ValueError for an unknown or already spent token, or one live-locked by
        another transaction: those would be double spends.
        """
        ids = list(token_ids)
        with self._mutex:
            now = self._clock()
            for token_id in ids:
                token = self._tokens.get(token_id)
                if token is None:
                    raise ValueError(f"token {token_id} does not exist")
                if token.spent_by is not None:
                    raise ValueError(f"token {token_id} already spent by {token.spent_by!r}")
                row = self._live_lock(token_id, now)
                if row is not None and row.tx_id != tx_id:
                    raise ValueError(f"token {token_id} is locked by {row.tx_id!r}")
            if len(set(ids)) != len(ids):
                raise ValueError("a token cannot be spent twice in one transaction")
            for token_id in ids:
                token = self._tokens[token_id]
                token.spent_by = tx_id
                self._unspent[token.key].discard(token_id)

    def locks(self) -> dict[int, tuple[str, int, float]]:
        """Return every lock row, live or expired: token_id -> (tx_id, fence, expires_at)."""
        with self._mutex:
            return {t: (r.tx_id, r.fence, r.expires_at) for t, r in self._locks.items()}

    def live_locks(self) -> dict[int, tuple[str, int, float]]:
        """Return the lock rows that have not expired."""
        with self._mutex:
            now = self._clock()
            return {t: row for t, row in self.locks().items() if row[2] > now}

    def balance(self, key: WalletKey) -> int:
        """Return the sum of the unspent tokens of `key`."""
        with self._mutex:
            return sum(self._tokens[t].quantity for t in self._unspent.get(key, ()))

    def is_spent(self, token_id: int) -> bool:
        """Tell whether a token has been spent."""
        with self._mutex:
            return self._tokens[token_id].spent_by is not None

    def purge_expired(self) -> int:
        """Delete expired lock rows, as the housekeeping job does; count them."""
        with self._mutex:
            now = self._clock()
            expired = [t for t, r in self._locks.items() if r.expires_at <= now]
            for token_id in expired:
                del self._locks[token_id]
            return len(expired)

    def renew(self, tx_id: str, fence: int) -> int:
        """Extend the live locks of `tx_id` under `fence` by a full lease; count them."""
        with self._mutex:
            now = self._clock()
            renewed = 0
            for token_id, row in list(self._locks.items()):
                if row.tx_id == tx_id and row.fence == fence and row.expires_at > now:
                    self._locks[token_id] = _LockRow(tx_id, fence, row.created_at, now + self.lease)
                    renewed += 1
            return renewed

    def fail_next(
        self, method: str, exc: BaseException, *, skip: int = 0, after_commit: bool = False
    ) -> None:
        """Make a later call of `method` raise `exc`, after `skip` calls succeed.

        With `after_commit` the call takes effect before raising, like a connection lost
        while the commit's acknowledgement was on its way.
        """
        if not callable(getattr(self, method, None)):
            raise AttributeError(f"InMemoryStore has no method {method!r}")
        with self._mutex:
            self._faults[method].append(_Fault(exc, skip, after_commit))

    # -- TokenStore -----------------------------------------------------------------

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        """Read up to `limit` free tokens of the key at random and lock a prefix reaching need."""
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        with self._mutex:
            fault = self._enter("fetch_and_lock")
            fence = self._fence(claim)
            if claim.yield_to_turn and not self.turns.free(claim.key):
                self._raise_after(fault)
                return FetchResult(fence=fence, turn_taken=True)
            now = self._clock()
            key, need = claim.key, claim.need
            free = self._free(key, now)
            rows = arrange(
                (Candidate(t, self._tokens[t].quantity) for t in free), claim.order, self._rng
            )[:limit]
            kept = rows if claim.spare else []  # only a caller that keeps a queue gets them
            seen = sum(c.quantity for c in rows)
            answer = partial(FetchResult, fence=fence, batch_rows=len(rows), batch_total=seen)
            if seen < need and len(rows) == limit and claim.order == ORDER_RANDOM:
                # The batch is short, not (as far as it tells) the wallet: lock nothing.
                result = answer(spare=kept, short_batch=True)
                self._raise_after(fault)
                return result
            if seen >= need or len(rows) < limit:
                reach = seen
            else:
                # As the store: the largest free tokens, at most MAX_EXAMINED of them.
                largest = sorted((self._tokens[t].quantity for t in free), reverse=True)
                reach = sum(largest[:MAX_EXAMINED])
                if reach < need and len(largest) > MAX_EXAMINED:
                    result = answer(spare=kept, too_many=True)
                    self._raise_after(fault)
                    return result
            if reach < need:
                # Every free token together cannot make up the need: lock nothing.
                ids = self._largest_unspent(key)
                unspent = sum(self._tokens[t].quantity for t in ids)
                others = unspent - reach - claim.held_total
                complete = len(ids) <= MAX_EXAMINED
                result = answer(
                    spare=kept,
                    exhausted=len(rows) < limit,
                    shortfall=Supply(unspent, max(0, others), complete),
                )
                self._raise_after(fault)
                return result
            self._check_claim(claim)
            granted = prefix(rows, need)
            expires_at = self._lock_rows(granted, claim.tx_id, fence, now)
            result = answer(
                granted=granted,
                spare=kept[len(granted) :],
                exhausted=len(rows) < limit,
                expires_at=expires_at,
                record=self._record(claim, fence, granted),
            )
            self._raise_after(fault)
            return result

    def try_lock(self, claim: Claim, candidates: Sequence[Candidate]) -> LockOutcome:
        """Lock the candidates that are unspent and not live-locked."""
        with self._mutex:
            fault = self._enter("try_lock")
            fence = self._fence(claim)
            self._check_claim(claim)
            now = self._clock()
            granted: list[Candidate] = []
            seen: set[int] = set()
            for candidate in candidates:
                token_id = candidate.token_id
                token = self._tokens.get(token_id)
                if token_id in seen or token is None or token.spent_by is not None:
                    continue
                seen.add(token_id)
                if self._live_lock(token_id, now) is None:
                    granted.append(Candidate(token_id, token.quantity))
            outcome = LockOutcome(
                granted,
                self._lock_rows(granted, claim.tx_id, fence, now),
                fence=fence,
                record=self._record(claim, fence, granted),
            )
            self._raise_after(fault)
            return outcome

    def candidates(
        self, key: WalletKey, smallest: int, largest: int, cap: int | None = None
    ) -> list[Candidate]:
        """Read up to `smallest` smallest and `largest` largest (at most `cap`) free tokens."""
        with self._mutex:
            fault = self._enter("candidates")
            now = self._clock()
            free = [Candidate(t, self._tokens[t].quantity) for t in self._free(key, now)]
            low = arrange(free, "ascending", self._rng)[:smallest]
            capped = (c for c in free if cap is None or c.quantity <= cap)
            high = arrange(capped, "descending", self._rng)[:largest]
            seen = {c.token_id for c in low}
            window = low + [c for c in high if c.token_id not in seen]
            self._raise_after(fault)
            return window

    def unlock(
        self,
        tx_id: str,
        fence: int,
        token_ids: Sequence[int] | None = None,
        wallet: str | None = None,
    ) -> int:
        """Delete lock rows of `tx_id` under `fence`, only `token_ids` if given."""
        with self._mutex:
            fault = self._enter("unlock")
            ids = self._locks.keys() if token_ids is None else set(token_ids)
            mine = [
                t
                for t in ids
                if (row := self._locks.get(t)) is not None
                and row.tx_id == tx_id
                and row.fence == fence
            ]
            for token_id in mine:
                del self._locks[token_id]
            self._raise_after(fault)
            return len(mine)

    def supply(self, key: WalletKey, tx_id: str) -> Supply:
        """Return unspent totals of `key` and the part live-locked by other transactions."""
        with self._mutex:
            fault = self._enter("supply")
            now = self._clock()
            unspent = locked = 0
            ids = self._largest_unspent(key)
            for token_id in ids:
                quantity = self._tokens[token_id].quantity
                unspent += quantity
                row = self._live_lock(token_id, now)
                if row is not None and row.tx_id != tx_id:
                    locked += quantity
            self._raise_after(fault)
            complete = len(ids) <= MAX_EXAMINED
            return Supply(unspent=unspent, locked_by_others=locked, complete=complete)

    # -- internals ------------------------------------------------------------------

    def _largest_unspent(self, key: WalletKey) -> list[int]:
        """Return the key's largest MAX_EXAMINED + 1 unspent tokens: what the store counts."""
        ids = self._unspent.get(key, ())
        by_size = sorted(ids, key=lambda t: (self._tokens[t].quantity, t), reverse=True)
        return by_size[: MAX_EXAMINED + 1]

    def take_turn(self, key: WalletKey, wait: float) -> bool:
        """Take the turn of `key` for the calling thread's selection, in the order asked."""
        return self.turns.take(key, wait)

    def await_turn(self, key: WalletKey, wait: float) -> bool:
        """Wait up to `wait` for nobody to hold or ask for the turn of `key`."""
        return self.turns.wait(key, wait)

    def end_turn(self, key: WalletKey) -> None:
        """Give back the calling thread's turn of `key`."""
        self.turns.end(key)

    def _free(self, key: WalletKey, now: float) -> list[int]:
        """Return the ids of the unspent, not live-locked tokens of `key`, sorted."""
        return sorted(t for t in self._unspent.get(key, ()) if self._live_lock(t, now) is None)

    def _fence(self, claim: Claim) -> int:
        """Return the claim's fence, drawing the next one if it has none."""
        return claim.fence if claim.fence is not None else next(self._fences)

    def _check_claim(self, claim: Claim) -> None:
        """Refuse a recording claim whose transaction already has a recorded selection."""
        if claim.record and (claim.namespace, claim.tx_id) in self.records:
            raise ClaimRefused(f"transaction {claim.tx_id} already has a selection")

    def _record(self, claim: Claim, fence: int, granted: list[Candidate]) -> object | None:
        """Record the selection if this call completes a recording claim."""
        if not claim.record:
            return None
        tokens = (*claim.held, *granted)
        if sum(c.quantity for c in tokens) < claim.quantity:
            return None
        record = {
            "tx_id": claim.tx_id,
            "fence": fence,
            "token_ids": [c.token_id for c in tokens],
            "strategy": claim.strategy,
        }
        self.records[(claim.namespace, claim.tx_id)] = record
        return record

    def _live_lock(self, token_id: int, now: float) -> _LockRow | None:
        """Return the lock row of a token if it has not expired."""
        row = self._locks.get(token_id)
        return row if row is not None and row.expires_at > now else None

    def _lock_rows(
        self, granted: list[Candidate], tx_id: str, fence: int, now: float
    ) -> float | None:
        """Write lock rows for granted tokens, replacing expired ones; return the expiry."""
        if not granted:
            return None
        expires_at = now + self.lease
        for candidate in granted:
            self._locks[candidate.token_id] = _LockRow(tx_id, fence, now, expires_at)
        return expires_at

    def _enter(self, method: str) -> _Fault | None:
        """Count a call and return the fault due now; raise it if it strikes before the call."""
        self.calls[method] += 1
        pending = self._faults.get(method)
        if not pending:
            return None
        fault = pending[0]
        if fault.skip:
            fault.skip -= 1
            return None
        pending.pop(0)
        if not fault.after_commit:
            raise fault.exc
        return fault

    @staticmethod
    def _raise_after(fault: _Fault | None) -> None:
        """Raise a fault scheduled to strike once the call took effect."""
        if fault is not None:
            raise fault.exc
