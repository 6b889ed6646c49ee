"""Lock random unspent tokens in bulk, as selections would, for demos and scale benchmarks."""

from __future__ import annotations

import sys
import time
import uuid

from django.core.management.base import CommandError, CommandParser
from django.db import connection, transaction
from tqdm import tqdm

from common.commands import DatabaseCommand
from locks.sql.seeding import LOCK_CHUNK, PICK
from sherdlock.strategies import MAX_TOKENS

CHUNK = 20_000


class Command(DatabaseCommand):
    help = "Lock N random unspent tokens under seeded selections (live or expired leases)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--count", type=int, default=1000, help="tokens to lock")
        parser.add_argument("--ttl-seconds", type=float, default=60.0, help="lease length")
        parser.add_argument(
            "--expired-fraction",
            type=float,
            default=0.2,
            help="share of selections whose lease has already expired",
        )
        parser.add_argument(
            "--tokens-per-tx",
            type=int,
            default=4,
            help=f"tokens per seeded selection (one spender tx id each; at most {MAX_TOKENS})",
        )
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    def handle(self, *args, **options) -> None:
        count, ttl = options["count"], options["ttl_seconds"]
        fraction, per_tx = options["expired_fraction"], options["tokens_per_tx"]
        if count < 1 or per_tx < 1:
            raise CommandError("--count and --tokens-per-tx must be at least 1")
        if per_tx > MAX_TOKENS:
            # No selection locks more tokens: its total column is sized for no more.
            raise CommandError(f"--tokens-per-tx must be at most {MAX_TOKENS}")
        if ttl <= 0:
            raise CommandError("--ttl-seconds must be positive")
        if not 0 <= fraction <= 1:
            raise CommandError("--expired-fraction must be between 0 and 1")
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(PICK, {"count": count})
            ids = [row[0] for row in cursor.fetchall()]
        if len(ids) < count:
            self.stderr.write(f"only {len(ids)} unspent, unlocked tokens: locking those")
        prefix = f"seed-{uuid.uuid4().hex[:12]}-"  # fresh tx ids per run: re-runs never collide
        locked = 0
        with tqdm(
            total=len(ids),
            unit="lock",
            unit_scale=True,
            disable=options["no_progress"],
            desc="seeding locks",
            file=sys.stderr,
        ) as bar:
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                # One transaction per chunk: progress stays visible and a selection never
                # exists without its locks.
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute(
                        LOCK_CHUNK,
                        {
                            "ids": chunk,
                            "per_tx": per_tx,
                            "ttl": ttl,
                            "expired_fraction": fraction,
                            "prefix": f"{prefix}{start // CHUNK}-",
                        },
                    )
                    locked += cursor.rowcount
                bar.update(len(chunk))
        elapsed = time.monotonic() - started
        self.stdout.write(
            self.style.SUCCESS(
                f"locked {locked} tokens in {elapsed:.1f}s "
                f"({locked / max(elapsed, 1e-9):,.0f} locks/s)"
            )
        )
