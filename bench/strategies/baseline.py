"""What the baselines share: settings, fences, release, the supply check and the backoff loop.

The baselines keep their own SQL against the tables (``tokens_token``, ``locks_tokenlock``,
sequence ``locks_fence_seq``) and read the service's knobs (``common.knobs``), so that
what ours is compared with stays fixed while ours changes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from psycopg import pq

from bench.strategies.base import Picked, Spent
from common import db
from common.knobs import knobs
from sherdlock import FundsLocked, InsufficientFunds, WalletKey
from sherdlock import config as tuning

NEXT_FENCE = "SELECT nextval('locks_fence_seq')"

# Remove one selection's lock rows, row-locking them in token-id order first: inserts that meet
# an existing row wait on it, and a plain DELETE would take the rows in physical order.
UNLOCK = """
DELETE FROM locks_tokenlock
WHERE token_id IN (
    SELECT token_id FROM locks_tokenlock
    WHERE spender_tx_id = %(tx_id)s AND fence = %(fence)s
    ORDER BY token_id
    FOR UPDATE
)
"""

# Authoritative totals of one wallet/currency, read only when a round comes up short: all unspent
# value, and the part that carries a lock row of another transaction.
SUPPLY = """
SELECT coalesce(sum(t.quantity), 0),
       coalesce(sum(t.quantity) FILTER (
           WHERE l.token_id IS NOT NULL AND l.spender_tx_id <> %(tx_id)s), 0)
FROM tokens_token t
LEFT JOIN locks_tokenlock l ON l.token_id = t.id
WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
"""


@dataclass(frozen=True)
class Knobs:
    """The shipped selector settings the baselines use as well."""

    lease: float
    fetch_limit: int
    max_retries: int
    cache_ttl: float
    backoff_attempts: int
    backoff_min: float
    backoff_max: float

    @classmethod
    def from_settings(cls) -> Knobs:
        """Read the lease the service reads (``common.knobs``) and the selector's tuning."""
        return cls(
            lease=knobs().lease_seconds,
            fetch_limit=tuning.FETCH_LIMIT,
            max_retries=tuning.MAX_RETRIES,
            cache_ttl=tuning.CACHE_TTL,
            backoff_attempts=tuning.BACKOFF_ATTEMPTS,
            backoff_min=tuning.BACKOFF_MIN,
            backoff_max=tuning.BACKOFF_MAX,
        )

    @property
    def retry_after(self) -> float:
        """Return the seconds a caller is told to wait after funds-locked: two backoff sleeps."""
        return 2 * self.backoff_max


class Short(Exception):
    """A round ended without covering the request; it holds nothing any more."""


class Baseline:
    """A replica of one baseline: rounds separated by the shipped backoff, release on failure.

    Subclasses implement ``_round``, which either returns a covering selection or raises
    ``Short`` after releasing whatever it locked.
    """

    name = "baseline"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.knobs = Knobs.from_settings()
        self.rng = rng or random.Random()
        self.lock_attempts = 0

    def execute(self, statement: str, params: dict[str, object]) -> list[tuple]:
        """Run one statement, prepared, on this thread's connection; return its rows.

        Prepared as ours and the reference run theirs (``common.db``): through Django's cursor
        it would be planned at every call, a cost that would count against the baseline, not
        its design. Whether it answered rows is read from the result's status: the cursor's
        description is built anew at every call.
        """
        cursor = db.execute(statement, params)
        result = cursor.pgresult
        if result is None or result.status != pq.ExecStatus.TUPLES_OK:
            return []
        return cursor.fetchall()

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        """Run rounds until one covers ``quantity``; decide insufficient or locked when short.

        Insufficient funds is answered only when the wallet's unspent supply is below the
        request; otherwise others hold what is needed, and after the last backoff round the
        answer is funds locked.
        """
        knobs = self.knobs
        for attempt in range(knobs.backoff_attempts + 1):
            if attempt:
                time.sleep(self.rng.uniform(knobs.backoff_min, knobs.backoff_max))
            try:
                return self._round(tx_id, key, quantity)
            except Short:
                unspent, locked = self.supply(tx_id, key)
                available = max(0, unspent - locked)
                if unspent < quantity:
                    raise InsufficientFunds(key, quantity, available) from None
                if attempt == knobs.backoff_attempts:
                    raise FundsLocked(key, quantity, available, knobs.retry_after) from None
        raise AssertionError("unreachable")

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        raise NotImplementedError

    def supply(self, tx_id: str, key: WalletKey) -> tuple[int, int]:
        """Return (unspent, held by others) of ``key``."""
        rows = self.execute(
            SUPPLY, {"tx_id": tx_id, "wallet": key.wallet, "currency": key.currency}
        )
        return int(rows[0][0]), int(rows[0][1])

    def unlock(self, tx_id: str, fence: int | None) -> None:
        """Delete the lock rows of (``tx_id``, ``fence``)."""
        if fence is not None:
            self.execute(UNLOCK, {"tx_id": tx_id, "fence": fence})

    def release(self, picked: Picked) -> None:
        """Unlock what ``picked`` holds."""
        self.unlock(picked.tx_id, picked.fence)

    def spent(self, picked: Picked, created: Spent | None = None) -> None:
        """Do nothing: this baseline keeps no record of spent tokens."""
