"""Which tokens a locking statement tries to lock: the fragments that end in its ``chosen`` CTE.

A locking statement (``locks.sql.locking``) tries the tokens of one of these choices:

- ``GIVEN``: the ids the caller names (the try-lock of cached candidates);
- a fetch: a batch of the wallet's free tokens (``RANDOM_BATCH`` from a random pivot for a warm
  key, ``FRONT_BATCH`` from the wallet's first free token for a cold or a contested key, or
  ``ORDERED_BATCH`` in quantity order), what the batch covers (``REACH``), then the tokens to
  lock: the prefix of the batch, in its order, that covers the need (``PREFIX``).

Each fragment is a run of CTEs ending in a comma; ``{gated}`` is where the statement adds the
conditions that let it lock anything at all (an unused tx id, an admitted rate limit). The
window that the choosing strategies read (``WINDOW``) is a statement of its own. All of them
are filled with ``str.format`` only, at import.
"""

from __future__ import annotations

from sherdlock.strategies import MAX_EXAMINED

# The tokens of the claim's key that nobody has spent.
UNSPENT_OF_KEY = """t.wallet = %(wallet)s::text AND t.currency = %(currency)s::text
      AND t.spent_at IS NULL"""

# A token is free when no live lock row names it. Evaluated against the statement's snapshot: a
# lock committed after it is caught by ON CONFLICT in the insert. The lock row is looked up by
# its key (token, wallet), once per candidate; the wallet prunes the lock table to the claim's
# partition. The check is written so that this probe is the only plan it can get:
# - OFFSET 0 keeps it a per-row subplan (the planner does not turn a NOT EXISTS with an OFFSET
#   into an anti-join, whose plan would hang on the lock table's size as last analysed);
# - the lease test is an IS TRUE, which no index can answer. As an index condition, expires_at >
#   now() is costed from statistics that never see the live rows: expires_at only grows, so
#   between two analyses almost no row looks live, and the expiry index then looks cheaper than
#   the key. Each probe would read every live lock of every wallet, a cost that grows with the
#   table: a backlog of expired rows left by crashed spenders would slow every lock statement
#   within seconds (tests/integration/test_plans.py keeps the probe on the key).
FREE = """NOT EXISTS (
          SELECT FROM locks_tokenlock l
          WHERE l.token_id = t.id AND l.wallet = %(wallet)s::text
            AND (l.expires_at > now()) IS TRUE
          OFFSET 0)"""

FILL = {"unspent_of_key": UNSPENT_OF_KEY, "free": FREE}

# -- given ids ------------------------------------------------------------------------------

# The cached candidates a try-lock names, those still unspent, not live-locked and of the
# claim's wallet and currency (a cache can be stale, never wrong).
GIVEN = """
chosen AS (
    SELECT t.id FROM tokens_token t
    WHERE t.id = ANY(%(token_ids)s::bigint[]) AND {unspent_of_key}
      AND {free}{{gated}}
),""".format(**FILL)

# -- a fetch's batch: ``candidates`` (id, quantity, rnd: the order its prefix is taken in) --

# Up to %(limit)s free tokens of the wallet, read without row locks (only the prefix that will
# be inserted is row-locked, so a fetch writes no more tuples than it locks). A random pivot in
# the wallet's id range, then a walk of token_unspent_by_wallet from there (and a wrap-around
# walk below it, evaluated only if the first did not fill the batch), gives every replica a
# different starting point without sorting the whole wallet; the batch is then shuffled. This is
# a warm key's batch: the replica queues what it does not lock, and replicas that queued the
# same tokens would keep refusing each other's try-locks.
RANDOM_BATCH = """
pivot AS MATERIALIZED (
    SELECT lo + floor(random() * (hi - lo + 1))::bigint AS p
    FROM (SELECT min(t.id) AS lo, max(t.id) AS hi FROM tokens_token t
          WHERE {unspent_of_key}) bounds
),
upper_part AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE {unspent_of_key} AND t.id >= (SELECT p FROM pivot) AND {free}
    ORDER BY t.id
    LIMIT %(limit)s::int
),
lower_part AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE {unspent_of_key} AND t.id < (SELECT p FROM pivot) AND {free}
    ORDER BY t.id
    LIMIT %(limit)s::int
),
candidates AS MATERIALIZED (
    SELECT id, quantity, random() AS rnd
    FROM ((SELECT id, quantity FROM upper_part) UNION ALL (SELECT id, quantity FROM lower_part)
          LIMIT %(limit)s::int) batch
),""".format(**FILL)

# The batch of a cold key's random fetch (its caller keeps none of it: sherdlock.types.Claim.spare
# false), and of a contested key's. The wallet's first free tokens in id order, shuffled: one
# index walk, without the pivot's reads of the wallet's id range or a wrap-around walk.
# - A cold key is not one the replica's selections keep colliding on, so walking from a pivot
#   would buy nothing; a cold fetch that does collide makes the key contested like any other.
# - A contested key's replicas each lock a covering prefix of their own shuffle of the front, a
#   few tokens of a batch sized at twice the need, so they seldom pick the same token; one that
#   loses a token (locked after its snapshot: the insert leaves it) refetches. Reading the front
#   keeps them off the rest of the wallet, where the replicas that do keep a queue of it (it is
#   warm, not contested, in them) find their queued tokens still free: their cheap try-locks
#   are refused less, and the key is contested less often.
FRONT_BATCH = """
candidates AS MATERIALIZED (
    SELECT id, quantity, random() AS rnd
    FROM (SELECT t.id, t.quantity FROM tokens_token t
          WHERE {unspent_of_key} AND {free}
          ORDER BY t.id
          LIMIT %(limit)s::int) batch
),""".format(**FILL)

