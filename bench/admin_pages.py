"""Measure the operators' admin pages at scale: server time and query count of each page.

Seeds the benchmark database with ``--wallets`` x ``--tokens-per-wallet`` tokens (default
100 x 10,000: one million) with ``seed_tokens``, locks ``--locks`` of them (default 100,000, a
fifth with expired leases, the rest with 600 s leases) with ``seed_locks``, records
``--failures`` failed selections spread over the last hour, vacuums and analyses, then
requests every admin page ``--repeat`` times as a logged-in superuser through Django's test
client, in this process (no HTTP, no network), and prints the median server time and the
query count of each page.

    python -m bench.admin_pages [--repeat 3] [--reuse] [--out bench/results/admin_pages.json]

It uses its own database (``sherdlock_bench``, ``--database``) on the server of
``DATABASE_URL``, or on the embedded server when that is unset, and empties it first unless
``--reuse`` finds its tokens already seeded at the requested size (locks, selections and
failed selections are seeded afresh on every run). Each page is requested once more before the
measured requests, to warm caches as a running server's would be. Timings are for reading,
never asserted: the test suite asserts query counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

from bench import database

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
USERNAME = "bench-operator"
# Every table the seeding writes, emptied first; a table this version of the schema lacks is
# skipped, so the same script measures older code too.
TABLES = tuple(
    dict.fromkeys(
        (*database.TABLES, "locks_lockaudit", "locks_housekeepingrun", "tokens_currencysupply")
    )
)

# (name, path, query parameters); "{wallet}", "{tx_id}", "{token}", "{spender}" are filled in
# from the seeded data.
# Leases of the seeded locks: long enough that the live ones are still live while measured.
LEASE_SECONDS = 600

PAGES = [
    ("index", "/admin/", {}),
    ("dashboard", "/admin/dashboard/", {}),
    ("lock list", "/admin/locks/tokenlock/", {}),
    ("lock list, live", "/admin/locks/tokenlock/", {"state": "live"}),
    ("lock list, expired", "/admin/locks/tokenlock/", {"state": "expired"}),
    ("lock list, currency", "/admin/locks/tokenlock/", {"currency": "USD"}),
    ("lock list, wallet", "/admin/locks/tokenlock/", {"wallet": "{wallet}"}),
    ("lock search, wallet", "/admin/locks/tokenlock/", {"q": "{wallet}"}),
    ("lock search, spender", "/admin/locks/tokenlock/", {"q": "{spender}"}),
    ("lock search, token", "/admin/locks/tokenlock/", {"q": "{token}"}),
    ("token list", "/admin/tokens/token/", {}),
    ("token list, unspent", "/admin/tokens/token/", {"spent": "no"}),
    ("token list, locked", "/admin/tokens/token/", {"locked": "yes"}),
    ("token search, wallet", "/admin/tokens/token/", {"q": "{wallet}"}),
    ("token search, tx_id:index", "/admin/tokens/token/", {"q": "{token}"}),
    ("selection list", "/admin/locks/selection/", {}),
    ("selection list, live", "/admin/locks/selection/", {"lease": "live"}),
    ("selection search, wallet", "/admin/locks/selection/", {"q": "{wallet}"}),
    ("failed selection list", "/admin/locks/failedselection/", {}),
    ("failed selection search", "/admin/locks/failedselection/", {"q": "{wallet}"}),
    ("wallet page", "/admin/wallets/{wallet}/", {}),
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wallets", type=int, default=100)
    parser.add_argument("--tokens-per-wallet", type=int, default=10_000)
    parser.add_argument("--locks", type=int, default=100_000)
    parser.add_argument("--expired-fraction", type=float, default=0.2)
    parser.add_argument(
        "--failures", type=int, default=5_000, help="failed selections recorded over the last hour"
    )
    parser.add_argument("--repeat", type=int, default=3, help="measured requests per page")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the tokens if the database already holds this many",
    )
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    parser.add_argument("--out", type=Path, default=RESULTS / "admin_pages.json")
    return parser.parse_args(argv)


def say(message: str) -> None:
    print(f"[admin-bench] {message}", file=sys.stderr, flush=True)


def existing(tables: tuple[str, ...]) -> list[str]:
    """Return those of ``tables`` that exist in the database."""
    from django.db import connection

    present = set(connection.introspection.table_names())
    return [table for table in tables if table in present]


def seeded_tokens() -> int:
    from tokens.models import Token

    return Token.objects.count()


def truncate(tables: tuple[str, ...]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(existing(tables))} RESTART IDENTITY CASCADE")


def seed_tokens(args: argparse.Namespace) -> None:
    """Empty every table, then issue the tokens with ``seed_tokens``."""
    from django.core.management import call_command

    truncate(TABLES)
    started = time.monotonic()
    call_command(
        "seed_tokens",
        wallets=args.wallets,
        tokens_per_wallet=args.tokens_per_wallet,
        currency="USD",
        seed=1,
        no_progress=True,
        stdout=StringIO(),
    )
    say(f"tokens seeded in {time.monotonic() - started:.1f} s")


def seed_locks(args: argparse.Namespace) -> None:
    """Replace locks, selections and failed selections: fresh leases for this run."""
    from django.core.management import call_command
    from django.db import connection

    truncate(tuple(t for t in TABLES if t.startswith("locks_")))
    started = time.monotonic()
    call_command(
        "seed_locks",
        count=args.locks,
        expired_fraction=args.expired_fraction,
        ttl_seconds=LEASE_SECONDS,
        no_progress=True,
        stdout=StringIO(),
    )
    say(f"locks seeded in {time.monotonic() - started:.1f} s")
    with connection.cursor() as cursor:
        # Failed selections of random wallets at random moments of the last hour, as the
        # selector records them (about one in ten funds-locked with lock conflicts).
        cursor.execute(
            """
            INSERT INTO locks_failedselection
                (created_at, tx_id, wallet, currency, quantity, outcome, lock_conflicts)
            SELECT now() - random() * interval '1 hour', 'failed-' || g,
                   'wallet-' || floor(random() * %(wallets)s)::int, 'USD', 1000000,
                   CASE WHEN random() < 0.1 THEN 'funds_locked' ELSE 'insufficient_funds' END,
                   floor(random() * 5)::int
            FROM generate_series(1, %(count)s) g
            """,
            {"wallets": args.wallets, "count": args.failures},
        )


def vacuum() -> None:
    """Vacuum and analyse what was loaded, as autovacuum would soon after a bulk load."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in existing(TABLES):
            cursor.execute(f"VACUUM (ANALYZE) {table}")


