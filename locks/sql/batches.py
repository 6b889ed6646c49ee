"""How a fetch takes its batch other than the random fetch's way: fragments of its statements.

In quantity order (the strategies smallest_first and fewest_tokens, and a random selection's
fetch after a short batch), what a batch that cannot cover the need stands for, and taken as of
the moment of each lock, a covering run at a time (a contested wallet); and the window the
choosing strategies (exact, consolidate) read. ``locks.sql.locking`` composes them into its
statements, with ``str.format`` only.
"""

from __future__ import annotations

from sherdlock.strategies import MAX_EXAMINED

# The batch of a fetch in quantity order (smallest_first: ascending, fewest_tokens: descending),
# equal quantities in random order, so replicas that read the same tokens do not all try the
# same one first. It walks token_unspent_by_amount from one end in the index's own order
# (quantity, then id) and stops once the batch is full, so it reads a batch of tokens however
# large the wallet; only then are the batch's equal quantities shuffled. (Shuffled as they are
# read, by an incremental sort, every token of an equal quantity was read and sorted before the
# first one came out: on a wallet of equal tokens, all of them.) `rnd` is the rank in that
# order, so the random fetch's later parts (seen, reach, chosen) lock the covering prefix in it
# as they are. The random fetch's own text stays as it is.
ORDERED_BATCH = """
candidates AS MATERIALIZED (
    SELECT id, quantity, row_number() OVER (ORDER BY quantity {direction}, random()) AS rnd
    FROM (SELECT t.id, t.quantity FROM tokens_token t
          WHERE {unspent_of_key} AND {free}
          ORDER BY t.quantity {direction}, t.id {direction}
          LIMIT %(limit)s::int) batch
),"""
DIRECTIONS = {"ascending": "ASC", "descending": "DESC"}

# What a fetch takes `free` to be when its batch is full and cannot cover the need: the random
# fetch nothing (NULL: it locks nothing and answers short_batch); a fetch in quantity order, whose
# batch is the wallet's first tokens in that order, what the wallet's free tokens reach, so that
# it locks its whole batch when they can cover the need together. Only a shortfall needs their
# sum (the answer reports it): a running sum walks the largest free tokens down
# token_unspent_by_amount and stops at the first that covers the need, or at the last free
# token (no token after it), whose running sum is the whole sum. One pass either way, and never
# past MAX_EXAMINED tokens (sherdlock.strategies): when that many of the largest do not cover
# the need and there are more, it is -1 (TOO_MANY), and the rest of the wallet is not read.
SHORT_BATCH = "NULL::numeric"
TOO_MANY = -1
FREE_UP_TO_NEED = """coalesce(
            (SELECT CASE WHEN r.reached >= %(need)s::numeric OR r.next IS NULL THEN r.reached
                         ELSE {too_many} END
             FROM (
                SELECT sum(c.quantity) OVER w AS reached, lead(c.id) OVER w AS next,
                       row_number() OVER w AS n
                FROM (SELECT t.id, t.quantity FROM tokens_token t
                      WHERE {{unspent_of_key}} AND {{free}}
                      ORDER BY t.quantity DESC, t.id DESC
                      LIMIT {examined} + 1) c
                WINDOW w AS (ORDER BY c.quantity DESC, c.id DESC ROWS UNBOUNDED PRECEDING)) r
             WHERE r.reached >= %(need)s::numeric OR r.next IS NULL OR r.n = {examined}
             LIMIT 1),
            0)""".format(examined=MAX_EXAMINED, too_many=TOO_MANY)

# On a wallet whose selections keep colliding (sherdlock.cache, "contested") the fetch hands its
# batch, in the same random order, to locks_take_tokens (migration locks 0014), which takes tokens
# from the front as of that moment, a covering run at a time, until what it took covers the need.
# A token locked after the statement began is passed over instead of being inserted and lost.
# The batch is held as two arrays in one row, in its order. What was taken is row-locked already,
# so FRESH_WANTED reads the rows without FOR UPDATE (under the row lock the function found them
# unspent). Every token the function looked at (`looked`) is left out of the spare: those it
# passed over are taken.
FRESH_CHOSEN = """
ordered AS MATERIALIZED (
    SELECT array_agg(id ORDER BY rnd, id) AS ids, array_agg(quantity ORDER BY rnd, id) AS amounts
    FROM candidates
    WHERE (SELECT free FROM reach) >= %(need)s::numeric{gated}
),
looked AS MATERIALIZED (
    SELECT k.token AS id, k.took
    FROM ordered o
    CROSS JOIN LATERAL locks_take_tokens(o.ids, o.amounts, %(need)s::numeric,
                                         %(wallet)s::text, %(currency)s::text) k
),
chosen AS MATERIALIZED (SELECT id FROM looked WHERE took),"""
FRESH_WANTED = """
wanted AS (
    SELECT t.id, t.quantity, t.tx_id, t."index"
    FROM tokens_token t
    WHERE t.id IN (SELECT id FROM chosen) AND {unspent_of_key}
),"""

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
"""
