"""Celery tasks of the lock table; each calls one service function."""

from __future__ import annotations

from celery import shared_task

from locks.housekeeping import INTERVAL_SECONDS, run_housekeeping


# A tick still queued after one interval is dropped: the next tick does the same work, and a
# backlog of ticks behind a busy worker would only run back to back for nothing.
@shared_task(
    name="locks.housekeeping",
    ignore_result=True,
    expires=INTERVAL_SECONDS,
)
def housekeeping() -> dict[str, object]:
    """Run one housekeeping pass."""
    run = run_housekeeping()
    return {
        "expired": run.expired_removed,
        "spent": run.spent_removed,
        "rate_buckets": run.buckets_removed,
        "skipped": run.skipped,
    }
