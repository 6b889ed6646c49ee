"""The hot-path SQL of the PostgreSQL token store, one named block per statement.

Every statement runs on its own (autocommit), so each is one short transaction. Two rules keep
them from deadlocking with each other, with spends and with releases:
- token row before lock row: the inserts take the token rows (FOR UPDATE) before touching lock
  rows, and a spend locks its token rows before it reads the lock rows;
- lock rows in token-id order: an insert that meets an existing lock row (an expired one it may
  take over, or one committed after its snapshot) waits for that row, and an unlock or release
  deletes several rows; both go through them in ascending token id.
"""

# Draw the fence of a new selection: strictly increasing across every replica.
NEXT_FENCE = "SELECT nextval('locks_fence_seq')"

# The lock insert both locking statements share, fed by a row source of token ids whose token
# rows the statement already holds FOR UPDATE. It inserts in token-id order (see above) and takes
# over a lock only if that lock's lease has run out; a live lock is left alone and its token is
# simply not returned, i.e. not granted.
LOCK_INSERT = """
INSERT INTO locks_tokenlock AS l (token_id, spender_tx_id, fence, created_at, expires_at)
SELECT id, %(tx_id)s, %(fence)s, now(), now() + %(lease)s * interval '1 second'
FROM {source}
ORDER BY id
ON CONFLICT (token_id) DO UPDATE
    SET spender_tx_id = EXCLUDED.spender_tx_id, fence = EXCLUDED.fence,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE l.expires_at <= now()
RETURNING token_id, expires_at
"""

# Read up to %(limit)s unspent, unlocked tokens of one wallet/currency and lock a random prefix of
# them that covers %(need)s, in one round trip.
# - A random pivot in the wallet's id range, then a walk of the partial index from there (and a
#   wrap-around walk below it, evaluated only if the first did not fill the batch), gives every
#   replica a different starting point without sorting the whole wallet.
# - NOT EXISTS skips tokens with a live lock; FOR UPDATE SKIP LOCKED skips rows that concurrent
#   selections or spends are touching right now, so replicas never queue behind each other.
# - The anti-join reads this statement's snapshot: a lock committed after it was taken is caught
#   by ON CONFLICT, and the token is reported as not granted (contention, not an error).
# - An expired lock of another spender is taken over (new fence); a live one never is.
FETCH_AND_LOCK = """
WITH bounds AS (
    SELECT min(id) AS lo, max(id) AS hi
    FROM tokens_token
    WHERE wallet = %(wallet)s AND currency = %(currency)s AND spent_at IS NULL
),
pivot AS (
    SELECT lo + floor(random() * (hi - lo + 1))::bigint AS p FROM bounds
),
upper_part AS (
    SELECT t.id, t.quantity
    FROM tokens_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND t.id >= (SELECT p FROM pivot)
      AND NOT EXISTS (
          SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id AND l.expires_at > now())
    ORDER BY t.id
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
),
lower_part AS (
    SELECT t.id, t.quantity
    FROM tokens_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND t.id < (SELECT p FROM pivot)
      AND NOT EXISTS (
          SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id AND l.expires_at > now())
    ORDER BY t.id
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
),
candidates AS (
    (SELECT id, quantity FROM upper_part UNION ALL SELECT id, quantity FROM lower_part)
    LIMIT %(limit)s
),
ranked AS (
    SELECT id, quantity,
           sum(quantity) OVER (ORDER BY rnd, id ROWS UNBOUNDED PRECEDING) AS running
    FROM (SELECT id, quantity, random() AS rnd FROM candidates) shuffled
),
chosen AS (
    SELECT id FROM ranked WHERE running - quantity < %(need)s
),
granted AS (
{lock_insert})
SELECT r.id, r.quantity, r.running - r.quantity < %(need)s AS attempted,
       g.token_id IS NOT NULL AS granted, g.expires_at
FROM ranked r LEFT JOIN granted g ON g.token_id = r.id
ORDER BY r.running
""".replace("{lock_insert}", LOCK_INSERT.format(source="chosen"))

# Lock a batch of cached candidates in one round trip; grant only those still unspent and not
# live-locked. FOR UPDATE on the token rows makes the spent check exact: a spend that committed
# first is seen (READ COMMITTED re-reads the row), one in flight is skipped (SKIP LOCKED) and so
# reported as not granted — a stale cache can never lock a spent token.
TRY_LOCK = """
WITH wanted AS (
    SELECT t.id
    FROM tokens_token t
    WHERE t.id = ANY(%(token_ids)s) AND t.spent_at IS NULL
    ORDER BY t.id
    FOR UPDATE OF t SKIP LOCKED
)
{lock_insert}""".replace("{lock_insert}", LOCK_INSERT.format(source="wanted"))

# Remove this selection's lock rows (all, or the given tokens). The fence keeps a stale holder
# from deleting locks that were re-granted to a newer selection under the same tx id. The rows
# are row-locked in token-id order first (see the module docstring): a plain DELETE would take
# them in physical order and could deadlock with an insert waiting on one of them.
UNLOCK = """
DELETE FROM locks_tokenlock
WHERE token_id IN (
    SELECT token_id FROM locks_tokenlock
    WHERE spender_tx_id = %(tx_id)s AND fence = %(fence)s {only}
    ORDER BY token_id
    FOR UPDATE
)
"""
UNLOCK_ALL = UNLOCK.format(only="")
UNLOCK_SOME = UNLOCK.format(only="AND token_id = ANY(%(token_ids)s)")

# Authoritative totals for one wallet/currency, read only when a selection comes up short: all
# unspent value, and the part held by live locks of other spenders.
SUPPLY = """
SELECT coalesce(sum(t.quantity), 0) AS unspent,
       coalesce(sum(t.quantity) FILTER (
           WHERE l.token_id IS NOT NULL AND l.expires_at > now()
             AND l.spender_tx_id <> %(tx_id)s), 0) AS locked
FROM tokens_token t
LEFT JOIN locks_tokenlock l ON l.token_id = t.id
WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
"""
