"""Real Celery beat (DatabaseScheduler) and a real worker remove expired locks on schedule."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import broker
from locks.models import HousekeepingRun, TokenLock
from tests.factories import make_lock, make_token
from tests.helpers.processes import ROOT

WAIT = 60.0
SUCCEEDED = re.compile(r"Task locks\.housekeeping\[[^\]]+\] succeeded in [^:]+: (.*)")


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", *argv],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen) -> None:
    """Ask for a warm shutdown, then kill the whole process group (prefork children too)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=15)


def schedule_every_second() -> None:
    """Point the periodic task the migration created (recreated if flushed) at a 1 s interval."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.update_or_create(
        name="Lock housekeeping",
        defaults={
            "task": "locks.housekeeping",
            "interval": every,
            "enabled": True,
            "expire_seconds": 30,
        },
    )


@pytest.mark.timeout(180)
def test_beat_schedules_housekeeping_and_the_worker_removes_expired_locks(tmp_path, subprocess_env):
    stale = make_token()
    make_lock(stale, "crashed-replica", ttl=-60)
    live = make_token()
    make_lock(live, "working-replica", fence=2, ttl=600)
    schedule_every_second()

    broker_dir = tmp_path / "redis"
    redis = broker.start(broker_dir)
    env = {**subprocess_env, "CELERY_BROKER_URL": broker.url(broker_dir)}
    logs = {"worker": tmp_path / "worker.log", "beat": tmp_path / "beat.log"}
    processes = []
    try:
        processes.append(
            spawn(
                [
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    "1",
                    "--hostname",
                    f"hk-test-{os.getpid()}@%h",
                    "--without-gossip",
                    "--without-mingle",
                ],
                env,
                logs["worker"],
            )
        )
        processes.append(
            spawn(
                ["beat", "--loglevel", "INFO", "--schedule", str(tmp_path / "beat-schedule")],
                env,
                logs["beat"],
            )
        )

        def tails() -> str:
            return "\n".join(
                f"--- {name}\n{path.read_text()[-3000:]}" for name, path in logs.items()
            )

        deadline = time.monotonic() + WAIT
        while TokenLock.objects.filter(pk=stale.pk).exists():
            assert time.monotonic() < deadline, tails()
            assert all(p.poll() is None for p in processes), tails()
            time.sleep(0.2)
        # The worker logs the task's success just after the deleting transaction commits.
        while not SUCCEEDED.search(logs["worker"].read_text()):
            assert time.monotonic() < deadline, tails()
            time.sleep(0.2)
    finally:
        for process in processes:
            stop(process)
        redis.terminate()
        try:
            redis.wait(timeout=10)
        except subprocess.TimeoutExpired:
            redis.kill()

    assert list(TokenLock.objects.values_list("pk", flat=True)) == [live.pk]
    assert HousekeepingRun.objects.filter(expired_removed=1, finished_at__isnull=False).exists()
    beat_log, worker_log = logs["beat"].read_text(), logs["worker"].read_text()
    # Beat prints its scheduler class in the start-up banner.
    assert "config.beat.DatabaseScheduler" in beat_log
    assert "Sending due task Lock housekeeping (locks.housekeeping)" in beat_log
    assert "'expired': 1" in "".join(m.group(0) for m in SUCCEEDED.finditer(worker_log))
