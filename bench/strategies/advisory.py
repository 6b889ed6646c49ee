"""Serialized-advisory: one transaction per selection, serialized per wallet by an advisory lock.

``pg_advisory_xact_lock`` on the (wallet, currency), then one statement that picks the free
unspent tokens in id order, takes the prefix that covers the request and inserts its locks.
Both statements go to the server as one message (one round trip, one implicit transaction):
the advisory lock is held until that transaction commits, so selections of a wallet never
race each other and never lock part of what they need.
"""

from __future__ import annotations

from django.db import connection

from bench.strategies.base import Picked
from bench.strategies.baseline import Baseline, Short
from sherdlock import Candidate, WalletKey

# First key of the two-key advisory lock: a namespace of its own ("sb" for selection, bench),
# so it cannot collide with the single-key lock housekeeping takes.
NAMESPACE = 0x7362

ADVISORY_LOCK = """
SELECT pg_advisory_xact_lock(%(namespace)s, hashtext(%(wallet)s || chr(31) || %(currency)s))
"""

# Runs after the advisory lock in the same implicit transaction; in READ COMMITTED this second
# statement takes a fresh snapshot, so it sees every lock the previous holder committed.
# - head: the first %(limit)s free tokens in id order (partial index walk with an anti-join);
#   rest: every later free token, read only when the head does not cover the request.
# - A token with any lock row is not free: ON CONFLICT DO NOTHING never takes a lock over.
# - The fence is drawn, and the locks inserted, only when the free tokens cover the request;
#   otherwise the wallet's unspent total is read in the same statement, to tell insufficient
#   funds from funds held by others without another round trip.
TAKE = """
WITH head AS (
    SELECT t.id, t.quantity
    FROM tokens_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
    ORDER BY t.id
    LIMIT %(limit)s
),
rest AS (
    SELECT t.id, t.quantity
    FROM tokens_token t
    WHERE (SELECT coalesce(sum(quantity), 0) FROM head) < %(need)s
      AND t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND t.id > (SELECT max(id) FROM head)
      AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
),
ranked AS (
    SELECT id, quantity, sum(quantity) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS running
    FROM (SELECT id, quantity FROM head UNION ALL SELECT id, quantity FROM rest) free
),
chosen AS (
    SELECT id, quantity FROM ranked WHERE running - quantity < %(need)s
),
covered AS (
    SELECT coalesce(max(running), 0) >= %(need)s AS ok, coalesce(max(running), 0) AS free
    FROM ranked
),
fence AS (
    SELECT nextval('locks_fence_seq') AS value WHERE (SELECT ok FROM covered)
),
granted AS (
    INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                                 currency, quantity)
    SELECT c.id, %(tx_id)s, f.value, now(), now() + %(lease)s * interval '1 second',
           %(wallet)s, %(currency)s, c.quantity
    FROM chosen c CROSS JOIN fence f
    ORDER BY c.id
    ON CONFLICT (wallet, token_id) DO NOTHING
    RETURNING token_id
)
SELECT (SELECT value FROM fence),
       (SELECT count(*) FROM chosen WHERE (SELECT ok FROM covered)),
       array(SELECT c.id FROM chosen c JOIN granted g ON g.token_id = c.id ORDER BY c.id),
       array(SELECT c.quantity FROM chosen c JOIN granted g ON g.token_id = c.id ORDER BY c.id),
       (SELECT free FROM covered)
"""


class SerializedAdvisory(Baseline):
    """One replica taking the wallet's advisory lock for each selection."""

    name = "serialized-advisory"

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        params = {
            "namespace": NAMESPACE,
            "wallet": key.wallet,
            "currency": key.currency,
            "tx_id": tx_id,
            "need": quantity,
            "limit": self.knobs.fetch_limit,
            "lease": self.knobs.lease,
        }
        with connection.cursor() as cursor:
            # Django's psycopg cursor binds parameters client-side and sends the text as one
            # simple query, so both statements cost one round trip.
            cursor.execute(ADVISORY_LOCK + ";" + TAKE, params)
            cursor.nextset()
            fence, offered, ids, quantities, _free = cursor.fetchone()
        self.lock_attempts += int(offered)
        if fence is None:
            raise Short()
        tokens = tuple(Candidate(int(i), int(q)) for i, q in zip(ids, quantities, strict=True))
        if len(tokens) < offered:
            # Only another locker that ignores the advisory lock could cause this.
            self.unlock(tx_id, int(fence))
            raise Short()
        return Picked(tx_id, key, int(fence), tokens)
