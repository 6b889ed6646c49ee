"""Housekeeping of the lock table on a real PostgreSQL (leases and fencing: test_leases.py).

Every test commits (transactional database) so that ``now()`` moves as in production and a
second connection sees the rows.
"""

from __future__ import annotations

import importlib
import io
import logging
import time
from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY

from locks import replica
from locks.housekeeping import GUARD_KEY, pause_after, run_housekeeping
from locks.models import HousekeepingRun
from tests.factories import make_lock, make_token, make_tokens
from tests.helpers.leases import remaining
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_replica():
    replica.reset()  # each test starts with an empty token cache, built from its settings
    yield
    replica.reset()


def counter(kind: str) -> float:
    return REGISTRY.get_sample_value("sherdlock_housekeeping_deleted_total", {"kind": kind})


# -- what is removed ---------------------------------------------------------------------------


def test_expired_locks_are_removed_and_live_ones_kept():
    stale, other_stale, live = make_tokens(3)
    make_lock(stale, "crashed", ttl=-60)
    make_lock(other_stale, "gone", fence=2, ttl=-60)
    make_lock(live, "working", fence=3, ttl=60)
    run = run_housekeeping(grace_seconds=5)
    assert remaining() == {live.pk}
    assert (run.expired_removed, run.spent_removed, run.skipped) == (2, 0, False)
    assert run.finished_at is not None and run.finished_at >= run.started_at
    assert Token.objects.count() == 3  # only lock rows go, never tokens


def test_grace_keeps_locks_that_expired_moments_ago():
    token = make_token()
    make_lock(token, ttl=-2)
    assert run_housekeeping(grace_seconds=5).expired_removed == 0
    assert remaining() == {token.pk}
    assert run_housekeeping(grace_seconds=0).expired_removed == 1
    assert remaining() == set()


def test_locks_of_spent_tokens_are_purged_once_older_than_grace():
    long_spent, just_spent, unspent = make_tokens(3)
    for fence, token in enumerate((long_spent, just_spent, unspent), 1):
        make_lock(token, f"tx-{fence}", fence=fence, ttl=60)  # leases still running
    now = timezone.now()
    Token.objects.filter(pk=long_spent.pk).update(
        spent_by="tx-1", spent_at=now - timedelta(seconds=30)
    )
    Token.objects.filter(pk=just_spent.pk).update(spent_by="tx-2", spent_at=now)
    run = run_housekeeping(grace_seconds=5)
    assert (run.spent_removed, run.expired_removed) == (1, 0)
    assert remaining() == {just_spent.pk, unspent.pk}


def test_a_spent_tokens_lock_past_its_lease_goes_as_expired():
    # The spent pass reads only leases not yet past their grace (the expires_at index), so a
    # backlog of expired rows is never walked by it; the expired pass takes these, spent or not.
    spent_long_ago, spent_lately = make_tokens(2)
    make_lock(spent_long_ago, "tx-1", ttl=-60)
    make_lock(spent_lately, "tx-2", fence=2, ttl=60)
    Token.objects.filter(pk__in=[spent_long_ago.pk, spent_lately.pk]).update(
        spent_by="tx", spent_at=timezone.now() - timedelta(minutes=5)
    )
    run = run_housekeeping(grace_seconds=5)
    assert (run.spent_removed, run.expired_removed) == (1, 1)
    assert remaining() == set()


def test_each_statement_removes_at_most_a_batch():
    for token in make_tokens(5):
        make_lock(token, ttl=-60)
    batches: list[tuple[str, int]] = []
    with CaptureQueriesContext(connection) as queries:
        run = run_housekeeping(
            batch_size=2,
            max_batches=10,
            grace_seconds=0,
            progress=lambda kind, n: batches.append((kind, n)),
        )
    assert [n for kind, n in batches if kind == "expired"] == [2, 2, 1]
    deletes = [q["sql"] for q in queries if "DELETE FROM locks_tokenlock" in q["sql"]]
    assert len(deletes) == 4  # one spent batch (empty) and three expired ones
    assert all("LIMIT 2" in sql for sql in deletes)
    assert run.expired_removed == 5 and remaining() == set()


@pytest.mark.parametrize("plan", ["default", "nested loop rescanning the batch"])
def test_a_batch_stays_a_batch_whatever_the_plan(plan):
    # With these plan types off, an ``IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` batch is
    # the inner side of a nested loop, rescanned per outer row, and each rescan draws a new batch
    # (PostgreSQL then deletes all five rows in one statement).
    for token in make_tokens(5):
        make_lock(token, ttl=-60)
    settings = (
        "enable_hashjoin",
        "enable_mergejoin",
        "enable_material",
        "enable_hashagg",
        "enable_sort",
        "enable_indexscan",
        "enable_bitmapscan",
    )
    with connection.cursor() as cursor:
        if plan != "default":
            for name in settings:
                cursor.execute(f"SET {name} = off")
        try:
            first = run_housekeeping(batch_size=2, max_batches=1, grace_seconds=0)
        finally:
            for name in settings:
                cursor.execute(f"RESET {name}")
    assert first.expired_removed == 2 and len(remaining()) == 3


