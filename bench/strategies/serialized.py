"""Serialized: the classic approach, one transaction per selection that queues on row locks.

``SELECT ... ORDER BY id FOR UPDATE`` without SKIP LOCKED: every replica selecting from a wallet
waits for the one before it to commit, so selections of one wallet run one at a time.
"""

from __future__ import annotations

from django.db import OperationalError, transaction
from psycopg import errors

from bench.strategies.base import Picked
from bench.strategies.baseline import Baseline, Short
from sherdlock import Candidate, WalletKey

# Row-lock the first free tokens of the wallet in id order, waiting for whoever holds them.
# LIMIT NULL locks every free token (the retry when the first batch did not cover the request).
# A token with any lock row is not free: ON CONFLICT DO NOTHING never takes a lock over, so an
# expired one stays in the way until housekeeping removes it.
SERIAL_LOCK = """
SELECT t.id FROM tokens_token t
WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
ORDER BY t.id
LIMIT %(limit)s
FOR UPDATE OF t
"""

# Re-read the row-locked tokens in a new statement. After waiting, the statement above returns
# rows as its snapshot saw them: lock rows the previous holder committed while we waited are
# invisible to its anti-join (the token rows themselves did not change, so PostgreSQL does not
# recheck them). In READ COMMITTED each statement takes a new snapshot, which sees them.
SERIAL_RECHECK = """
SELECT t.id, t.quantity FROM tokens_token t
WHERE t.id = ANY(%(ids)s) AND t.spent_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
ORDER BY t.id
"""

# Draw the fence and insert the locks in one statement.
SERIAL_INSERT = """
WITH fence AS (SELECT nextval('locks_fence_seq') AS value)
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
SELECT t.id, %(tx_id)s, fence.value, now(), now() + %(lease)s * interval '1 second',
       t.wallet, t.currency, t.quantity
FROM tokens_token t CROSS JOIN fence
WHERE t.id = ANY(%(ids)s::bigint[])
ORDER BY t.id
ON CONFLICT (wallet, token_id) DO NOTHING
RETURNING token_id, fence
"""


class _Partial(Exception):
    """The row-locked batch did not cover the request."""


class Serialized(Baseline):
    """One replica selecting with queued row locks, backing off like the others when short.

    Each transaction row-locks with exactly one statement, in id order. Two such statements
    cannot deadlock (each waits only for higher ids than it holds); a transaction that locked
    a batch and then a second, lower-reaching one could. So a short first batch is rolled back
    and the request retried in a new transaction that locks every free token.
    """

    name = "serialized"

    def __init__(self, rng=None) -> None:
        super().__init__(rng)
        self.deadlocks = 0

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        try:
            try:
                return self._once(tx_id, key, quantity, self.knobs.fetch_limit)
            except _Partial:
                return self._once(tx_id, key, quantity, None)
        except OperationalError as exc:
            # Spends row-lock tokens too, in their own order: a deadlock is contention.
            if not isinstance(exc.__cause__, errors.DeadlockDetected):
                raise
            self.deadlocks += 1
            raise Short() from exc

    def _once(self, tx_id: str, key: WalletKey, quantity: int, limit: int | None) -> Picked:
        params = {
            "wallet": key.wallet,
            "currency": key.currency,
            "tx_id": tx_id,
            "lease": self.knobs.lease,
        }
        with transaction.atomic():
            ids = [row[0] for row in self.execute(SERIAL_LOCK, {**params, "limit": limit})]
            chosen: list[Candidate] = []
            total = 0
            for token_id, token_quantity in self.execute(SERIAL_RECHECK, {"ids": ids}):
                if total >= quantity:
                    break
                chosen.append(Candidate(int(token_id), int(token_quantity)))
                total += int(token_quantity)
            if total < quantity:
                raise _Partial() if limit is not None else Short()
            self.lock_attempts += len(chosen)
            rows = self.execute(SERIAL_INSERT, {**params, "ids": [c.token_id for c in chosen]})
            if len(rows) != len(chosen):
                # Cannot happen while every locker row-locks tokens first; never half-lock.
                raise RuntimeError(f"{tx_id}: a row-locked token was locked by someone else")
        return Picked(tx_id, key, int(rows[0][1]), tuple(chosen))
