"""Plans and server times of the hot statements at scale, as the service runs them.

Seeds the benchmark database with ``--wallets`` x ``--tokens-per-wallet`` tokens (default
100 x 10,000: one million; ``--reuse`` keeps them when already there), then runs ``--cycles``
selection cycles through the service layer in this process, one replica: take a unit of the
rate limits of a key and of a random wallet (as the REST path does), select a few units of that
wallet, then spend half of the selections into payment and change and release the other half,
extending every tenth first; every tenth selection is made on a wallet marked contested (its
fetch reads from the wallet's first free tokens and queues nothing). Housekeeping runs once at
the end over a batch of expired locks.

Two passes:

* a measured pass, with ``pg_stat_statements`` counting: the mean and total server time of
  every statement, named after the constant that holds it;
* one more cycle of each kind with ``auto_explain`` logging ``EXPLAIN (ANALYZE, BUFFERS)`` of
  every statement to this client, plans exactly as the prepared statements ran them.

It prints both as Markdown and writes them to ``--out`` (under ``bench/results/``, not committed).

    python -m bench.explain [--cycles 2000] [--reuse] [--out bench/results/explain.md]

It uses the benchmark database (``sherdlock_bench``) on the server of ``DATABASE_URL``, or on
the embedded server when that is unset. Nothing here is asserted; it is for reading.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import sys
from pathlib import Path

from bench import database, seeding

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "explain-"
CURRENCY = "USD"
# Where the statements live: every module-level string constant of these modules is a name a
# statement can be reported by.
# The modules whose statements are named in the report, and the prefix of those names.
STATEMENT_MODULES = {
    "locks.sql.locking": "locking",
    "locks.sql.lifecycle": "lifecycle",
    "locks.sql.waiting": "waiting",
    "locks.sql.housekeeping": "housekeeping",
    "clients.sql": "clients.sql",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.explain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--wallets", type=int, default=100)
    parser.add_argument("--tokens-per-wallet", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the seeded tokens when the database already holds them",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "explain.md")
    return parser.parse_args(argv)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def statement_names() -> dict[str, str]:
    """Map the text each statement is sent as (``$n`` placeholders) to its constant's name."""
    import importlib

    from common import db

    names: dict[str, str] = {}
    for module_name, prefix in STATEMENT_MODULES.items():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if isinstance(value, str) and name.isupper() and "SELECT" in value.upper():
                names[_normal(db.native(value)[0])] = f"{prefix}.{name}"
        for name, value in vars(module).items():  # statement tables (dicts/tuples of them)
            for index, item in _items(value):
                if isinstance(item, str) and "SELECT" in item.upper():
                    names.setdefault(_normal(db.native(item)[0]), f"{prefix}.{name}[{index}]")
    return names


def _items(value: object):
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, (tuple, list)):
        return list(enumerate(value))
    return []


def _normal(text: str) -> str:
    return " ".join(text.split())


def seed(args: argparse.Namespace) -> None:
    from django.db import connection

    expected = args.wallets * args.tokens_per_wallet
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM tokens_token WHERE tx_id = 'bench-seed' AND wallet LIKE %s",
            [PREFIX + "%"],
        )
        present = cursor.fetchone()[0]
    if args.reuse and present == expected:  # the seed's own tokens; spends add others
        say(f"reusing the {present:,} tokens already seeded")
    else:
        say(f"seeding {expected:,} tokens")
        seeding.seed_generated(PREFIX, args.wallets, args.tokens_per_wallet, CURRENCY, args.seed)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE locks_tokenlock, locks_selection, locks_failedselection")
        cursor.execute("VACUUM ANALYZE tokens_token")


