"""Housekeeping of the lock table: remove expired leases and the locks of spent tokens.

It also removes rate-limit buckets that have been idle long enough to be full again
(``clients.throttling.prune_idle``) and old history, and forgets statistics that say the lock
table is too small to plan on (``_forget_small_statistics``). The statements are in
``locks/sql/housekeeping.py``.

Removing a lock row never changes who may lock a token: an expired row is already free to be
taken over (the store's INSERT ... ON CONFLICT replaces it under a new fence), and a spent
token can never be locked again (the store checks ``spent_at`` under a row lock). Housekeeping
only keeps the table, its index and every anti-join over it small, so it may run late, run
twice or be skipped without harm.

With the tables partitioned by wallet (``SHERDLOCK_PARTITIONS``) a pass works partition by
partition, each under a guard of its own (``GUARD_KEY + n``): housekeepers running at once
share the partitions out, one runner per partition, and every batch stays one short statement
on one partition. The global work (rate-limit buckets, waiters, history) goes with partition 0.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import psycopg
from django.db import DEFAULT_DB_ALIAS, Error, OperationalError, connections, transaction
from django.db.models.functions import Now

from clients.throttling import prune_idle
from common import db, sessions
from common.knobs import knobs
from common.partitioning import partition_names
from locks.metrics import (
    HOUSEKEEPING_DELETED,
    HOUSEKEEPING_LAST_RUN,
    HOUSEKEEPING_STATISTICS_CLEARED,
)
from locks.models import HousekeepingRun
from locks.sql import housekeeping as sql
from locks.sql import waiting as waiting_sql

logger = logging.getLogger(__name__)

# The advisory-lock key of the single-runner guard ("sherdlhk" as a big-endian bigint). Any
# tool that must not overlap with housekeeping can take it too, at session or transaction
# level: both kinds of advisory lock on one key conflict with each other.
GUARD_KEY = int.from_bytes(b"sherdlhk", "big")
# The guard's own session, under transaction pooling, is findable in pg_stat_activity by this.
GUARD_APPLICATION_NAME = "sherdlock-housekeeping"

# A spent token's lock is "spent" while its lease runs (and for the grace after); once the lease
# is over it is an expired lock like any other and counted as one. (Statements of a partition:
# see ``locks.sql.housekeeping.partition_statements``.)
PASSES = ("spent", "expired")
# Counted like the lock passes, in the run record and the deleted-rows metric.
BUCKETS = "rate_buckets"

# Rows per DELETE: each batch is one short transaction, so a selection that meets a row being
# deleted waits for at most one batch, and the WAL of a large clean-up comes in small pieces.
BATCH_SIZE = 1000
# Statements per kind of row in one pass: a pass ends within about the beat's interval even on a
# large backlog, which the next passes finish.
MAX_BATCHES = 100
# Seconds an expired or spent lock is kept: long enough for the replicas' caches to see a spent
# token as taken, and for a holder whose clock runs a little ahead to be refused, not surprised.
GRACE_SECONDS = 5.0
# Days of housekeeping runs and failed selections kept for the admin and the dashboard.
HISTORY_DAYS = 7.0
# Seconds between passes (beat's schedule, created by a migration; re-timed in the admin). Whole
# seconds: beat's IntervalSchedule counts in integers.
INTERVAL_SECONDS = 10
# Share of its wall time a housekeeper spends in statements while a backlog lasts: after a full
# batch it sleeps (1 / DUTY_CYCLE - 1) times as long as the batch took. Expired locks never stand
# in a selection's way (a lock whose lease ran out is taken over), so a backlog can wait: at a
# twentieth the CPU, WAL and I/O of a large clean-up go to selections first.
DUTY_CYCLE = 0.05

Progress = Callable[[str, int], None]


def guard_key(partition: int) -> int:
    """Return the advisory-lock key of the guard of ``partition`` (0: ``GUARD_KEY`` itself)."""
    return GUARD_KEY + partition


def _try_guard(connection, key: int = GUARD_KEY) -> Callable[[], None] | None:
    """Take the guard; return what releases it, or None if another housekeeper holds it."""
    # Why a session-level lock rather than pg_try_advisory_xact_lock: a transaction-level lock
    # lives only as long as the transaction that took it. Holding it for the whole pass would
    # turn the pass into one long transaction whose deleted rows stay row-locked until commit
    # (selections taking over those tokens would wait) and which holds back vacuum. Taking it
    # afresh for each batch would keep the deletes short but let a second housekeeper slip in
    # between two batches, so "single runner" would hold only per statement. A session lock is
    # held by the connection across any number of short autocommit deletes, and the server
    # drops it if the process dies. It must be released explicitly (see _release_guard), and
    # it needs a real session: behind a transaction-pooling proxy the lock would stay with
    # whichever server session ran the statement, lent to other clients afterwards. There the
    # guard is taken on a session of its own to the database itself (common.sessions), kept
    # for the pass and closed after it, which drops the lock.
    if sessions.transaction_pooled():
        session = sessions.connect(connection.alias, application_name=GUARD_APPLICATION_NAME)
        try:
            taken = db.one(session.execute(sql.TRY_GUARD, [key]))[0]
        except BaseException:
            session.close()
            raise
        if taken:
            return functools.partial(_release_session_guard, session, key)
        session.close()
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql.TRY_GUARD, [key])
        taken = bool(cursor.fetchone()[0])
    return functools.partial(_release_guard, connection, key) if taken else None


def _release_session_guard(session: psycopg.Connection, key: int) -> None:
    # Unlocked first: a session's locks go when its server process has exited, which may be a
    # moment after the close, and a housekeeper starting then would skip for nothing.
    try:
        session.execute(sql.RELEASE_GUARD, [key])
    except psycopg.Error:
        logger.warning(
            "could not release the housekeeping guard; closing its session", exc_info=True
        )
    finally:
        session.close()


def _release_guard(connection, key: int) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql.RELEASE_GUARD, [key])
            released = cursor.fetchone()[0]
    except Error:
        # Django keeps connections open between tasks, so a guard left behind would make every
        # other housekeeper skip until this connection is recycled. Ending the session is the
        # one sure way to drop a session lock.
        logger.warning(
            "could not release the housekeeping guard; closing the connection", exc_info=True
        )
        connection.close()
        return
    if not released:
        logger.warning("the housekeeping guard was no longer held when released")


def pause_after(started: float, duty_cycle: float) -> float:
    """Return how long to sleep after a full batch begun at ``started`` (``time.monotonic``).

    The housekeeper then spends ``duty_cycle`` of its wall time in statements while a backlog
    lasts (``DUTY_CYCLE``); a batch that ran out of rows is never followed by one.
    """
    return (time.monotonic() - started) * (1.0 / duty_cycle - 1.0)


def _in_batches(
    connection, statement: str, params: dict[str, object], batch_size: int, max_batches: int
) -> int:
    """Run a bounded statement until it affects fewer rows than a batch; count them."""
    total = 0
    for _ in range(max_batches):
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(statement, {**params, "limit": batch_size})
            total += cursor.rowcount
            if cursor.rowcount < batch_size:
                break
        time.sleep(pause_after(started, DUTY_CYCLE))
    return total


def _prune_history(connection, batch_size: int, max_batches: int) -> None:
    days = HISTORY_DAYS
    for statement in (sql.PRUNE_RUNS, sql.PRUNE_FAILED_SELECTIONS):
        for _ in range(max_batches):
            with connection.cursor() as cursor:
                cursor.execute(statement, {"days": days, "limit": batch_size})
                if cursor.rowcount < batch_size:
                    break


def _forget_small_statistics(connection, table: str) -> None:
    """Clear ``table``'s statistics if they say it is too small to plan on (a quiet spell's).

    See ``locks.sql.housekeeping.FORGET_SMALL_STATISTICS``; before PostgreSQL 18, an empty
    table is truncated instead (``_truncate_if_empty``).
    """
    if clears_statistics(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql.FORGET_SMALL_STATISTICS, {"table": table})
            cleared = cursor.rowcount
    else:
        cleared = _truncate_if_empty(connection, table)
    if cleared:
        HOUSEKEEPING_STATISTICS_CLEARED.inc(cleared)
        logger.info(
            "housekeeping cleared the statistics of %s: they said it was nearly empty", table
        )


def clears_statistics(connection) -> bool:
    """Whether the server has ``pg_clear_relation_stats`` (PostgreSQL 18 or later)."""
    return connection.pg_version >= 180000


def _truncate_if_empty(connection, table: str) -> int:
    """Truncate ``table`` if its statistics are small and it is empty; return 1 if it was.

    ``locks.sql.housekeeping.SMALL_AND_EMPTY``: the lock is taken without waiting, and a
    table in use is left alone.
    """
    quoted = connection.ops.quote_name(table)
    with connection.cursor() as cursor:
        cursor.execute(sql.SMALL_AND_EMPTY.format(table=quoted), {"table": table})
        if cursor.fetchone() is None:
            return 0
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(sql.LOCK_WITHOUT_WAITING.format(table=quoted))
            cursor.execute(sql.STILL_EMPTY.format(table=quoted))
            if not cursor.fetchone()[0]:
                return 0
            cursor.execute(sql.TRUNCATE.format(table=quoted))
    except OperationalError as exc:
        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            return 0
        raise
    return 1


def _settings(batch_size, max_batches, grace_seconds) -> tuple[int, int, float]:
    batch_size = int(BATCH_SIZE if batch_size is None else batch_size)
    max_batches = int(MAX_BATCHES if max_batches is None else max_batches)
    grace = float(GRACE_SECONDS if grace_seconds is None else grace_seconds)
    if batch_size < 1 or max_batches < 1:
        raise ValueError("batch_size and max_batches must be positive")
    if grace < 0:
        raise ValueError("grace_seconds must not be negative")
    return batch_size, max_batches, grace


def _housekeep_partition(
    connection,
    number: int,
    partitions: int,
    limits: tuple[int, int, float],
    removed: dict[str, int],
    counts: dict[str, int],
    progress: Progress | None,
) -> None:
    """Run the passes of partition ``number`` (with the global ones on partition 0)."""
    batch_size, max_batches, grace = limits
    statements = sql.partition_statements(partitions)[number]

    def execute(statement: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute(statement, {"grace": grace, "limit": batch_size})
            # A statement that does more than delete answers its count as its first column.
            return cursor.fetchone()[0] if cursor.description else cursor.rowcount

    passes = [(kind, functools.partial(execute, statements[kind])) for kind in PASSES]
    if number == 0:
        passes.append((BUCKETS, functools.partial(prune_idle, batch_size, using=connection.alias)))
    for kind, delete_batch in passes:
        for _ in range(max_batches):
            started = time.monotonic()
            count = delete_batch()
            counts["batches"] += 1
            removed[kind] += count
            HOUSEKEEPING_DELETED.labels(kind=kind).inc(count)
            if progress is not None:
                progress(kind, count)
            if count < batch_size:  # nothing left that is not being worked on
                break
            time.sleep(pause_after(started, DUTY_CYCLE))
    _forget_small_statistics(connection, partition_names("locks_tokenlock", partitions)[number])
    counts["settled"] += _in_batches(
        connection, statements["settle"], {"grace": grace}, batch_size, max_batches
    )
    if number == 0:
        # Waiters whose request died with its process: they stopped counting at their
        # deadline, now their rows go.
        _in_batches(connection, waiting_sql.PRUNE, {"grace": grace}, batch_size, max_batches)
        _prune_history(connection, batch_size, max_batches)


def run_housekeeping(
    batch_size: int | None = None,
    max_batches: int | None = None,
    grace_seconds: float | None = None,
    *,
    progress: Progress | None = None,
    using: str = DEFAULT_DB_ALIAS,
    partition: int | None = None,
) -> HousekeepingRun:
    """Remove expired locks, spent tokens' locks and idle rate-limit buckets; record the pass.

    Each kind is removed by at most ``max_batches`` statements of at most ``batch_size`` rows,
    each its own short transaction when called outside ``transaction.atomic`` (as the task and
    the command do); a backlog is finished by the next passes. Unset arguments come from the
    module's constants (``BATCH_SIZE``, ``MAX_BATCHES``, ``GRACE_SECONDS``). Partitions (all, or
    only ``partition``) whose guard another housekeeper holds are left to it; if it holds every
    one, record a skipped run and return.
    ``progress(kind, removed)`` is called after every batch.
    """
    batch_size, max_batches, grace = _settings(batch_size, max_batches, grace_seconds)
    partitions = knobs().partitions
    if partition is not None and not 0 <= partition < partitions:
        raise ValueError(f"partition must be between 0 and {partitions - 1}")
    connection = connections[using]
    runs = HousekeepingRun.objects.using(using)
    removed = dict.fromkeys((*PASSES, BUCKETS), 0)
    counts = {"batches": 0, "settled": 0}
    started = time.monotonic()
    run: HousekeepingRun | None = None
    for number in range(partitions) if partition is None else (partition,):
        release_guard = _try_guard(connection, guard_key(number))
        if release_guard is None:
            logger.info("housekeeping of partition %d skipped: another housekeeper has it", number)
            continue
        if run is None:
            run = runs.create()
        limits = (batch_size, max_batches, grace)
        try:
            _housekeep_partition(connection, number, partitions, limits, removed, counts, progress)
        finally:
            try:
                # Partial counts are kept on failure; finished_at stays empty to show it.
                runs.filter(pk=run.pk).update(
                    expired_removed=removed["expired"],
                    spent_removed=removed["spent"],
                    buckets_removed=removed[BUCKETS],
                )
            finally:
                release_guard()
    if run is None:
        run = runs.create(skipped=True, finished_at=Now())
        run.refresh_from_db()
        logger.info("housekeeping skipped: another housekeeper holds the guard")
        return run
    runs.filter(pk=run.pk).update(finished_at=Now())
    HOUSEKEEPING_LAST_RUN.set_to_current_time()
    # Quiet when idle: a pass runs every few seconds, and the run table records it anyway.
    level = logging.INFO if any(removed.values()) else logging.DEBUG
    logger.log(
        level,
        "housekeeping removed %d expired and %d spent lock(s) and %d idle "
        "rate-limit bucket(s) in %d batch(es), settled %d expired selection(s), %.3f s",
        removed["expired"],
        removed["spent"],
        removed[BUCKETS],
        counts["batches"],
        counts["settled"],
        time.monotonic() - started,
    )
    run.refresh_from_db()
    return run
