"""Load demo or benchmark tokens fast, with COPY, showing progress."""

from __future__ import annotations

import random
import sys
import time
import uuid

from django.core.management.base import CommandError, CommandParser
from django.db import connection, transaction
from tqdm import tqdm

from common.commands import DatabaseCommand
from common.rules import CURRENCY_MAX_LENGTH
from tokens import sql, supply
from tokens.models import MAX_QUANTITY

CHUNK = 50_000


class Command(DatabaseCommand):
    help = "Create unspent tokens for N wallets (COPY in chunks; about 1M tokens in seconds)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wallets", type=int, default=10, help="number of wallets")
        parser.add_argument("--tokens-per-wallet", type=int, default=100)
        parser.add_argument("--currency", default="USD")
        parser.add_argument(
            "--wallet-prefix", default="wallet-", help="wallets are named <prefix><n>, n from 0"
        )
        parser.add_argument("--min-quantity", type=int, default=1)
        parser.add_argument("--max-quantity", type=int, default=1000)
        parser.add_argument("--seed", type=int, default=None, help="random seed for quantities")
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    def handle(self, *args, **options) -> None:
        wallets, per_wallet = options["wallets"], options["tokens_per_wallet"]
        low, high = options["min_quantity"], options["max_quantity"]
        currency = options["currency"]
        if wallets < 1 or per_wallet < 1:
            raise CommandError("--wallets and --tokens-per-wallet must be at least 1")
        if not 0 < low <= high <= MAX_QUANTITY:
            raise CommandError(f"need 0 < --min-quantity <= --max-quantity <= {MAX_QUANTITY}")
        if not 0 < len(currency) <= CURRENCY_MAX_LENGTH:
            raise CommandError(f"--currency must have 1 to {CURRENCY_MAX_LENGTH} characters")
        rng = random.Random(options["seed"])
        batch = uuid.uuid4().hex[:12]  # a fresh tx id space per run: re-running never collides
        total = wallets * per_wallet
        started = time.monotonic()
        issued = 0
        with tqdm(
            total=total,
            unit="tok",
            unit_scale=True,
            disable=options["no_progress"],
            desc="seeding tokens",
            file=sys.stderr,
        ) as bar:
            rows: list[tuple[str, int, str, str, int]] = []
            for w in range(wallets):
                wallet = f"{options['wallet_prefix']}{w}"
                tx_id = f"seed-{batch}-{w}"
                for index in range(per_wallet):
                    rows.append((tx_id, index, wallet, currency, rng.randint(low, high)))
                    if len(rows) >= CHUNK:
                        issued += self._copy(rows)
                        bar.update(len(rows))
                        rows = []
            if rows:
                issued += self._copy(rows)
                bar.update(len(rows))
        elapsed = time.monotonic() - started
        self.stdout.write(
            self.style.SUCCESS(
                f"created {issued} tokens in {wallets} wallet(s) of {currency} "
                f"in {elapsed:.1f}s ({issued / max(elapsed, 1e-9):,.0f} tokens/s)"
            )
        )

    def _copy(self, rows: list[tuple[str, int, str, str, int]]) -> int:
        # One transaction per chunk keeps progress visible and memory flat; the chunk's value
        # joins the supply summary in the same transaction.
        totals: dict[str, int] = {}
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.cursor.copy(sql.COPY_TOKENS) as copy:
                for row in rows:
                    copy.write_row(row)
                    totals[row[3]] = totals.get(row[3], 0) + row[4]
            supply.add(totals)
            # Their transaction ids are in use, as an issue's are (tokens.models.TxClaim).
            cursor.execute(sql.CLAIM_ISSUE[0], ["", sorted({row[0] for row in rows})])
        return len(rows)
