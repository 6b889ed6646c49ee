"""Serialized: the classic approach, one transaction per selection that queues on row locks.

``SELECT ... ORDER BY id FOR UPDATE`` without SKIP LOCKED: every replica selecting from a wallet
waits for the one before it to commit, so selections of one wallet run one at a time.
"""

from __future__ import annotations

import random
import time

from django.conf import settings
from django.db import OperationalError, connection, transaction
from psycopg import errors

from bench.strategies.base import Picked
from locks.replica import selector_config
from sherdlock import Candidate, FundsLocked, InsufficientFunds, WalletKey

# This baseline keeps its own SQL, so the comparison stays fixed while ours changes.
NEXT_FENCE = "SELECT nextval('locks_fence_seq')"
UNLOCK_ALL = """
DELETE FROM locks_tokenlock WHERE token_id IN (
    SELECT token_id FROM locks_tokenlock
    WHERE spender_tx_id = %(tx_id)s AND fence = %(fence)s
    ORDER BY token_id FOR UPDATE)
"""
SUPPLY = """
SELECT coalesce(sum(t.quantity), 0),
       coalesce(sum(t.quantity) FILTER (
           WHERE l.token_id IS NOT NULL AND l.expires_at > now()
             AND l.spender_tx_id <> %(tx_id)s), 0)
FROM tokens_token t LEFT JOIN locks_tokenlock l ON l.token_id = t.id
WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
"""

# Row-lock the first free tokens of the wallet in id order, waiting for whoever holds them.
# LIMIT NULL locks every free token (the retry when the first batch did not cover the request).
SERIAL_LOCK = """
SELECT t.id FROM tokens_token t
WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id AND l.expires_at > now())
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
  AND NOT EXISTS (
      SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id AND l.expires_at > now())
ORDER BY t.id
"""

SERIAL_INSERT = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
SELECT t.id, %(tx_id)s, %(fence)s, now(), now() + %(lease)s * interval '1 second', t.wallet,
       t.currency, t.quantity
FROM tokens_token t WHERE t.id = ANY(%(ids)s::bigint[])
ON CONFLICT (token_id) DO NOTHING
RETURNING token_id
"""


class _Short(Exception):
    """The row-locked batch did not cover the request."""


class Serialized:
    """One replica selecting with queued row locks, backing off like the others when short.

    Each transaction row-locks with exactly one statement, in id order. Two such statements
    cannot deadlock (each waits only for higher ids than it holds); a transaction that locked
    a batch and then a second, lower-reaching one could. So a short first batch is rolled back
    and the request retried in a new transaction that locks every free token.
    """

    name = "serialized"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.config = selector_config()
        self.lease = float(settings.SHERDLOCK["LEASE_SECONDS"])
        self.rng = rng or random.Random()
        self.lock_attempts = 0
        self.deadlocks = 0

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        backoff = self.config.backoff
        for attempt in range(backoff.attempts + 1):
            if attempt:
                time.sleep(backoff.delay(self.rng))
            try:
                try:
                    return self._once(tx_id, key, quantity, self.config.fetch_limit)
                except _Short:
                    return self._once(tx_id, key, quantity, None)
            except FundsLocked:
                if attempt == backoff.attempts:
                    raise
            except OperationalError as exc:
                # Spends row-lock tokens too, in their own order: retry like contention.
                if not isinstance(exc.__cause__, errors.DeadlockDetected):
                    raise
                self.deadlocks += 1
                if attempt == backoff.attempts:
                    raise FundsLocked(key, quantity, 0, self.config.retry_after) from exc
        raise AssertionError("unreachable")

    def _once(self, tx_id: str, key: WalletKey, quantity: int, limit: int | None) -> Picked:
        params = {"wallet": key.wallet, "currency": key.currency, "tx_id": tx_id,
                  "lease": self.lease}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(SERIAL_LOCK, {**params, "limit": limit})
            ids = [row[0] for row in cursor.fetchall()]
            cursor.execute(SERIAL_RECHECK, {"ids": ids})
            chosen: list[Candidate] = []
            total = 0
            for token_id, token_quantity in cursor.fetchall():
                if total >= quantity:
                    break
                chosen.append(Candidate(int(token_id), int(token_quantity)))
                total += int(token_quantity)
            if total < quantity:
                if limit is not None:
                    raise _Short()
                cursor.execute(SUPPLY, params)
                unspent, locked = (int(v) for v in cursor.fetchone())
                available = max(0, unspent - locked)
                if unspent < quantity:
                    raise InsufficientFunds(key, quantity, available)
                raise FundsLocked(key, quantity, available, self.config.retry_after)
            cursor.execute(NEXT_FENCE)
            fence = int(cursor.fetchone()[0])
            self.lock_attempts += len(chosen)
            cursor.execute(SERIAL_INSERT, {**params, "fence": fence,
                                           "ids": [c.token_id for c in chosen]})
            if len(cursor.fetchall()) != len(chosen):
                # Cannot happen while every locker row-locks tokens first; never half-lock.
                raise RuntimeError(f"{tx_id}: a row-locked token was locked by someone else")
        return Picked(tx_id, key, fence, tuple(chosen))

    def release(self, picked: Picked) -> None:
        with connection.cursor() as cursor:
            cursor.execute(UNLOCK_ALL, {"tx_id": picked.tx_id, "fence": picked.fence})

    def spent(self, picked: Picked) -> None:
        """Do nothing: nothing is cached."""