def test_max_batches_ends_a_pass_early_and_the_next_pass_finishes():
    for token in make_tokens(5):
        make_lock(token, ttl=-60)
    first = run_housekeeping(batch_size=2, max_batches=2, grace_seconds=0)
    assert first.expired_removed == 4 and len(remaining()) == 1
    second = run_housekeeping(batch_size=2, max_batches=2, grace_seconds=0)
    assert second.expired_removed == 1 and remaining() == set()


@pytest.mark.parametrize("duty_cycle", [0.25, 1.0])
def test_a_backlog_is_removed_at_the_duty_cycle(monkeypatch, duty_cycle):
    # Full batches (more may follow) are each followed by a pause; the batch that runs out of
    # rows is not, so a pass with nothing left to do never sleeps.
    monkeypatch.setattr("locks.housekeeping.DUTY_CYCLE", duty_cycle)
    for token in make_tokens(5):
        make_lock(token, ttl=-60)
    pauses: list[float] = []
    monkeypatch.setattr("locks.housekeeping.time.sleep", pauses.append)
    run = run_housekeeping(batch_size=2, max_batches=10, grace_seconds=0)
    assert run.expired_removed == 5
    assert len(pauses) == 2  # after the two full expired batches, not after the last one
    assert all(pause > 0 for pause in pauses) if duty_cycle < 1 else pauses == [0.0, 0.0]
    pauses.clear()
    run_housekeeping(batch_size=2, max_batches=10, grace_seconds=0)
    assert pauses == []


def test_the_pause_after_a_batch_keeps_the_housekeeper_to_its_share(monkeypatch):
    monkeypatch.setattr("locks.housekeeping.time.monotonic", lambda: 10.5)
    assert pause_after(10.0, 0.25) == pytest.approx(1.5)  # 0.5 s of work, then 1.5 s idle
    assert pause_after(10.0, 0.5) == pytest.approx(0.5)
    assert pause_after(10.0, 1.0) == 0.0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        run_housekeeping(batch_size=0)
    with pytest.raises(ValueError):
        run_housekeeping(grace_seconds=-1)


# -- single runner -----------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["session", "transaction"])
def test_a_second_housekeeper_skips_while_the_guard_is_held(db_url, level):
    token = make_token()
    make_lock(token, ttl=-60)
    with psycopg.connect(db_url, autocommit=(level == "session")) as other:
        function = "pg_advisory_lock" if level == "session" else "pg_advisory_xact_lock"
        other.execute(f"SELECT {function}(%s)", [GUARD_KEY])
        run = run_housekeeping(grace_seconds=0)
        assert run.skipped and run.finished_at is not None
        assert (run.expired_removed, run.spent_removed) == (0, 0)
        assert remaining() == {token.pk}
        out = io.StringIO()
        call_command("housekeep", stdout=out)
        assert "skipped: another housekeeper is running" in out.getvalue()
        holder = other.info.backend_pid
    holder_has_gone(db_url, holder)
    assert HousekeepingRun.objects.get(pk=run.pk).skipped
    assert not run_housekeeping(grace_seconds=0).skipped  # the holder has gone
    assert remaining() == set()


