"""Housekeeping's statements: remove dead lock rows, settle expired selections, prune history.

Every delete and update is bounded (``%(limit)s`` rows) and runs as its own short transaction;
see ``locks.housekeeping`` for the pass that runs them. Composed with ``str.format`` at import.
"""

from __future__ import annotations

import functools

from common.partitioning import partition_names
from locks.sql.waiting import wake

# The single-runner guard: a session-level advisory lock (``locks.housekeeping`` says why), on
# the key ``locks.housekeeping.GUARD_KEY``.
TRY_GUARD = "SELECT pg_try_advisory_lock(%s)"
RELEASE_GUARD = "SELECT pg_advisory_unlock(%s)"

# Every batch below is drawn once, into an array (an InitPlan). Written as ``IN (SELECT ...
# LIMIT n FOR UPDATE SKIP LOCKED)`` the planner may put the subquery on the inner side of a
# nested loop and rescan it per outer row; a rescan skips the rows this statement has already
# deleted (they are its own, so FOR UPDATE passes over them) and draws the next n, and one
# "batch" becomes the whole table. Which plan is chosen depends on the table's statistics.

# Remove up to %(limit)s locks of tokens spent at least %(grace)s seconds ago. The rows are kept
# that long after a spend so that replicas with the token in their cache see it locked and move
# on instead of trying it (the design's note on spent tokens); after that the cache has been
# refreshed and the row is dead weight. Driven from the expires_at index over the leases not yet
# past their grace, with one primary-key probe into the token table per lock row: a lock whose
# lease is over is DELETE_EXPIRED's, spent or not, so a backlog of expired rows (a million
# after an outage) is never read here. Without that bound the planner scanned every token at
# the head of every pass, a cost that grows with the table and that the duty cycle does not
# spread out.
# This and the next two statements run per partition ({locks}, {tokens}, {selections}: the
# tables of one partition number, or the tables themselves when unpartitioned), each pass under
# its own guard: see ``partition_statements``.
DELETE_SPENT = """
DELETE FROM {locks}
WHERE token_id = ANY(ARRAY(
    SELECT l.token_id
    FROM {locks} l JOIN {tokens} t ON t.id = l.token_id AND t.wallet = l.wallet
    WHERE t.spent_at <= now() - %(grace)s * interval '1 second'
    AND l.expires_at > now() - %(grace)s * interval '1 second'
    LIMIT %(limit)s
    FOR UPDATE OF l SKIP LOCKED
))
"""

# Remove up to %(limit)s locks whose lease ended at least %(grace)s seconds ago (database clock,
# the clock that stamped the lease). The inner SELECT walks the expires_at index and row-locks
# its batch; SKIP LOCKED passes over rows that a selection is taking over or a renewal is
# updating right now, so neither ever waits behind the housekeeper, nor it behind them. The
# predicate is repeated outside so the statement stays correct whatever plan is chosen: a row
# renewed or taken over after it was picked no longer matches and is kept.
# Requests may be waiting for what an expired lease held: wake the heads of those queues.
DELETE_EXPIRED = """
WITH gone AS (
    DELETE FROM {{locks}}
    WHERE token_id = ANY(ARRAY(
        SELECT token_id
        FROM {{locks}}
        WHERE expires_at <= now() - %(grace)s * interval '1 second'
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ))
    AND expires_at <= now() - %(grace)s * interval '1 second'
    RETURNING wallet, currency
),{wake}
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woken)
""".format(wake=wake(keys="SELECT wallet, currency FROM gone", when="true"))

# Record as expired up to %(limit)s selections still marked locked whose lease ended at least
# %(grace)s seconds ago, so that listings and the dashboard filter on the stored status. Readers
# are told "expired" from the moment the lease ends anyway; this only settles it. A selection a
# client is spending or releasing right now is skipped and settled by a later pass (or not at
# all: the spend or release records its own outcome).
SETTLE_EXPIRED = """
UPDATE {selections} SET status = 'expired'
WHERE id = ANY(ARRAY(
    SELECT id FROM {selections}
    WHERE status = 'locked' AND expires_at <= now() - %(grace)s * interval '1 second'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
AND status = 'locked'
"""

