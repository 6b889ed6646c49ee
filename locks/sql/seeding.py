"""Bulk locks for demos and benchmarks (``manage.py seed_locks``), as selections leave them."""

from __future__ import annotations

# Pick N random unspent, unlocked tokens: one pass over the table with a top-N sort.
PICK = """
SELECT t.id FROM tokens_token t
WHERE t.spent_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
ORDER BY random()
LIMIT %(count)s
"""

# Lock one chunk of picked tokens in a single INSERT ... SELECT: group them into selections of
# up to %(per_tx)s tokens of one wallet/currency, give each selection a fence and one lease
# (a live one with a random age, or one that expired a while ago), and write the lock rows
# under that fence, exactly as a replica's selection would have left them.
LOCK_CHUNK = """
WITH picked AS (
    SELECT t.id, t.wallet, t.currency, t.quantity,
           (row_number() OVER (ORDER BY t.wallet, t.currency, t.id) - 1) / %(per_tx)s AS grp
    FROM tokens_token t
    WHERE t.id = ANY(%(ids)s)
),
grouped AS (
    SELECT grp, wallet, currency, array_agg(id ORDER BY id) AS token_ids,
           sum(quantity) AS total, random() < %(expired_fraction)s AS expired, random() AS r
    FROM picked
    GROUP BY grp, wallet, currency
    HAVING sum(quantity) > 0
),
timed AS (
    -- A live lease has at least a tenth of its length left: none runs out while looked at.
    SELECT *, CASE WHEN expired
                   THEN now() - (%(ttl)s * (1 + r) + 1) * interval '1 second'
                   ELSE now() - 0.9 * %(ttl)s * r * interval '1 second' END AS created
    FROM grouped
),
selections AS (
    INSERT INTO locks_selection (tx_id, wallet, currency, quantity, total, token_ids, status,
                                 created_at, expires_at)
    SELECT %(prefix)s || grp || '-' || wallet || '-' || currency, wallet, currency, total,
           total, token_ids, 'locked', created, created + %(ttl)s * interval '1 second'
    FROM timed
    RETURNING tx_id, wallet, fence, token_ids, created_at, expires_at
),
-- Their transaction ids are claimed, as a recording selection claims its own.
claimed AS (
    INSERT INTO tokens_txclaim (namespace, tx_id, wallet)
    SELECT '', tx_id, wallet FROM selections
    ON CONFLICT (namespace, tx_id) DO NOTHING
)
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
SELECT p.id, s.tx_id, s.fence, s.created_at, s.expires_at, p.wallet, p.currency, p.quantity
FROM selections s CROSS JOIN LATERAL unnest(s.token_ids) AS u(id)
JOIN picked p ON p.id = u.id
ON CONFLICT (wallet, token_id) DO NOTHING
"""