def holder_has_gone(db_url: str, pid: int, timeout: float = 10.0) -> None:
    """Wait until the closed session ``pid`` holds no advisory lock (its server process
    releases them as it exits, a moment after the client closed it)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as other:
        while other.execute(
            "SELECT 1 FROM pg_locks WHERE pid = %s AND locktype = 'advisory'", [pid]
        ).fetchone():
            assert time.monotonic() < deadline, "the closed session still holds its locks"
            time.sleep(0.01)


def guard_is_free(db_url: str) -> bool:
    with psycopg.connect(db_url, autocommit=True) as other:
        return other.execute("SELECT pg_try_advisory_lock(%s)", [GUARD_KEY]).fetchone()[0]


def test_the_guard_is_held_between_batches_while_each_delete_commits(db_url):
    for token in make_tokens(4):
        make_lock(token, ttl=-60)
    seen: list[tuple[bool, int]] = []
    with psycopg.connect(db_url, autocommit=True) as other:

        def probe(kind: str, removed: int) -> None:
            taken = other.execute("SELECT pg_try_advisory_lock(%s)", [GUARD_KEY]).fetchone()[0]
            # Another session already sees this batch's deletes: they were committed.
            left = other.execute("SELECT count(*) FROM locks_tokenlock").fetchone()[0]
            seen.append((taken, left))

        run_housekeeping(batch_size=2, grace_seconds=0, progress=probe)
    # spent (one empty batch), expired (2 + 2), then the idle rate-limit buckets (none)
    assert seen == [(False, 4), (False, 2), (False, 0), (False, 0), (False, 0)]


def test_the_guard_is_released_after_a_pass_and_after_a_failure(db_url, monkeypatch):
    run_housekeeping()
    assert guard_is_free(db_url)
    token = make_token()
    make_lock(token, ttl=-60)
    monkeypatch.setattr("locks.housekeeping.PASSES", ("expired", "spent"))
    failing = {
        "expired": "DELETE FROM locks_tokenlock WHERE expires_at < now() - %(grace)s * "
        "interval '1 second' AND %(limit)s > 0",
        "spent": "SELECT no_such_function()",
    }
    monkeypatch.setattr("locks.housekeeping.sql.partition_statements", lambda partitions: [failing])
    started = HousekeepingRun.objects.count()
    with pytest.raises(Exception, match="no_such_function"):
        run_housekeeping(grace_seconds=0)
    assert guard_is_free(db_url)
    failed = HousekeepingRun.objects.order_by("-pk")[0]
    assert HousekeepingRun.objects.count() == started + 1
    assert failed.finished_at is None and failed.expired_removed == 1  # partial counts kept


# -- what is recorded --------------------------------------------------------------------------


def test_counts_are_recorded_exported_and_logged(caplog):
    caplog.set_level(logging.INFO, logger="locks.housekeeping")
    spent, expired = make_tokens(2)
    make_lock(spent, "tx-s", ttl=60)
    Token.objects.filter(pk=spent.pk).update(
        spent_by="tx-s", spent_at=timezone.now() - timedelta(minutes=1)
    )
    make_lock(expired, "tx-e", fence=2, ttl=-60)
    before = {kind: counter(kind) for kind in ("expired", "spent")}
    started = time.time()
    run = run_housekeeping(grace_seconds=5)
    stored = HousekeepingRun.objects.get(pk=run.pk)
    assert (stored.expired_removed, stored.spent_removed, stored.skipped) == (1, 1, False)
    assert counter("expired") == before["expired"] + 1
    assert counter("spent") == before["spent"] + 1
    assert REGISTRY.get_sample_value("sherdlock_housekeeping_last_run_timestamp_seconds") >= started
    assert (
        "housekeeping removed 1 expired and 1 spent lock(s) and 0 idle rate-limit "
        "bucket(s) in 3 batch(es)"
    ) in caplog.text


def test_the_task_and_the_command_run_one_pass():
    from locks.tasks import housekeeping

    make_lock(make_token(), ttl=-60)
    assert housekeeping.name == "locks.housekeeping" and housekeeping.ignore_result
    assert housekeeping.expires and housekeeping.expires > 0
    assert housekeeping.apply().get() == {
        "expired": 1,
        "spent": 0,
        "rate_buckets": 0,
        "skipped": False,
    }
    for token in make_tokens(3):
        make_lock(token, ttl=-60)
    out = io.StringIO()
    call_command("housekeep", "--batch-size", "2", "--grace-seconds", "0", stdout=out)
    assert "expired: removed 2 (so far 2)" in out.getvalue()
    assert "removed 3 expired and 0 spent lock(s)" in out.getvalue()
    assert remaining() == set()


def test_the_migration_schedules_the_task_once_and_can_be_reversed():
    from django.apps import apps
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from locks.housekeeping import INTERVAL_SECONDS

    migration = importlib.import_module("locks.migrations.0002_housekeeping_schedule")
    PeriodicTask.objects.filter(name=migration.TASK_NAME).delete()
    with connection.schema_editor() as editor:
        migration.create_schedule(apps, editor)
        migration.create_schedule(apps, editor)  # idempotent
    task = PeriodicTask.objects.get(name="Lock housekeeping")
    assert (task.task, task.enabled) == ("locks.housekeeping", True)
    every = INTERVAL_SECONDS
    assert (task.interval.every, task.interval.period) == (every, IntervalSchedule.SECONDS)
    assert task.expire_seconds == every
    assert IntervalSchedule.objects.filter(every=every).count() == 1
    with connection.schema_editor() as editor:
        migration.remove_schedule(apps, editor)
    assert not PeriodicTask.objects.filter(name="Lock housekeeping").exists()
    assert not IntervalSchedule.objects.filter(pk=task.interval.pk).exists()


def test_history_older_than_the_retention_is_pruned(monkeypatch):
    from locks.models import FailedSelection

    monkeypatch.setattr("locks.housekeeping.HISTORY_DAYS", 7)
    old = timezone.now() - timedelta(days=8)
    recent = timezone.now() - timedelta(days=6)
    for started in (old, old, recent):
        HousekeepingRun.objects.create(started_at=started, finished_at=started)
    for created in (old, recent):
        FailedSelection.objects.create(
            created_at=created,
            tx_id="t",
            wallet="w",
            currency="USD",
            quantity=1,
            outcome="funds_locked",
        )
    run_housekeeping(batch_size=1)
    kept = HousekeepingRun.objects.exclude(pk=HousekeepingRun.objects.latest("started_at").pk)
    assert [r.started_at for r in kept] == [recent]
    assert list(FailedSelection.objects.values_list("created_at", flat=True)) == [recent]
