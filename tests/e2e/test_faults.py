"""Faults under load: SIGKILLed web server workers and clients, PostgreSQL restarted mid-load.

The web server and several load processes (tests/workers/load_client.py) run against a throwaway
PostgreSQL. Whatever is killed or restarted: value is conserved, no token is spent twice, no
two selections hold a token at once, no lock outlives its lease, the only 5xx is 503
database_unavailable while the database is down, and once it answers again every request
succeeds. Recovery time (database answering again to the first successful request) is printed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal

import psutil
import pytest

from tests.e2e.faults import (
    Database,
    check_invariants,
    read_records,
    recovery_seconds,
    seed,
    start_load,
    throwaway_database,
    unexpected,
    wait_for_no_live_locks,
)
from tests.e2e.servers import web_server
from tests.e2e.test_serve import wait_for
from tests.helpers.processes import child_env
from tests.helpers.processes import wait_for as wait_for_processes

LEASE = 3.0
WORKERS = 2
TOKENS_PER_WALLET = 40
QUANTITY = 10


@pytest.fixture(scope="module")
def database() -> Iterator[Database]:
    with throwaway_database() as db:
        yield db


class Run:
    """The web server on the throwaway database, its wallets and key, and the load processes."""

    def __init__(self, db: Database, tmp_path, name: str, wallets: int) -> None:
        self.db, self.tmp, self.name = db, tmp_path, name
        self.wallets = [f"{name}-w{n}" for n in range(wallets)]
        self.key = seed(db, self.wallets, TOKENS_PER_WALLET, QUANTITY)
        self.outs: list = []
        self.clients: list = []
        self.env = {
            **child_env(db.url),
            "SHERDLOCK_LEASE_SECONDS": str(LEASE),
            "SHERDLOCK_RATE_SELECTIONS_PER_KEY": "off",
            "SHERDLOCK_RATE_SELECTIONS_PER_WALLET": "off",
        }

    def supply(self) -> Decimal:
        return Decimal(
            self.db.query(
                "SELECT coalesce(sum(quantity), 0) FROM tokens_token WHERE spent_at IS NULL"
            )[0][0]
        )

    def start_clients(self, base: str, count: int, duration: float) -> None:
        for n in range(count):
            out = self.tmp / f"{self.name}-client{n}.jsonl"
            self.outs.append(out)
            # Two clients per wallet: they compete for tokens.
            wallets = [self.wallets[n % len(self.wallets)]]
            self.clients.append(
                start_load(
                    base, self.key, out, f"{self.name}-c{n}", wallets, duration, seed_value=n
                )
            )

    def wait_clients(self, timeout: float) -> None:
        for client in self.clients:
            try:
                client.wait(timeout=timeout)
            except Exception:
                client.kill()
                raise
        for client in self.clients:
            assert client.returncode in (0, -signal.SIGKILL), client.stderr.read()

    def records(self) -> list[dict]:
        return read_records(self.outs)


def server_errors(records: list[dict]) -> list[dict]:
    """5xx answers other than 503 database_unavailable."""
    return [
        r
        for r in records
        if r["status"] >= 500 and (r["status"], r["code"]) != (503, "database_unavailable")
    ]


def serving(master_pid: int, killed: set[int], count: int) -> list[psutil.Process]:
    """Wait until the server runs ``count`` live workers, none of them one ``killed``."""

    def live() -> list[psutil.Process]:
        found = []
        for child in psutil.Process(master_pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.pid not in killed and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
        return found if len(found) == count else []

    return wait_for_processes(live, f"{count} workers in place of the killed ones")


def wait_for_first_selection(path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and '"status": 201' in path.read_text()):
        assert time.monotonic() < deadline, "the client never selected"
        time.sleep(0.05)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("duration, kills", [(12, 6), pytest.param(90, 50, marks=pytest.mark.slow)])
def test_killed_workers_and_clients_lose_nothing(database, tmp_path, duration, kills):
    run = Run(database, tmp_path, f"kill{duration}", wallets=2)
    supply = run.supply()
    with web_server(run.env, tmp_path / "web.log", workers=WORKERS) as server:
        run.start_clients(server.base, count=4, duration=duration)
        # One client is killed right after a selection: its locks must expire with the lease.
        wait_for_first_selection(run.outs[0])
        os.kill(run.clients[0].pid, signal.SIGKILL)
        rng = random.Random(0)
        killed: set[int] = set()
        for _ in range(kills):
            time.sleep(duration / (kills + 1))
            # Each kill finds both workers: the server replaced the one killed before.
            alive = serving(server.process.pid, killed, WORKERS)
            victim = rng.choice(alive)
            victim.send_signal(signal.SIGKILL)
            killed.add(victim.pid)
        run.wait_clients(timeout=duration + 120)
        # The server replaced every killed worker and still serves: it did not give up.
        assert server.process.poll() is None, server.log_text()[-3000:]
        serving(server.process.pid, killed, WORKERS)
        assert wait_for(f"{server.base}/healthz", timeout=30) == 200
        log = server.log_text()
    records = run.records()
    wait_for_no_live_locks(database, LEASE)
    report = check_invariants(database, supply=supply)
    print(
        f"\n[faults] {kills} workers killed in {duration} s: {len(records)} requests, "
        f"{sum(r['status'] == 0 for r in records)} lost answers (sent again), {report}"
    )
    assert server_errors(records) == []
    assert not [r for r in records if r["status"] == 503], "the database never went away"
    # A request whose worker was killed lost its answer and was sent again (the same tx_id);
    # every answer given was a success or a healthy refusal.
    assert unexpected([r for r in records if r["status"] != 0]) == []
    assert sum(r["status"] in (200, 201) for r in records) > 20
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "modes, duration",
    [
        (["fast", "immediate"], 16),
        pytest.param(["fast", "immediate"] * 4, 120, marks=pytest.mark.slow),
    ],
    ids=["fast-immediate", "long"],
)
def test_database_restarts_lose_nothing_and_recover(database, tmp_path, modes, duration):
    run = Run(database, tmp_path, f"restart{duration}", wallets=2)
    supply = run.supply()
    recoveries = []
    with web_server(run.env, tmp_path / "web.log", workers=2) as server:
        run.start_clients(server.base, count=4, duration=duration)
        # (mode, when the restart began, when the database answered again, when it began by
        # the wall clock)
        restarts = []
        for mode in modes:
            time.sleep(duration / (len(modes) + 1))
            began, wall = time.monotonic(), time.time()
            restarts.append((mode, began, database.restart(mode), wall))
        run.wait_clients(timeout=duration + 120)
        log = server.log_text()
    records = run.records()
    for mode, _, answered, _ in restarts:
        recoveries.append((mode, recovery_seconds(records, answered)))
    wait_for_no_live_locks(database, LEASE)
    report = check_invariants(database, supply=supply)
    print(
        f"\n[faults] restarts {modes} in {duration} s: {len(records)} requests, "
        f"{sum(r['status'] == 503 for r in records)} answered 503, recovery (database "
        f"answering to first success): {', '.join(f'{m} {s:.3f} s' for m, s in recoveries)}; "
        f"{report}"
    )
    assert server_errors(records) == []
    # Once the database answers, every request succeeds (or meets a healthy refusal), up to
    # those still in flight when the next restart begins.
    # Grants commit asynchronously (DURABLE_LEASES off): an immediate restart may forget a
    # selection answered just before it, whose spend or release then finds nothing to act on.
    recorded = {row[0] for row in database.query("SELECT tx_id FROM locks_selection")}
    forgotten = [r for r in records if forgotten_grant(r, recorded)]
    assert_forgotten_grants_held_alone(database, records, forgotten, restarts)
    print(f"[faults] {len(forgotten)} answers to a grant the database forgot")
    ends = [began for _, began, _, _ in restarts[1:]] + [float("inf")]
    for (mode, _, answered, _), next_began in zip(restarts, ends, strict=True):
        window = [r for r in records if r["end"] < next_began and r not in forgotten]
        assert unexpected(window, after=answered) == [], mode
    assert "Traceback" not in log, log[-3000:]


def assert_forgotten_grants_held_alone(
    db: Database, records: list[dict], forgotten: list[dict], restarts: list[tuple]
) -> None:
    """A grant the database forgot was lost by an immediate restart, and while its client was
    told it held the tokens (from the answer to the restart, at most a lease) no one else
    held any of them: not a selection the database kept, nor another forgotten grant.

    A kept selection holds its tokens until its client lets them go: its spend or release, or
    the end of its lease. A release commits asynchronously like a grant, so the restart may
    forget it too, and the row then reads locked until its lease ends; the tokens were free
    from the moment its client asked for the release, which it was told was done."""
    granted = {
        r["tx_id"]: r
        for r in records
        if r["path"] == "/api/v1/selections/" and r["status"] in (200, 201)
    }
    released: dict[str, float] = {}
    for r in records:
        parts = r["path"].strip("/").split("/")
        if parts[3:] and parts[-1] == "release" and r["status"] == 200:
            released[parts[3]] = min(released.get(parts[3], r["wall_start"]), r["wall_start"])
    identity = {
        token_id: (tx_id, index)
        for token_id, tx_id, index in db.query('SELECT id, tx_id, "index" FROM tokens_token')
    }
    holds = defaultdict(list)  # token (tx_id, index) -> [(start, end, holder)], wall seconds
    for tx_id, status, token_ids, created, expires, spent, released_at in db.query(
        "SELECT tx_id, status, token_ids, created_at, expires_at, spent_at, released_at "
        "FROM locks_selection"
    ):
        end = {"spent": spent, "released": min(released_at or expires, expires)}.get(
            status, expires
        )
        let_go = min(end.timestamp(), released.get(tx_id, float("inf")))
        for token_id in token_ids:
            holds[identity[token_id]].append((created.timestamp(), let_go, tx_id))
    # An immediate restart forgets what it had not yet written: a grant answered before it
    # answered again (while it went down, perhaps after it began).
    immediate = [(answered, wall) for mode, _, answered, wall in restarts if mode == "immediate"]
    for tx_id in sorted({r["path"].strip("/").split("/")[3] for r in forgotten}):
        grant = granted[tx_id]
        lost = [wall for answered, wall in immediate if answered >= grant["end"]]
        assert lost, (
            f"{tx_id} was forgotten, yet no immediate restart followed its grant: "
            f"{[r for r in records if r.get('tx_id') == tx_id or tx_id in r['path']]}, "
            f"restarts {restarts}"
        )
        # Held from its answer at least until the restart began (or its lease ended): at
        # least the instant of its answer, if that came while the server went down.
        start = grant["wall_end"]
        end = max(start, min(lost[0], grant["wall_start"] + LEASE))
        for token in map(tuple, grant["tokens"]):
            for other_start, other_end, other in holds[token]:
                assert other_end <= start or other_start > end or other_start == end > start, (
                    f"{other} held {token} while forgotten {tx_id} was told it held it"
                )
            holds[token].append((start, end, tx_id))


def forgotten_grant(record: dict, recorded: set[str]) -> bool:
    """Tell whether ``record`` is a spend or release of a selection the database forgot."""
    parts = record["path"].strip("/").split("/")
    return (
        record["code"] == "not_found"
        and len(parts) == 5
        and parts[:3] == ["api", "v1", "selections"]
        and parts[4] in ("spend", "release")
        and parts[3] not in recorded
    )
