"""Measure what the cache listener saves on a hot wallet: round trips and lock attempts.

Replica processes (8 by default) select from one wallet of 1000 tokens at the same time, each
making N selections and then spending (payment and change back to the same wallet, so the
supply stays constant) or releasing every one. Three modes, interleaved over the runs: "on"
(``SHERDLOCK_LISTEN=1``), "off" (``SHERDLOCK_LISTEN=0``, the triggers still publish) and
"silent" (listener off, publishing switched off with ``sherdlock.notify = off``: the system
before real-time caches).

Reported per selection: store round trips (``round_trips`` of the replica's PostgresTokenStore,
counted around ``select`` only), fetches, lock attempts per locked token (token rows offered to
lock statements: granted plus lost), latency and the replicas' CPU time (listener included).

    python -m bench.listener_effect [--processes 8] [--selections 60] [--runs 3]

The run uses its own database (``sherdlock_bench_listener``) on the server of ``DATABASE_URL``,
or on the embedded server when that is unset, and writes JSON under ``bench/results/``.
``measure()`` is the entry point for the benchmark harness.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DATABASE = "sherdlock_bench_listener"
WALLET, CURRENCY = "hot", "USD"
# mode: (SHERDLOCK_LISTEN, triggers publish). "silent" is the system before real-time caches.
MODES = {"silent": ("0", False), "off": ("0", True), "on": ("1", True)}
READY_TIMEOUT = 60.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--selections", type=int, default=60, help="per process")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--quantity", type=int, default=10, help="of each token")
    parser.add_argument("--max-request", type=int, default=40, help="requests are 1..this")
    parser.add_argument("--hold", type=float, default=0.003, help="max seconds a selection is held")
    parser.add_argument("--spend-ratio", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3, help="per mode")
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--out", type=Path, default=RESULTS / "listener_effect.json")
    # Internal: one replica process.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--go", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def database_url(name: str) -> str:
    """Return the URL of database `name` on the configured (or embedded) server."""
    url = os.environ.get("DATABASE_URL")
    if not url:
        from config import embedded_db

        return embedded_db.ensure_running(embedded_db.DEFAULT_DATA_DIR).url(name)
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def prepare(url: str) -> None:
    """Create the database if needed, point this process's Django at it and migrate it."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)


def seed(tokens: int, quantity: int) -> None:
    """Empty the token and lock tables and issue the hot wallet's tokens in one statement."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE tokens_token, locks_tokenlock RESTART IDENTITY CASCADE")
        cursor.execute(
            'INSERT INTO tokens_token (tx_id, "index", wallet, currency, quantity) '
            "SELECT 'bench-seed', g, %s, %s, %s FROM generate_series(0, %s - 1) g",
            [WALLET, CURRENCY, quantity, tokens],
        )
        cursor.execute("ANALYZE tokens_token, locks_tokenlock")


def publishing(database: str, on: bool) -> None:
    """Switch the triggers' notifications on or off for sessions opened from now on."""
    from django.db import connection

    with connection.cursor() as cursor:
        if on:
            cursor.execute(f'ALTER DATABASE "{database}" RESET sherdlock.notify')
        else:
            cursor.execute(f'ALTER DATABASE "{database}" SET sherdlock.notify = off')


def run_once(args: argparse.Namespace, url: str, mode: str, run: int) -> dict:
    """Run every replica process once in `mode`; return their merged reports."""
    seed(args.tokens, args.quantity)
    listen, publish = MODES[mode]
    publishing(urlsplit(url).path.lstrip("/"), publish)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SHERDLOCK_LISTEN": listen,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        reports = [Path(tmp) / f"r{i}.json" for i in range(args.processes)]
        common = [
            "--go",
            str(go),
            "--selections",
            str(args.selections),
            "--max-request",
            str(args.max_request),
            "--hold",
            str(args.hold),
            "--spend-ratio",
            str(args.spend_ratio),
        ]
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.listener_replica",
                    "--worker",
                    "--name",
                    f"{mode}{run}-r{i}",
                    "--report",
                    str(report),
                    "--seed",
                    str(1000 * run + i),
                    *common,
                ],
                cwd=ROOT,
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i, report in enumerate(reports)
        ]
        try:
            deadline = time.monotonic() + READY_TIMEOUT
            while not all(Path(f"{r}.ready").exists() for r in reports):
                failed = [p for p in processes if p.poll() is not None]
                if failed or time.monotonic() > deadline:
                    raise RuntimeError(f"a replica did not start: {_stderr(failed)}")
                time.sleep(0.01)
            started = time.monotonic()
            go.touch()
            for process in processes:
                _, err = process.communicate(timeout=600)
                if process.returncode:
                    raise RuntimeError(f"a replica failed: {err[-2000:]}")
            elapsed = time.monotonic() - started
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
        merged = [json.loads(report.read_text()) for report in reports]
    rows = [row for report in merged for row in report["selections"]]
    notifications: dict[str, int] = {}
    for report in merged:
        for event, count in report["notifications"].items():
            notifications[event] = notifications.get(event, 0) + count
    return {
        "mode": mode,
        "run": run,
        "elapsed": elapsed,
        "rows": rows,
        "cpu": sum(report["cpu"] for report in merged),
        "notifications": notifications,
    }


