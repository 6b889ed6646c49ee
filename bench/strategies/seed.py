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

from bench.strategies.base import Picked, Spent
from bench.strategies.baseline import NEXT_FENCE, Baseline, Short
from common import db
from sherdlock import Candidate, WalletKey

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
ON CONFLICT (wallet, token_id) DO NOTHING
"""


class SeedFaithful(Baseline):
    """One replica running the seed algorithm with the shipped retry and backoff settings."""

    name = "seed-faithful"

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        self.cache: dict[WalletKey, list[Candidate]] = {}
        self._fence: int | None = None

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        self._fence = int(self.execute(NEXT_FENCE, {})[0][0])  # one for every round
        return super().select(tx_id, key, quantity)

    def _count(self, statement: str, params: dict[str, object]) -> int:
        return db.execute(statement, params).rowcount

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        fence = self._fence
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
                    if self._count(
                        SEED_LOCK_ONE,
                        {
                            "token_id": candidate.token_id,
                            "tx_id": tx_id,
                            "fence": fence,
                            "lease": self.knobs.lease,
                            "wallet": key.wallet,
                            "currency": key.currency,
                            "quantity": candidate.quantity,
                        },
                    ):
                        locked.append(candidate)
                        total += candidate.quantity
                    else:
                        maybe_more = True  # its holder may release it
                    continue
                if not maybe_more or retries > self.knobs.max_retries:
                    raise Short()
                retries += 1
                rows = self.execute(SEED_FETCH, {"wallet": key.wallet, "currency": key.currency})
                queue[:] = [Candidate(int(i), int(q)) for i, q in rows]
                self.rng.shuffle(queue)
                maybe_more = False
        except BaseException:
            if locked:
                self.unlock(tx_id, fence)
            raise
        return Picked(tx_id, key, fence, tuple(locked))

    def spent(self, picked: Picked, created: Spent | None = None) -> None:
        """Do nothing: the seed learns of spent tokens from conflicts and refetches."""