# The batch in quantity order (smallest_first: ascending, fewest_tokens: descending), equal
# quantities in random order, so replicas that read the same tokens do not all try the same one
# first. It walks token_unspent_by_amount from one end in the index's own order (quantity, then
# id) and stops once the batch is full, so it reads a batch of tokens however large the wallet;
# only then are the batch's equal quantities shuffled. (Shuffled as they are read, by an
# incremental sort, every token of an equal quantity was read and sorted before the first one
# came out: on a wallet of equal tokens, all of them.) `rnd` is the rank in that order.
ORDERED_BATCH = {
    order: """
candidates AS MATERIALIZED (
    SELECT id, quantity, row_number() OVER (ORDER BY quantity {direction}, random()) AS rnd
    FROM (SELECT t.id, t.quantity FROM tokens_token t
          WHERE {unspent_of_key} AND {free}
          ORDER BY t.quantity {direction}, t.id {direction}
          LIMIT %(limit)s::int) batch
),""".format(direction=direction, **FILL)
    for order, direction in (("ascending", "ASC"), ("descending", "DESC"))
}

# -- what the batch covers: ``reach`` ---------------------------------------------------------

# `free` is what the fetch may lock from: the batch's total when it covers the need or holds
# every free token of the wallet (fewer rows than the limit: the free tokens are short, and the
# caller is told the wallet's unspent total). When the batch is full and cannot cover the need:
# - a random batch is short, not the wallet: NULL (`short_batch`), nothing is locked, and the
#   caller fetches the wallet's largest free tokens next, so it locks a few large tokens rather
#   than a batch of small ones and then another (SHORT_BATCH);
# - a batch in quantity order is the wallet's first tokens in that order: what the wallet's free
#   tokens reach, so that it locks its whole batch when they can cover the need together
#   (FREE_UP_TO_NEED).
# `rows` is how many the batch holds (fewer than the limit: it holds every free token), `total`
# what they add up to.
REACH = """
reach AS MATERIALIZED (
    SELECT s.rows, s.total,
           CASE WHEN s.total >= %(need)s::numeric OR s.rows < %(limit)s::int THEN s.total
                ELSE {beyond_batch}
           END AS free
    FROM (SELECT count(*) AS rows, coalesce(sum(quantity), 0) AS total FROM candidates) s
),"""
SHORT_BATCH = "NULL::numeric"
# Only a shortfall needs the sum of the wallet's free tokens (the answer reports it): a running
# sum walks the largest free tokens down token_unspent_by_amount and stops at the first that
# covers the need, or at the last free token (no token after it), whose running sum is the whole
# sum. One pass either way, and never past MAX_EXAMINED tokens (sherdlock.strategies): when that
# many of the largest do not cover the need and there are more, it is -1 (TOO_MANY), and the
# rest of the wallet is not read.
TOO_MANY = -1
FREE_UP_TO_NEED = """coalesce(
            (SELECT CASE WHEN r.reached >= %(need)s::numeric OR r.next IS NULL THEN r.reached
                         ELSE {too_many} END
             FROM (
                SELECT sum(c.quantity) OVER w AS reached, lead(c.id) OVER w AS next,
                       row_number() OVER w AS n
                FROM (SELECT t.id, t.quantity FROM tokens_token t
                      WHERE {unspent_of_key} AND {free}
                      ORDER BY t.quantity DESC, t.id DESC
                      LIMIT {examined} + 1) c
                WINDOW w AS (ORDER BY c.quantity DESC, c.id DESC ROWS UNBOUNDED PRECEDING)) r
             WHERE r.reached >= %(need)s::numeric OR r.next IS NULL OR r.n = {examined}
             LIMIT 1),
            0)""".format(examined=MAX_EXAMINED, too_many=TOO_MANY, **FILL)
RANDOM_REACH = REACH.format(beyond_batch=SHORT_BATCH)
ORDERED_REACH = REACH.format(beyond_batch=FREE_UP_TO_NEED)

# -- the tokens to lock: ``chosen`` -------------------------------------------------------------

# The prefix of the batch, in its order, that covers the need: nothing if `free` cannot.
PREFIX = """
chosen AS MATERIALIZED (
    SELECT c.id
    FROM (SELECT id, quantity,
                 sum(quantity) OVER (ORDER BY rnd, id ROWS UNBOUNDED PRECEDING) AS running
          FROM candidates) c
    WHERE c.running - c.quantity < %(need)s::numeric
      AND (SELECT free FROM reach) >= %(need)s::numeric{gated}
),"""

# -- the window of a choosing strategy ----------------------------------------------------------

# The window of a choosing strategy (exact, consolidate), read without locking anything: up to
# %(smallest)s of the smallest free tokens of the wallet and up to %(largest)s of the largest
# not above %(cap)s (any, when NULL), each in the amount index's order, so that it reads no more
# than the window (ties in random order would read and sort every token of an equal quantity;
# the selector shuffles the window instead). The selector chooses a set from it and locks that
# with the try-lock statement, which re-checks every token.
WINDOW = """
WITH smallest AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE {unspent_of_key} AND {free}
    ORDER BY t.quantity, t.id
    LIMIT %(smallest)s::int
),
largest AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE {unspent_of_key} AND {free}
      AND (%(cap)s::numeric IS NULL OR t.quantity <= %(cap)s::numeric)
    ORDER BY t.quantity DESC, t.id DESC
    LIMIT %(largest)s::int
),
seen AS (SELECT id, quantity FROM smallest UNION SELECT id, quantity FROM largest)
SELECT array_agg(id ORDER BY id), array_agg(quantity ORDER BY id) FROM seen
""".format(**FILL)
