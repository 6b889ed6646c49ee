"""The rate limiter's statements: take from buckets, read them, prune idle ones.

``clients.throttling`` explains the buckets and runs these. Composed with ``str.format`` at
import (see ``locks.sql``).
"""

from __future__ import annotations

from common.sql import ASYNC_COMMIT

# Decay what each bucket used since its last update, then take one unit where a whole one is
# left. The WHERE of DO UPDATE leaves a refusing bucket untouched; its state as the statement
# found it tells how long until a unit is back. Rows are taken in key order, so two requests
# sharing both buckets never deadlock. Each row carries its own capacity and period (the
# pruning in housekeeping reads them). A counter, not a ledger: committed asynchronously.
DECAYED = """GREATEST(0, {row}.used - {rate}.capacity
                             * EXTRACT(EPOCH FROM statement_timestamp() - {row}.updated_at)
                             / {rate}.period)"""
# The buckets' CTEs, also run by the selection statements that take a request's units where
# they lock (locks.sql.locking, METERED): ``asked`` the buckets, ``taken`` those that had a unit.
BUCKET_CTES = """
asked AS MATERIALIZED (
    SELECT key, capacity, period
    FROM unnest(%(keys)s::text[], %(capacities)s::float8[], %(periods)s::float8[])
         AS a(key, capacity, period){after}
),
taken AS (
    INSERT INTO clients_ratebucket AS b (key, used, updated_at, capacity, period)
    SELECT key, 1, statement_timestamp(), capacity, period FROM asked ORDER BY key
    ON CONFLICT (key) DO UPDATE
        SET used = {decayed_excluded} + 1, updated_at = statement_timestamp(),
            capacity = EXCLUDED.capacity, period = EXCLUDED.period
        WHERE {decayed_excluded} + 1 <= EXCLUDED.capacity
    RETURNING b.key
),"""
# One row per bucket: (key, allowed, capacity, period, used as found when refused), the shape
# ``clients.throttling.refusal_wait`` reads.
VERDICTS = """a.key, t.key IS NOT NULL AS allowed, a.capacity, a.period,
       CASE WHEN t.key IS NULL THEN {decayed_found} END AS used
FROM asked a
LEFT JOIN taken t ON t.key = a.key
LEFT JOIN clients_ratebucket b ON b.key = a.key"""
FILL = {
    "decayed_excluded": DECAYED.format(row="b", rate="EXCLUDED"),
    "decayed_found": DECAYED.format(row="b", rate="a"),
}
CONSUME_TEMPLATE = "WITH{commit}" + BUCKET_CTES.rstrip(",") + "\nSELECT " + VERDICTS + "\n"
# A request's units taken by the statement that locks for it (clients.throttling.charging,
# locks.sql.locking): the buckets' CTEs, then whether every bucket had a unit. The choice is
# empty unless all had, so a refused request locks and records nothing; its refused buckets'
# state comes back to say how long to wait. Bucket rows are taken before any token row (the
# choice's filter reads ``admitted`` first) and nothing that takes bucket rows takes anything
# else, so the lock statements' order rules (token rows, then lock rows in token-id order)
# still hold.
METERED = (
    BUCKET_CTES.format(after="", **FILL)
    + """
admitted AS MATERIALIZED (
    SELECT (SELECT count(*) FROM taken) = (SELECT count(*) FROM asked) AS ok
),"""
)
ADMITTED = "(SELECT ok FROM admitted)"
RESULT_METERED = """,
       {admitted} AS admitted,
       CASE WHEN NOT {admitted} THEN (
           SELECT json_agg(json_build_array(v.key, v.allowed, v.capacity, v.period, v.used))
           FROM (SELECT {verdicts}) v)
       END AS refusals""".format(admitted=ADMITTED, verdicts=VERDICTS.format(**FILL))

# Inside a caller's transaction (tests) the statement leaves the commit mode alone.
CONSUME = {
    durable: CONSUME_TEMPLATE.format(
        commit="" if durable else ASYNC_COMMIT,
        after="" if durable else ", commit_mode",
        **FILL,
    )
    for durable in (False, True)
}


# Delete up to %(limit)s buckets untouched for at least their own period. Such a bucket has
# replenished completely (``remaining`` reaches ``capacity`` after one period, whatever ``used``
# was), so it means exactly what no row means: the next CONSUME inserts a fresh row with one unit
# used. Deleting it loses nothing and keeps the table at one row per recently active key and
# wallet shard instead of one per key and wallet ever seen. There is no index on updated_at (one
# would slow every CONSUME), so a batch reads the table until it has found its rows: with none
# idle, the whole table, once per housekeeping pass, a cost that follows the number of active
# buckets and stays off the selections' path. SKIP LOCKED
# passes over buckets being consumed right now, and the repeated predicate keeps a bucket
# touched after it was picked. The batch is drawn once into an array: an ``IN (subquery)`` the
# planner rescans would draw a new batch per rescan (see locks.housekeeping).
PRUNE_IDLE = """
DELETE FROM clients_ratebucket
WHERE key = ANY(ARRAY(
    SELECT key FROM clients_ratebucket
    WHERE updated_at <= statement_timestamp() - period * interval '1 second'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
AND updated_at <= statement_timestamp() - period * interval '1 second'
"""

# The buckets (every shard) of the logical keys asked for, and the database clock, which
# stamped them.
READ_BUCKETS = """
SELECT split_part(b.key, '#', 1), b.used, b.capacity, b.period, b.updated_at,
       statement_timestamp()
FROM clients_ratebucket b
WHERE split_part(b.key, '#', 1) = ANY(%s)
"""
