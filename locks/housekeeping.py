"""Housekeeping of the lock table: remove expired leases and the locks of spent tokens.

It also removes rate-limit buckets that have been idle long enough to be full again
(``clients.throttling.prune_idle``), and old history. The statements are in
``locks/sql/housekeeping.py``.

Removing a lock row never changes who may lock a token: an expired row is already free to be
taken over (the store's INSERT ... ON CONFLICT replaces it under a new fence), and a spent
token can never be locked again (the store checks ``spent_at`` under a row lock). Housekeeping
only keeps the table, its index and every anti-join over it small, so it may run late, run
twice or be skipped without harm.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import psycopg
from django.db import DEFAULT_DB_ALIAS, Error, connections
from django.db.models.functions import Now

from clients.throttling import prune_idle
from common import db, sessions
from common.knobs import knobs
from locks.metrics import HOUSEKEEPING_DELETED, HOUSEKEEPING_LAST_RUN
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

# Spent first, so that a spent token's lock is counted as "spent" even when its lease has also
# run out by the time housekeeping gets to it.
PASSES = (("spent", sql.DELETE_SPENT), ("expired", sql.DELETE_EXPIRED))
# Counted like the lock passes, in the run record and the deleted-rows metric.
BUCKETS = "rate_buckets"

Progress = Callable[[str, int], None]


def _try_guard(connection) -> Callable[[], None] | None:
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
            taken = db.one(session.execute(sql.TRY_GUARD, [GUARD_KEY]))[0]
        except BaseException:
            session.close()
            raise
        if taken:
            return functools.partial(_release_session_guard, session)
        session.close()
        return None
    with connection.cursor() as cursor:
        cursor.execute(sql.TRY_GUARD, [GUARD_KEY])
        taken = bool(cursor.fetchone()[0])
    return functools.partial(_release_guard, connection) if taken else None


def _release_session_guard(session: psycopg.Connection) -> None:
    # Unlocked first: a session's locks go when its server process has exited, which may be a
    # moment after the close, and a housekeeper starting then would skip for nothing.
    try:
        session.execute(sql.RELEASE_GUARD, [GUARD_KEY])
    except psycopg.Error:
        logger.warning(
            "could not release the housekeeping guard; closing its session", exc_info=True
        )
    finally:
        session.close()


def _release_guard(connection) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql.RELEASE_GUARD, [GUARD_KEY])
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


def _in_batches(
    connection, statement: str, params: dict[str, object], batch_size: int, max_batches: int
) -> int:
    """Run a bounded statement until it affects fewer rows than a batch; count them."""
    total = 0
    for _ in range(max_batches):
        with connection.cursor() as cursor:
            cursor.execute(statement, {**params, "limit": batch_size})
            total += cursor.rowcount
            if cursor.rowcount < batch_size:
                break
    return total


def _prune_history(connection, batch_size: int, max_batches: int) -> None:
    days = knobs().housekeeping_history_days
    for statement in (sql.PRUNE_RUNS, sql.PRUNE_FAILED_SELECTIONS):
        for _ in range(max_batches):
            with connection.cursor() as cursor:
                cursor.execute(statement, {"days": days, "limit": batch_size})
                if cursor.rowcount < batch_size:
                    break


def _settings(batch_size, max_batches, grace_seconds) -> tuple[int, int, float]:
    options = knobs()
    batch_size = int(options.housekeeping_batch_size if batch_size is None else batch_size)
    max_batches = int(options.housekeeping_max_batches if max_batches is None else max_batches)
    grace = float(options.housekeeping_grace_seconds if grace_seconds is None else grace_seconds)
    if batch_size < 1 or max_batches < 1:
        raise ValueError("batch_size and max_batches must be positive")
    if grace < 0:
        raise ValueError("grace_seconds must not be negative")
    return batch_size, max_batches, grace


def run_housekeeping(
    batch_size: int | None = None,
    max_batches: int | None = None,
    grace_seconds: float | None = None,
    *,
    progress: Progress | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> HousekeepingRun:
    """Remove expired locks, spent tokens' locks and idle rate-limit buckets; record the pass.

    Each kind is removed by at most ``max_batches`` statements of at most ``batch_size`` rows,
    each its own short transaction when called outside ``transaction.atomic`` (as the task and
    the command do); a backlog is finished by the next passes. Unset arguments come from
    the knobs (``common.knobs``). If another housekeeper holds the guard, record a skipped run and
    return at once. ``progress(kind, removed)`` is called after every batch.
    """
    batch_size, max_batches, grace = _settings(batch_size, max_batches, grace_seconds)
    connection = connections[using]
    runs = HousekeepingRun.objects.using(using)
    release_guard = _try_guard(connection)
    if release_guard is None:
        run = runs.create(skipped=True, finished_at=Now())
        run.refresh_from_db()
        logger.info("housekeeping skipped: another housekeeper holds the guard")
        return run

    run = runs.create()
    removed = dict.fromkeys((*(kind for kind, _ in PASSES), BUCKETS), 0)
    batches = settled = 0
    started = time.monotonic()
    completed = False

    def execute(statement: str) -> int:
        with connection.cursor() as cursor:
            cursor.execute(statement, {"grace": grace, "limit": batch_size})
            # A statement that does more than delete answers its count as its first column.
            return cursor.fetchone()[0] if cursor.description else cursor.rowcount

    passes = [(kind, functools.partial(execute, statement)) for kind, statement in PASSES]
    passes.append((BUCKETS, functools.partial(prune_idle, batch_size, using=using)))
    try:
        for kind, delete_batch in passes:
            for _ in range(max_batches):
                count = delete_batch()
                batches += 1
                removed[kind] += count
                HOUSEKEEPING_DELETED.labels(kind=kind).inc(count)
                if progress is not None:
                    progress(kind, count)
                if count < batch_size:  # nothing left that is not being worked on
                    break
        settled = _in_batches(
            connection, sql.SETTLE_EXPIRED, {"grace": grace}, batch_size, max_batches
        )
        # Waiters whose request died with its process: they stopped counting at their
        # deadline, now their rows go.
        _in_batches(connection, waiting_sql.PRUNE, {"grace": grace}, batch_size, max_batches)
        _prune_history(connection, batch_size, max_batches)
        completed = True
    finally:
        try:
            # Partial counts are kept on failure; finished_at stays empty to show it.
            runs.filter(pk=run.pk).update(
                expired_removed=removed["expired"],
                spent_removed=removed["spent"],
                buckets_removed=removed[BUCKETS],
                finished_at=Now() if completed else None,
            )
        finally:
            release_guard()

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
        batches,
        settled,
        time.monotonic() - started,
    )
    run.refresh_from_db()
    return run
