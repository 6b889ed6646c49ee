"""Run one housekeeping pass from the shell, for operators without Celery."""

from __future__ import annotations

from django.core.management.base import CommandError, CommandParser

from common.commands import DatabaseCommand
from locks.housekeeping import run_housekeeping


class Command(DatabaseCommand):
    help = (
        "Remove expired locks, the locks of spent tokens and idle rate-limit buckets once, "
        "in batches (what the 'Lock housekeeping' periodic task does). Defaults are "
        "locks.housekeeping's BATCH_SIZE, MAX_BATCHES and GRACE_SECONDS."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-size", type=int, default=None, help="rows per DELETE statement"
        )
        parser.add_argument(
            "--max-batches", type=int, default=None, help="statements per kind of lock in this pass"
        )
        parser.add_argument(
            "--grace-seconds",
            type=float,
            default=None,
            help="keep locks this long after they expired or were spent",
        )
        parser.add_argument(
            "--partition",
            type=int,
            default=None,
            help="only this partition (0 .. SHERDLOCK_PARTITIONS-1); default: every one",
        )

    def handle(self, *args, **options) -> None:
        totals = {"expired": 0, "spent": 0, "rate_buckets": 0}

        def progress(kind: str, removed: int) -> None:
            totals[kind] += removed
            # One line per batch that removed something; -v 2 shows empty batches too.
            if options["verbosity"] >= 2 or (options["verbosity"] >= 1 and removed):
                self.stdout.write(f"  {kind}: removed {removed} (so far {totals[kind]})")

        try:
            run = run_housekeeping(
                batch_size=options["batch_size"],
                max_batches=options["max_batches"],
                grace_seconds=options["grace_seconds"],
                progress=progress,
                partition=options["partition"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if run.skipped:
            self.stdout.write(
                self.style.WARNING(
                    "skipped: another housekeeper is running right now; nothing was removed"
                )
            )
            return
        assert run.finished_at is not None  # a pass that returns has finished; a failed one raised
        seconds = (run.finished_at - run.started_at).total_seconds()
        self.stdout.write(
            self.style.SUCCESS(
                f"removed {run.expired_removed} expired and {run.spent_removed} spent lock(s) "
                f"and {run.buckets_removed} idle rate-limit bucket(s) in {seconds:.2f}s "
                f"(housekeeping run {run.pk})"
            )
        )