def samples() -> dict[str, str]:
    """Pick a busy wallet, one of its locked tokens and that lock's spender for the searches."""
    from locks.models import TokenLock

    lock = (
        TokenLock.objects.select_related("token")
        .filter(expires_at__gt=datetime.now(UTC))
        .order_by("token_id")
        .first()
    )
    if lock is None:
        return {"wallet": "wallet-0", "token": "none", "spender": "none", "tx_id": "none"}
    return {
        "wallet": lock.token.wallet,
        "token": str(lock.token),
        "spender": lock.spender_tx_id,
        "tx_id": lock.spender_tx_id,
    }


def operator_client():
    """Return a test client logged in as a superuser."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(
        username=USERNAME, defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    return client


def measure_page(client, path: str, params: dict[str, str], repeat: int) -> dict:
    """Request one page once to warm up, then ``repeat`` times; return times and queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(path, params)
    if response.status_code != 200:
        return {"status": response.status_code}
    times, queries = [], []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(path, params)
            times.append(1000 * (time.perf_counter() - started))
        queries.append(len(captured.captured_queries))
    return {
        "status": response.status_code,
        "ms": [round(t, 2) for t in times],
        "median_ms": round(statistics.median(times), 1),
        "queries": max(queries),
    }


def fill(value: str, names: dict[str, str]) -> str:
    for name, replacement in names.items():
        value = value.replace("{" + name + "}", replacement)
    return value


def run(args: argparse.Namespace) -> dict:
    from django.conf import settings

    expected = args.wallets * args.tokens_per_wallet
    if args.reuse and seeded_tokens() >= expected:
        say(f"reusing the {seeded_tokens():,} tokens already seeded")
    else:
        say(f"seeding {expected:,} tokens")
        seed_tokens(args)
    say(f"seeding {args.locks:,} locks")
    seed_locks(args)
    vacuum()
    names = samples()
    say(f"sample wallet {names['wallet']}, token {names['token']}, spender {names['spender']}")
    # No setup_test_environment(): its instrumented template rendering (copies of every
    # context, for response.context) would be measured as if it were the page's own cost.
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = operator_client()
    pages = []
    for name, path, params in PAGES:
        path = fill(path, names)
        query = {key: fill(value, names) for key, value in params.items()}
        result = measure_page(client, path, query, args.repeat)
        pages.append({"page": name, "path": path, "params": query, **result})
        shown = (
            f"{result['median_ms']:8.1f} ms {result['queries']:3d} queries"
            if "median_ms" in result
            else f"HTTP {result['status']}"
        )
        say(f"{name:28} {shown}")
    return {
        "benchmark": "admin_pages",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "postgresql": database.server_version(),
        },
        "config": {
            "wallets": args.wallets,
            "tokens_per_wallet": args.tokens_per_wallet,
            "locks": args.locks,
            "expired_fraction": args.expired_fraction,
            "failures": args.failures,
            "repeat": args.repeat,
            "samples": names,
        },
        "pages": pages,
    }


def table(result: dict) -> str:
    """Format the pages as a plain-text table."""
    lines = [f"{'page':28} {'median ms':>10} {'queries':>8}"]
    for page in result["pages"]:
        if "median_ms" in page:
            lines.append(f"{page['page']:28} {page['median_ms']:>10.1f} {page['queries']:>8}")
        else:
            lines.append(f"{page['page']:28} {'HTTP ' + str(page['status']):>10} {'':>8}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    say(f"database {args.database}: migrating")
    with database.django_on(args.database):
        result = run(args)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    say(f"written to {args.out}")
    return 0 if all(page["status"] == 200 for page in result["pages"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
