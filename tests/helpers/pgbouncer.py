"""Debian's PgBouncer in front of a PostgreSQL server, pooling transactions.

Tests and benchmarks run the project through it as a deployment at scale does
(docs/scaling.md): every client connection of ``url()`` gets a server session for one
transaction at a time, out of ``pool_size`` sessions per database. ``make test`` installs it
(``apt-get install pgbouncer``); it listens on 127.0.0.1 only and lets the server's own user in
without a password, so it is for local runs, never a deployment's configuration.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.rows import dict_row

BINARY = "/usr/sbin/pgbouncer"
ADMIN_DATABASE = "pgbouncer"  # the console: SHOW POOLS, SHOW STATS, ...


class PgBouncerError(RuntimeError):
    """PgBouncer is missing or did not start."""


def binary() -> str | None:
    """Return the path of the pgbouncer program, or None when it is not installed."""
    return shutil.which("pgbouncer") or (BINARY if os.access(BINARY, os.X_OK) else None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _quote(value: object) -> str:
    """Quote one value of a [databases] connection string."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _run_as() -> str | None:
    """Return the account pgbouncer drops to when we are root (it refuses to run as root)."""
    if os.geteuid() != 0:
        return None
    from config import embedded_db

    # The embedded server's account reaches that server's socket directory.
    return embedded_db._system_user()


@dataclass
class PgBouncer:
    """A running pgbouncer: where it listens, as whom clients log in, its process."""

    port: int
    user: str
    pool_size: int
    process: subprocess.Popen
    directory: Path
    log: Path

    host = "127.0.0.1"

    def url(self, database: str) -> str:
        """Return a ``DATABASE_URL`` for ``database`` through the pool."""
        return f"postgresql://{quote(self.user, safe='')}@{self.host}:{self.port}/{database}"

    def admin(self) -> psycopg.Connection:
        """Connect to the admin console (it speaks the simple query protocol only)."""
        return psycopg.connect(
            self.url(ADMIN_DATABASE), autocommit=True, cursor_factory=psycopg.ClientCursor
        )

    def show(self, what: str) -> list[dict[str, object]]:
        """Return the rows of ``SHOW <what>`` (POOLS, STATS, SERVERS, CLIENTS...)."""
        with self.admin() as conn, conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(f"SHOW {what}")
            return cursor.fetchall()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """Shut down (SIGINT: at once, closing every connection) and remove its files."""
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def start(
    server: dict[str, object],
    *,
    pool_size: int = 10,
    max_clients: int = 2000,
    timeout: float = 20.0,
) -> PgBouncer:
    """Start pgbouncer in front of the server of a Django ``DATABASES`` entry.

    Every database of that server is reachable through it by name, each with at most
    ``pool_size`` server sessions, logged in as the entry's user (and password).
    """
    program = binary()
    if program is None:
        raise PgBouncerError(
            "pgbouncer is not installed: apt-get install pgbouncer (`make pgbouncer`)"
        )
    user = str(server.get("USER") or "postgres")
    target = [
        f"host={_quote(server.get('HOST') or '127.0.0.1')}",
        f"port={_quote(server.get('PORT') or 5432)}",
        f"user={_quote(user)}",
    ]
    if server.get("PASSWORD"):
        target.append(f"password={_quote(server['PASSWORD'])}")
    account = _run_as()
    # Outside any directory private to root: pgbouncer reads its files as `account`.
    directory = Path(tempfile.mkdtemp(prefix="sherdlock-pgbouncer-"))
    log = directory / "pgbouncer.log"
    users = directory / "users.txt"
    users.write_text(f'"{user}" ""\n')
    port = _free_port()
    settings = {
        "listen_addr": "127.0.0.1",
        "listen_port": port,
        "unix_socket_dir": "",
        # The same trust the embedded server gives its socket; the user must be listed.
        "auth_type": "trust",
        "auth_file": users,
        "admin_users": user,
        "pool_mode": "transaction",
        "default_pool_size": pool_size,
        "max_db_connections": pool_size,
        "min_pool_size": 0,
        "reserve_pool_size": 0,
        "max_client_conn": max_clients,
        # A client waits for a server session at most this long, then gets an error.
        "query_wait_timeout": 60,
        "logfile": log,
        "log_connections": 0,
        "log_disconnections": 0,
        "ignore_startup_parameters": "extra_float_digits",
    }
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n* = "
        + " ".join(target)
        + "\n\n[pgbouncer]\n"
        + "".join(f"{name} = {value}\n" for name, value in settings.items())
    )
    argv = [program, str(ini)]
    if account is not None:
        entry = pwd.getpwnam(account)
        for path in (directory, users, ini):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        argv[1:1] = ["-u", account]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    bouncer = PgBouncer(port, user, pool_size, process, directory, log)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            text = bouncer.log_text()
            bouncer.stop()
            raise PgBouncerError(f"pgbouncer exited with {process.returncode}:\n{text[-2000:]}")
        try:
            with socket.create_connection((bouncer.host, port), timeout=1):
                return bouncer
        except OSError:
            if time.monotonic() > deadline:
                text = bouncer.log_text()
                bouncer.stop()
                raise PgBouncerError(
                    f"pgbouncer did not listen on {port}:\n{text[-2000:]}"
                ) from None
            time.sleep(0.05)


@contextlib.contextmanager
def running(
    server: dict[str, object],
    *,
    pool_size: int = 10,
    max_clients: int = 2000,
    timeout: float = 20.0,
) -> Iterator[PgBouncer]:
    """Run pgbouncer (see ``start``) for the duration of the block."""
    bouncer = start(server, pool_size=pool_size, max_clients=max_clients, timeout=timeout)
    try:
        yield bouncer
    finally:
        bouncer.stop()