def _stderr(processes: list[subprocess.Popen]) -> str:
    return " | ".join((p.stderr.read() or "")[-1000:] for p in processes)


def summarize(runs: list[dict], processes: int) -> dict[str, float]:
    """Reduce the selections of some runs to the reported figures."""
    rows = [row for run in runs for row in run["rows"]]
    selected = [row for row in rows if row["outcome"] == "selected"]
    if not selected:
        raise RuntimeError("no selection succeeded: nothing to report")
    locked = sum(row["tokens"] for row in selected)
    conflicts = sum(row["lock_conflicts"] for row in selected)
    latencies = sorted(row["latency"] for row in selected)
    notified = sum(sum(run["notifications"].values()) for run in runs)
    return {
        "selections": len(rows),
        "failed": len(rows) - len(selected),
        "round_trips_per_selection": sum(row["round_trips"] for row in rows) / len(rows),
        "fetches_per_selection": sum(row["fetches"] for row in selected) / len(selected),
        "try_lock_submissions_per_selection": sum(row["lock_attempts"] for row in selected)
        / len(selected),
        # Every offered row is either granted or lost: offered = locked + conflicts.
        "lock_attempts_per_locked_token": (locked + conflicts) / locked,
        "lock_conflicts_per_selection": conflicts / len(selected),
        "cache_hit_ratio": sum(row["cache_hits"] for row in selected) / locked,
        "select_p50_ms": 1000 * statistics.median(latencies),
        "select_p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
        "notifications_per_process": notified / (len(runs) * processes),
        "replica_cpu_ms_per_selection": 1000 * sum(run["cpu"] for run in runs) / len(rows),
        "selections_per_second": len(rows) / sum(run["elapsed"] for run in runs),
    }


def measure(args: argparse.Namespace) -> dict:
    """Run both modes `args.runs` times each, alternating; return the summary and raw runs."""
    url = database_url(args.database)
    prepare(url)
    from sherdlock import config as tuning

    runs = []
    for run in range(args.runs):
        order = list(MODES) if run % 2 == 0 else list(reversed(MODES))
        try:
            for mode in order:
                runs.append(run_once(args, url, mode, run))
        finally:
            publishing(urlsplit(url).path.lstrip("/"), True)
    summary = {
        mode: summarize([r for r in runs if r["mode"] == mode], args.processes) for mode in MODES
    }
    return {
        "benchmark": "listener_effect",
        "config": {
            "processes": args.processes,
            "selections_per_process": args.selections,
            "tokens": args.tokens,
            "token_quantity": args.quantity,
            "request": [1, args.max_request],
            "hold_max_s": args.hold,
            "spend_ratio": args.spend_ratio,
            "runs_per_mode": args.runs,
            "fetch_limit": tuning.FETCH_LIMIT,
            "cache_ttl_off": tuning.CACHE_TTL,
            "cache_ttl_on": tuning.CACHE_TTL_LISTENING,
        },
        "summary": summary,
        "runs": [
            {k: v for k, v in run.items() if k != "rows"}
            | {"summary": summarize([run], args.processes)}
            for run in runs
        ],
    }


ROWS = [
    ("round trips / selection", "round_trips_per_selection", "{:.2f}"),
    ("fetches / selection", "fetches_per_selection", "{:.2f}"),
    ("lock attempts / locked token", "lock_attempts_per_locked_token", "{:.3f}"),
    ("lock conflicts / selection", "lock_conflicts_per_selection", "{:.3f}"),
    ("try-lock submissions / selection", "try_lock_submissions_per_selection", "{:.2f}"),
    ("cache hit ratio", "cache_hit_ratio", "{:.2f}"),
    ("select p50 (ms)", "select_p50_ms", "{:.2f}"),
    ("select p95 (ms)", "select_p95_ms", "{:.2f}"),
    ("replica CPU (ms) / selection", "replica_cpu_ms_per_selection", "{:.2f}"),
    ("selections / s (all replicas)", "selections_per_second", "{:.0f}"),
    ("notifications / process", "notifications_per_process", "{:.0f}"),
    ("selections (failed)", "selections", "{:.0f}"),
]


def table(summary: dict[str, dict[str, float]]) -> str:
    """Format the summary as a plain-text table: every mode, and "on" against the others."""
    silent, off, on = summary["silent"], summary["off"], summary["on"]
    lines = [f"{'':32} {'silent':>10} {'off':>10} {'on':>10} {'on/off':>7} {'on/silent':>9}"]
    for label, name, fmt in ROWS:
        cells = [fmt.format(mode[name]) for mode in (silent, off, on)]
        if name == "selections":
            cells = [f"{c} ({m['failed']})" for c, m in zip(cells, (silent, off, on), strict=True)]
            changes = ["", ""]
        else:
            changes = [
                f"{(on[name] - base[name]) / base[name]:+.0%}" if base[name] else ""
                for base in (off, silent)
            ]
        lines.append(
            f"{label:32} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10} "
            f"{changes[0]:>7} {changes[1]:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    result = measure(args)
    print(table(result["summary"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