# Forget the lock table's size while its statistics say it is too small to plan on: fewer pages
# than the planner itself assumes of a table it knows nothing of (10). A quiet spell ends with
# every lock released; the vacuum (or analysis) after it finds the table empty, or nearly, and
# records that. Each connection plans its statements again after such a change, and the next
# burst's plans, made on an empty table, read the whole table for each token's lock and for each
# holder's locks instead of looking them up by key, which slows every selection of the burst
# (tests/integration/test_plans.py). The plans are kept as the table fills, until its next
# analysis, after 500 changes (migration 0009) and up to autovacuum's naptime later. Cleared
# (PostgreSQL 18), the size is unknown again, as after a TRUNCATE: the planner takes the table
# for at least 10 pages and looks rows up by key, which costs a small table next to nothing.
# Clearing invalidates the plans made on the small statistics, so a burst that began before the
# pass is planned again. An analysis of the filled table records its real size, which stays.
# Run on the lock table, or on each of its partitions (``%(table)s``), by a role that may
# maintain it (its owner, or a MAINTAIN grant); another role leaves the statistics as they are.
FORGET_SMALL_STATISTICS = """
SELECT c.relname, pg_clear_relation_stats(n.nspname::text, c.relname::text)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = %(table)s::regclass AND c.reltuples >= 0 AND c.relpages < 10
  AND has_table_privilege(c.oid, 'MAINTAIN')
"""

# Before PostgreSQL 18 only a superuser may clear statistics; a TRUNCATE leaves them unknown
# the same way, and is used when the table is empty. Whether to try: the statistics are small
# and no committed row is left. Then, in one transaction, the table is locked without waiting
# (a quiet spell holds nothing on it; in use, the attempt fails at once and nobody queues
# behind it), found empty again under that lock (no row can be written meanwhile) and
# truncated. A table with a few rows left keeps its statistics on these servers.
# (``{table}``: the quoted name of the lock table or of one of its partitions.)
SMALL_AND_EMPTY = """
SELECT c.relname FROM pg_class c
WHERE c.oid = %(table)s::regclass AND c.reltuples >= 0 AND c.relpages < 10
  AND has_table_privilege(c.oid, 'TRUNCATE')
  AND NOT EXISTS (SELECT FROM {table})
"""
LOCK_WITHOUT_WAITING = "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE NOWAIT"
STILL_EMPTY = "SELECT NOT EXISTS (SELECT FROM {table})"
TRUNCATE = "TRUNCATE {table}"

# The run log and the dashboard's failed-selection log are history, not state: keep
# locks.housekeeping.HISTORY_DAYS of each, removed in the same bounded batches.
PRUNE_RUNS = """
DELETE FROM locks_housekeepingrun WHERE id = ANY(ARRAY(
    SELECT id FROM locks_housekeepingrun
    WHERE started_at < now() - %(days)s * interval '1 day' LIMIT %(limit)s))
"""
PRUNE_FAILED_SELECTIONS = """
DELETE FROM locks_failedselection WHERE id = ANY(ARRAY(
    SELECT id FROM locks_failedselection
    WHERE created_at < now() - %(days)s * interval '1 day' LIMIT %(limit)s))
"""


@functools.cache
def partition_statements(partitions: int) -> list[dict[str, str]]:
    """Return, per partition, its DELETE_SPENT, DELETE_EXPIRED and SETTLE_EXPIRED by name."""
    return [
        {
            name: template.format(locks=locks, tokens=tokens, selections=selections)
            for name, template in (
                ("spent", DELETE_SPENT),
                ("expired", DELETE_EXPIRED),
                ("settle", SETTLE_EXPIRED),
            )
        }
        for locks, tokens, selections in zip(
            partition_names("locks_tokenlock", partitions),
            partition_names("tokens_token", partitions),
            partition_names("locks_selection", partitions),
            strict=True,
        )
    ]
