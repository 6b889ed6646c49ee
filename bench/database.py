"""The benchmark's own database: locate, create, migrate, seed, reset between runs, audit.

The harness never touches the project's database: it uses a dedicated one (``sherdlock_bench``
by default) on the server of ``DATABASE_URL``, or on the embedded server when that is unset,
and empties it (TRUNCATE) before every measured point.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_NAME = "sherdlock_bench"

# Every table a run writes to; CASCADE would reach the same ones through foreign keys.
TABLES = ("tokens_token", "locks_tokenlock", "locks_selection", "locks_failedselection",
          "clients_ratebucket", "tokens_currencysupply")

# Lock rows left on unspent tokens once every replica has spent or released what it held.
LEAKED_LOCKS = """
SELECT count(*) FROM locks_tokenlock l JOIN tokens_token t ON t.id = l.token_id
WHERE t.spent_at IS NULL
"""


def locate(name: str = DEFAULT_NAME) -> tuple[str, object | None]:
    """Return the URL of database ``name`` on the configured server, and the embedded server.

    The embedded server is started when ``DATABASE_URL`` is unset; it is returned so the
    caller can stop it again if this call started it.
    """
    url = os.environ.get("DATABASE_URL")
    if url:
        return renamed(url, name), None
    from config import embedded_db

    data_dir = Path(os.environ.get("SHERDLOCK_DATA_DIR", BASE_DIR / ".data"))
    server = embedded_db.ensure_running(data_dir / "postgres")
    return server.url(name), server


def renamed(url: str, name: str) -> str:
    """Return ``url`` naming database ``name`` on the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def _admin_connection(url: str):
    import psycopg

    return psycopg.connect(renamed(url, "postgres"), autocommit=True)


def create(url: str) -> bool:
    """Create the database of ``url`` unless it exists; return True if it was created."""
    name = urlsplit(url).path.lstrip("/")
    with _admin_connection(url) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        conn.execute(f'CREATE DATABASE "{name}"')
        return True


def drop(url: str) -> None:
    """Drop the database of ``url``, disconnecting its sessions."""
    name = urlsplit(url).path.lstrip("/")
    with _admin_connection(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate() -> None:
    """Apply the project's migrations to the benchmark database (Django must be set up)."""
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def _cursor():
    from django.db import connection

    return connection.cursor()


def seed(rows: tuple[tuple[str, int], ...], currency: str) -> None:
    """Replace every token by ``rows`` and remember them as the snapshot ``reset`` restores."""
    with _cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        copy_sql = 'COPY tokens_token (tx_id, "index", wallet, currency, quantity) FROM STDIN'
        with cursor.cursor.copy(copy_sql) as copy:
            for index, (wallet, quantity) in enumerate(rows):
                copy.write_row(("bench-seed", index, wallet, currency, quantity))
        cursor.execute("DROP TABLE IF EXISTS bench_snapshot")
        cursor.execute("CREATE TABLE bench_snapshot AS SELECT * FROM tokens_token")
    reset()


def reset() -> None:
    """Restore the seeded tokens with their ids, and empty the lock and selection tables."""
    with _cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        cursor.execute("INSERT INTO tokens_token SELECT * FROM bench_snapshot")
        # Keep the supply summary (what issuing maintains) true to the restored tokens.
        cursor.execute("INSERT INTO tokens_currencysupply (currency, supply) "
                       "SELECT currency, sum(quantity) FROM bench_snapshot "
                       "WHERE spent_at IS NULL GROUP BY currency")
        # New outputs must not reuse snapshot ids.
        cursor.execute("SELECT setval(pg_get_serial_sequence('tokens_token', 'id'), "
                       "(SELECT max(id) FROM tokens_token))")
        # Fresh statistics keep the planner on the partial index whatever ran before.
        cursor.execute("ANALYZE tokens_token, locks_tokenlock")
    checkpoint()


def checkpoint() -> None:
    """Flush dirty pages now, so a checkpoint due to earlier writes does not land mid-point.

    Needs a superuser (or pg_checkpoint); without the right the points are only noisier.
    """
    from django.db import DatabaseError

    try:
        with _cursor() as cursor:
            cursor.execute("CHECKPOINT")
    except DatabaseError:
        pass


def leaked_locks() -> int:
    """Count lock rows that hold unspent tokens."""
    with _cursor() as cursor:
        cursor.execute(LEAKED_LOCKS)
        return int(cursor.fetchone()[0])


def unspent_by_wallet() -> dict[str, int]:
    """Return the unspent quantity per wallet."""
    with _cursor() as cursor:
        cursor.execute("SELECT wallet, sum(quantity) FROM tokens_token WHERE spent_at IS NULL "
                       "GROUP BY wallet")
        return {wallet: int(total) for wallet, total in cursor.fetchall()}


def spent_tokens(by_identity: bool = False) -> dict[object, str]:
    """Map every spent token (id, or "tx_id:index") to the transaction that spent it."""
    key = "tx_id || ':' || \"index\"" if by_identity else "id"
    with _cursor() as cursor:
        cursor.execute(f"SELECT {key}, spent_by FROM tokens_token WHERE spent_at IS NOT NULL")
        return dict(cursor.fetchall())


def server_version() -> str:
    """Return the PostgreSQL server version."""
    with _cursor() as cursor:
        cursor.execute("SHOW server_version")
        return str(cursor.fetchone()[0])
