"""Seed-faithful: the design document's algorithm as written, without our improvements.

Compared with ours it lacks: the lock-table anti-join in the candidate query (it reads every
unspent token of the wallet, locked or not), locking in batches (one INSERT per token), the
fetch that locks in the same round trip, the local check of tokens this transaction already
holds, and the retry budget that resets on progress. It keeps what the design has: a
per-replica cache popped one token at a time, refetch when it runs empty, maxRetries, release
on abort, and the same randomized backoff between rounds.
"""

from __future__ import annotations

import random
import time

from django.conf import settings
from django.db import connection

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

# Every unspent token of the wallet, whatever its lock state; the design shuffles client-side.
SEED_FETCH = """
SELECT id, quantity FROM tokens_token
WHERE wallet = %(wallet)s AND currency = %(currency)s AND spent_at IS NULL
"""

# Lock one token by inserting its lock row; a conflict means someone holds it (or held it and
# spent it: lock rows of spent tokens stay until housekeeping, which a run never does).
SEED_LOCK_ONE = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
VALUES (%(token_id)s, %(tx_id)s, %(fence)s, now(), now() + %(lease)s * interval '1 second',
        %(wallet)s, %(currency)s, %(quantity)s)
ON CONFLICT (token_id) DO NOTHING
"""


class SeedFaithful:
    """One replica running the seed algorithm with the shipped retry and backoff settings."""

    name = "seed-faithful"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.config = selector_config()
        self.lease = float(settings.SHERDLOCK["LEASE_SECONDS"])
        self.rng = rng or random.Random()
        self.cache: dict[WalletKey, list[Candidate]] = {}
        self.lock_attempts = 0

    def _execute(self, statement: str, params: dict[str, object]):
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else cursor.rowcount

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        fence = int(self._execute(NEXT_FENCE, {})[0][0])
        backoff = self.config.backoff
        for attempt in range(backoff.attempts + 1):
            if attempt:
                time.sleep(backoff.delay(self.rng))
            try:
                return self._round(tx_id, key, quantity, fence)
            except FundsLocked:
                if attempt == backoff.attempts:
                    raise
        raise AssertionError("unreachable")

    def _round(self, tx_id: str, key: WalletKey, quantity: int, fence: int) -> Picked:
        queue = self.cache.setdefault(key, [])
        locked: list[Candidate] = []
        total = 0
        # Before the first fetch the cache may be stale or empty: a query may find more.
        maybe_more = True
        retries = 0
        try:
            while total < quantity:
                if queue:
                    candidate = queue.pop()
                    self.lock_attempts += 1
                    if self._execute(SEED_LOCK_ONE, {
                        "token_id": candidate.token_id, "tx_id": tx_id, "fence": fence,
                        "lease": self.lease, "wallet": key.wallet, "currency": key.currency,
                        "quantity": candidate.quantity,
                    }):
                        locked.append(candidate)
                        total += candidate.quantity
                    else:
                        maybe_more = True  # its holder may release it
                    continue
                if not maybe_more:
                    raise InsufficientFunds(key, quantity, total)
                if retries > self.config.max_retries:
                    raise FundsLocked(key, quantity, total, self.config.retry_after)
                retries += 1
                rows = self._execute(SEED_FETCH, {"wallet": key.wallet,
                                                  "currency": key.currency})
                queue[:] = [Candidate(int(i), int(q)) for i, q in rows]
                self.rng.shuffle(queue)
                maybe_more = False
        except BaseException:
            if locked:
                self._execute(UNLOCK_ALL, {"tx_id": tx_id, "fence": fence})
            raise
        return Picked(tx_id, key, fence, tuple(locked))

    def release(self, picked: Picked) -> None:
        self._execute(UNLOCK_ALL, {"tx_id": picked.tx_id, "fence": picked.fence})

    def spent(self, picked: Picked) -> None:
        """Do nothing: the seed learns of spent tokens from conflicts and refetches."""