class Cycles:
    """Select, then spend or release, through the service layer."""

    def __init__(self, wallets: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.wallets = wallets
        self.count = 0
        self.last_wallet = ""

    def one(
        self, kind: str | None = None, wallet: str | None = None, contested: bool = False
    ) -> str:
        from clients import throttling
        from locks import replica, services
        from sherdlock import WalletKey
        from tokens.services import TokenSpec

        self.count += 1
        tx_id = f"explain-{os.getpid()}-{self.count}"
        wallet = wallet or f"{PREFIX}{self.rng.randrange(self.wallets)}"
        self.last_wallet = wallet
        if contested:
            # Two refusals in a row make a wallet contested (sherdlock.cache): its queue is
            # dropped and its fetch reads from the wallet's front.
            replica.get_selector().cache.tried(WalletKey(wallet, CURRENCY), 2, 2)
        # What the REST path adds to a selection: the rolling rate limits of the key and the
        # wallet, at their defaults, taken by the statement that locks.
        rates = throttling.configured_rates()
        buckets = {
            "selections_per_key:explain": rates["selections_per_key"],
            f"selections_per_wallet:{wallet}": rates["selections_per_wallet"],
        }
        with throttling.charging(buckets):
            selection, _ = services.select_tokens(tx_id, wallet, CURRENCY, self.rng.randint(1, 30))
        kind = kind or ("spend" if self.count % 2 else "release")
        if self.count % 10 == 0 or kind == "extend":
            services.extend_selection(tx_id, 30)
        if kind in ("spend", "extend"):
            total = int(selection.total)
            pay = self.rng.randint(1, total)
            outputs = [
                TokenSpec(tx_id, 0, f"{PREFIX}{self.rng.randrange(self.wallets)}", CURRENCY, pay)
            ]
            if total > pay:
                outputs.append(TokenSpec(tx_id, 1, wallet, CURRENCY, total - pay))
            services.spend_selection(tx_id, outputs)
        else:
            services.release_selection(tx_id)
        return kind


def server_times(names: dict[str, str]) -> list[dict]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("""
            SELECT query, calls, mean_exec_time, total_exec_time, rows,
                   shared_blks_hit + shared_blks_read, shared_blks_dirtied, wal_records
            FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database
                                                  WHERE datname = current_database())
            ORDER BY total_exec_time DESC""")
        rows = cursor.fetchall()
    found = []
    for query, calls, mean, total, nrows, blocks, dirtied, wal in rows:
        name = names.get(_normal(query))
        if name is None:
            continue
        found.append(
            {
                "statement": name,
                "calls": calls,
                "mean_ms": mean,
                "total_ms": total,
                "rows_per_call": nrows / calls,
                "blocks_per_call": blocks / calls,
                "dirtied_per_call": dirtied / calls,
                "wal_per_call": wal / calls,
            }
        )
    return found


# auto_explain's text: "duration: ... plan:", "Query Text: <statement, many lines>", then the
# plan, whose first line is the root node with its cost and actual figures.
ROOT_NODE = re.compile(r"\(cost=[^)]*\) \(actual ")


def split_plan(message: str) -> tuple[str, str, str] | None:
    """Return (duration line, statement text, plan) of one auto_explain message."""
    lines = message.split("\n")
    for number, line in enumerate(lines):
        if ROOT_NODE.search(line):
            head = "\n".join(lines[:number])
            duration, _, query = head.partition("Query Text:")
            query, _, parameters = query.partition("\nQuery Parameters:")
            plan = "\n".join(lines[number:]).rstrip()
            if parameters.strip():
                plan = f"parameters: {parameters.strip()}\n{plan}"
            return duration.strip(), query.strip(), plan
    return None


def explained(names: dict[str, str], cycles: Cycles) -> list[tuple[str, str, str]]:
    """Run one cycle of each kind with auto_explain on; return (situation, name, plan)."""
    from django.db import connection

    from locks import replica
    from locks.housekeeping import run_housekeeping

    connection.ensure_connection()
    raw = connection.connection
    notices: list[str] = []

    def collect(diagnostic) -> None:
        notices.append(diagnostic.message_primary or "")

    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for setting in (
            "log_analyze",
            "log_buffers",
            "log_timing",
            "log_verbose",
            "log_settings",
            "log_wal",
        ):
            cursor.execute(
                f"SET auto_explain.{setting} = %s",
                ["off" if setting in ("log_verbose", "log_settings") else "on"],
            )
        cursor.execute("SET auto_explain.log_min_duration = 0")
        cursor.execute("SET client_min_messages = log")
    raw.add_notice_handler(collect)
    plans: list[tuple[str, str, str]] = []

    def record(situation: str) -> None:

        for message in notices:
            parts = split_plan(message)
            if parts is None:
                continue
            duration, query, plan = parts
            name = names.get(_normal(query))
            if name is not None:
                plans.append((situation, name, f"{duration}\n{plan}"))
        notices.clear()

    try:
        replica.reset()  # an empty cache: the selection fetches
        cycles.one("spend")
        record("select with an empty cache, then spend")
        cycles.one("release", wallet=cycles.last_wallet)
        record("select from the cache (same wallet), then release")
        cycles.one("extend")
        record("select, extend, spend")
        cycles.one("release", contested=True)
        record("select on a contested wallet (a fetch from its front), then release")
        with connection.cursor() as cursor:
            cursor.execute("UPDATE locks_tokenlock SET expires_at = now() - interval '1 hour'")
        run_housekeeping(batch_size=500, max_batches=2, grace_seconds=0)
        record("housekeeping")
    finally:
        raw.remove_notice_handler(collect)
        with connection.cursor() as cursor:
            cursor.execute("RESET client_min_messages")
            cursor.execute("SET auto_explain.log_min_duration = -1")
    return plans


def markdown(args: argparse.Namespace, times: list[dict], plans: list[tuple[str, str, str]]) -> str:
    lines = [
        f"Measured by `python -m bench.explain --cycles {args.cycles}` on "
        f"{args.wallets * args.tokens_per_wallet:,} tokens ({args.wallets} wallets x "
        f"{args.tokens_per_wallet:,}), PostgreSQL {database.server_version()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, one replica.",
        "",
        "| statement | calls | mean ms | total ms | rows/call | buffers/call | dirtied/call "
        "| WAL records/call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in times:
        lines.append(
            f"| `{row['statement']}` | {row['calls']} | {row['mean_ms']:.3f} | "
            f"{row['total_ms']:.0f} | {row['rows_per_call']:.1f} | "
            f"{row['blocks_per_call']:.1f} | {row['dirtied_per_call']:.1f} | "
            f"{row['wal_per_call']:.1f} |"
        )
    for situation, name, plan in plans:
        lines += ["", f"#### `{name}` ({situation})", "", "```", plan, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    say(f"database {args.database}: migrating")
    with database.django_on(args.database):
        from django.db import connection

        seed(args)
        names = statement_names()
        cycles = Cycles(args.wallets, args.seed)
        with connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        # Warm: prepared statements (pg_stat_statements then keeps each statement's own text,
        # which names it; a first run unprepared would leave its constants replaced), caches.
        for number in range(50):
            cycles.one(contested=number % 10 == 9)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_statements_reset()")
        say(f"measuring {args.cycles} cycles")
        for number in range(args.cycles):
            cycles.one(contested=number % 10 == 9)
        times = server_times(names)
        plans = explained(names, cycles)
    text = markdown(args, times, plans)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    say(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
