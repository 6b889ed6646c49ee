"""The housekeeping points' expired lock rows: planted, topped up, counted.

What a fleet of replicas that died leaves behind, on the large workload that
``bench.seeding.seed_generated`` loads; ``bench.housekeeping`` measures selections with them.
"""

from __future__ import annotations

from bench.database import EXPIRED_PREFIX, Quiet, checkpoint, db_cursor
from bench.seeding import bulk_load

# Expired locks of crashed spenders on every other unspent token, lease ended an hour ago
# (far past any housekeeping grace): what a fleet of replicas that died leaves behind.
SEED_EXPIRED = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
SELECT id, %(prefix)s || (id %% 1000), nextval('locks_fence_seq'),
       now() - interval '1 hour' - %(lease)s * interval '1 second', now() - interval '1 hour',
       wallet, currency, quantity
FROM (SELECT id, wallet, currency, quantity FROM tokens_token
      WHERE spent_at IS NULL AND id %% 2 = 0 ORDER BY id LIMIT %(count)s) AS picked
ORDER BY id
"""

# The same on free unspent tokens (no lock row at all, odd ids too: the even ones are taken),
# to restore as many planted rows as a point took over.
TOP_UP_EXPIRED = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
SELECT id, %(prefix)s || (id %% 1000), nextval('locks_fence_seq'),
       now() - interval '1 hour' - %(lease)s * interval '1 second', now() - interval '1 hour',
       wallet, currency, quantity
FROM (SELECT t.id, t.wallet, t.currency, t.quantity FROM tokens_token t
      WHERE t.spent_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
      ORDER BY t.id LIMIT %(count)s) AS picked
ORDER BY id
"""


def plant_expired_locks(count: int, lease: float) -> int:
    """Replace every lock row by ``count`` expired ones of crashed spenders; return how many."""
    with db_cursor() as cursor:
        cursor.execute("TRUNCATE locks_tokenlock")
    with bulk_load("locks_tokenlock") as cursor:
        cursor.execute(SEED_EXPIRED, {"count": count, "lease": lease, "prefix": EXPIRED_PREFIX})
        planted = cursor.rowcount
    with db_cursor() as cursor:
        cursor.execute("VACUUM ANALYZE locks_tokenlock")
    checkpoint()
    return planted


def top_up_expired_locks(count: int, lease: float) -> int:
    """Plant expired rows on free tokens until ``count`` are there again; return how many."""
    missing = count - expired_left()
    if missing > 0:
        with Quiet(), db_cursor() as cursor:
            cursor.execute(
                TOP_UP_EXPIRED, {"count": missing, "lease": lease, "prefix": EXPIRED_PREFIX}
            )
    with db_cursor() as cursor:
        cursor.execute("ANALYZE locks_tokenlock")
    checkpoint()
    return expired_left()


def expired_left() -> int:
    """Count the planted expired lock rows that are still there."""
    with db_cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM locks_tokenlock WHERE spender_tx_id LIKE %s",
            [EXPIRED_PREFIX + "%"],
        )
        return int(cursor.fetchone()[0])
