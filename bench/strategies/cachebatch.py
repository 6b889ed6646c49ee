"""Cache-batch: a per-replica cache of free tokens, locked a covering prefix at a time.

The cache of a (wallet, currency) is filled by one anti-join fetch of up to 256 free unspent
tokens, read from a random point of the wallet's id range (so replicas do not all start from
the same tokens) and shuffled. A selection pops a prefix that covers what it still needs and
locks it with one ``INSERT ... SELECT ... WHERE unspent ... ON CONFLICT DO NOTHING RETURNING``;
what was not granted is contention and is dropped. An empty (or older than ``CACHE_TTL``)
cache is refetched, at most ``MAX_RETRIES`` times in a row without progress. Released tokens
go back to the cache.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from bench.strategies.base import Picked
from bench.strategies.baseline import Baseline, Short
from sherdlock import Candidate, WalletKey

FETCH_SIZE = 256

# Up to %(limit)s unspent tokens without a lock row, walking the wallet's partial index from a
# random pivot in its id range, wrapping around below it only when the upper part is too short.
FETCH = """
WITH bounds AS (
    SELECT min(id) AS lo, max(id) AS hi FROM tokens_token
    WHERE wallet = %(wallet)s AND currency = %(currency)s AND spent_at IS NULL
),
pivot AS (
    SELECT lo + floor(random() * (hi - lo + 1))::bigint AS p FROM bounds
),
upper_part AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND t.id >= (SELECT p FROM pivot)
      AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
    ORDER BY t.id
    LIMIT %(limit)s
),
lower_part AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND t.id < (SELECT p FROM pivot)
      AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
    ORDER BY t.id
    LIMIT %(limit)s
)
(SELECT id, quantity FROM upper_part UNION ALL SELECT id, quantity FROM lower_part)
LIMIT %(limit)s
"""

# Lock the popped candidates that are still unspent; a lock row of anyone (live, expired, or of
# a spent token) makes the insert skip the token. The first statement of a selection draws the
# fence (COALESCE evaluates nextval only when none is passed in).
LOCK = """
WITH fence AS (
    SELECT coalesce(%(fence)s::bigint, nextval('locks_fence_seq')) AS value
),
granted AS (
    INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                                 currency, quantity)
    SELECT t.id, %(tx_id)s, f.value, now(), now() + %(lease)s * interval '1 second',
           t.wallet, t.currency, t.quantity
    FROM tokens_token t CROSS JOIN fence f
    WHERE t.id = ANY(%(ids)s::bigint[]) AND t.spent_at IS NULL
    ORDER BY t.id
    ON CONFLICT (wallet, token_id) DO NOTHING
    RETURNING token_id
)
SELECT (SELECT value FROM fence), array(SELECT token_id FROM granted)
"""


@dataclass
class _Queue:
    filled_at: float = 0.0
    tokens: list[Candidate] = field(default_factory=list)


class CacheBatch(Baseline):
    """One replica with a shuffled batch cache per wallet."""

    name = "cache-batch"

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        self.cache: dict[WalletKey, _Queue] = {}

    def _queue(self, key: WalletKey) -> _Queue:
        queue = self.cache.setdefault(key, _Queue())
        if queue.tokens and time.monotonic() - queue.filled_at > self.knobs.cache_ttl:
            queue.tokens.clear()
        return queue

    def _fetch(self, key: WalletKey, queue: _Queue) -> None:
        rows = self.execute(
            FETCH, {"wallet": key.wallet, "currency": key.currency, "limit": FETCH_SIZE}
        )
        queue.tokens = [Candidate(int(i), int(q)) for i, q in rows]
        self.rng.shuffle(queue.tokens)
        queue.filled_at = time.monotonic()

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        held: list[Candidate] = []
        total, fence, refetches = 0, None, 0
        try:
            while total < quantity:
                queue = self._queue(key)
                if not queue.tokens:
                    if refetches > self.knobs.max_retries:
                        raise Short()
                    refetches += 1
                    self._fetch(key, queue)
                    if not queue.tokens:
                        raise Short()  # nothing free in sight
                    continue
                batch, covered = [], total
                while queue.tokens and covered < quantity:
                    batch.append(queue.tokens.pop())
                    covered += batch[-1].quantity
                fence, granted = self.execute(
                    LOCK,
                    {
                        "fence": fence,
                        "tx_id": tx_id,
                        "lease": self.knobs.lease,
                        "ids": [c.token_id for c in batch],
                    },
                )[0]
                self.lock_attempts += len(batch)
                granted = set(granted)
                for candidate in batch:
                    if candidate.token_id in granted:
                        held.append(candidate)
                        total += candidate.quantity
                if granted:
                    refetches = 0
            return Picked(tx_id, key, int(fence), tuple(held))
        except BaseException:
            if held:
                self.unlock(tx_id, fence)
            raise

    def release(self, picked: Picked) -> None:
        """Unlock ``picked`` and put its tokens back into this replica's cache."""
        super().release(picked)
        queue = self.cache.get(picked.key)
        if queue is not None:
            queue.tokens.extend(picked.tokens)
            self.rng.shuffle(queue.tokens)
