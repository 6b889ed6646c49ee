"""The benchmark's own database: locate, create, migrate, reset between points, audit.

The harness never touches the project's database: it uses a dedicated one (``sherdlock_bench``
by default) on the server of ``DATABASE_URL``, or on the embedded server when that is unset,
and restores the seeded tokens (TRUNCATE, then a copy of the snapshot) before every measured
point; the housekeeping points, on a workload too large to copy, keep their tokens and only
replace the lock rows between points.
"""

from __future__ import annotations

import contextlib
import os
import sys
from urllib.parse import urlsplit, urlunsplit

DEFAULT_NAME = "sherdlock_bench"

# Every table a run writes to; CASCADE would reach the same ones through foreign keys.
TABLES = (
    "tokens_token",
    "locks_tokenlock",
    "locks_selection",
    "tokens_txclaim",
    "locks_failedselection",
    "clients_ratebucket",
    "tokens_currencysupply",
    # A point must not inherit a queue: a waiter row left by a process that died (a run stopped
    # midway, a web server stopped with requests waiting) would head its key's queue until its
    # deadline, and the chain's wallet is the same in every run.
    "locks_waiter",
)

# The spenders of the lock rows the housekeeping points plant (bench.expired_locks); the audit
# of a point's books (bench.books) does not count them as leaked.
EXPIRED_PREFIX = "crashed-"

# The reference's tables (``bench.strategies.reference``), the one with the tokens last; its
# lock and token tables have the columns the audit reads under ours' names.
REFERENCE_TABLES = ("reference_lock", "reference_selection", "reference_token")


def locate(name: str = DEFAULT_NAME) -> tuple[str, object | None]:
    """Return the URL of database ``name`` on the configured server, and the embedded server.

    The embedded server is started when ``DATABASE_URL`` is unset; it is returned so the
    caller can stop it again if this call started it.
    """
    url = os.environ.get("DATABASE_URL")
    if url:
        return renamed(url, name), None
    from config import embedded_db

    server = embedded_db.ensure_running(embedded_db.DEFAULT_DATA_DIR)
    return server.url(name), server


@contextlib.contextmanager
def held(name: str = DEFAULT_NAME):
    """Create benchmark database ``name`` if missing and hold it for this run; yield its URL.

    Raise ``RunInProgress`` if another run holds it. An embedded server this started is stopped
    after.
    """
    url, server = locate(name)
    try:
        create(url)
        with exclusive(url):
            yield url
    finally:
        if server is not None and server.started:
            from config import embedded_db

            embedded_db.stop(server.data_dir)


@contextlib.contextmanager
def django_on(name: str = DEFAULT_NAME, log_level: str = "WARNING"):
    """Set Django up on benchmark database ``name`` (created if missing, migrated); yield its URL.

    For the stand-alone benchmark scripts, which reseed the database as a run does: while
    another run or script holds it, this one exits with status 2 before touching it.
    """
    try:
        with held(name) as url:
            os.environ["DATABASE_URL"] = url
            os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
            os.environ.setdefault("LOG_LEVEL", log_level)
            import django

            from config import local

            local.prepare()  # the static root; the server runs already
            django.setup()
            migrate()
            yield url
    except RunInProgress as exc:
        print(f"bench: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


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


# The session advisory lock a run holds throughout (a key of its own): a second run on the same
# database would empty the first one's tables mid-point, making it report bogus double spends.
RUN_LOCK = (0x73627275, 0)


class RunInProgress(RuntimeError):
    """Another run of the harness is using this database."""


@contextlib.contextmanager
def exclusive(url: str):
    """Hold the database of ``url`` for this run; raise ``RunInProgress`` if another holds it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", RUN_LOCK).fetchone()[0]:
            raise RunInProgress(
                f"another benchmark run is using {urlsplit(url).path.lstrip('/')}; "
                "wait for it to end, or give this one another --database"
            )
        try:
            yield
        finally:
            # Given back before the connection closes: a closed session's server process lets go
            # of its locks only as it exits, some time after the client has moved on, so a run
            # (or a test) that starts right after this one ends would find the lock still held.
            # A session that broke has lost the lock with it.
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", RUN_LOCK)


def drop(url: str) -> None:
    """Drop the database of ``url``, disconnecting its sessions."""
    name = urlsplit(url).path.lstrip("/")
    with _admin_connection(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate() -> None:
    """Apply the project's migrations, create the reference's tables (Django must be set up)."""
    from django.core.management import call_command

    from bench.strategies import reference

    call_command("migrate", interactive=False, verbosity=0)
    reference.install()


def db_cursor():
    """Return a cursor of Django's default connection: the benchmark database."""
    from django.db import connection

    return connection.cursor()


class Quiet:
    """Publish no change notifications from this connection while seeding or resetting.

    Bulk loads would otherwise build one JSON payload per wallet for nobody: replicas are
    rebuilt for every point, so no cache outlives a reset.
    """

    def __enter__(self):
        with db_cursor() as cursor:
            cursor.execute("SET sherdlock.notify = off")

    def __exit__(self, *exc: object) -> None:
        with db_cursor() as cursor:
            cursor.execute("RESET sherdlock.notify")


def reset() -> None:
    """Restore the seeded tokens with their ids, and empty the lock, selection and waiter tables.

    The reference's tables are emptied too (``reset_reference`` fills them for its points).
    """
    with Quiet(), db_cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        forget_changes()  # at once: see forget_changes
        empty_reference()
        cursor.execute("INSERT INTO tokens_token SELECT * FROM bench_snapshot")
        # Keep the supply summary (what issuing maintains) true to the restored tokens.
        cursor.execute(
            "INSERT INTO tokens_currencysupply (currency, supply) "
            "SELECT currency, sum(quantity) FROM bench_snapshot "
            "WHERE spent_at IS NULL GROUP BY currency"
        )
        # New outputs must not reuse snapshot ids.
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('tokens_token', 'id'), "
            "(SELECT max(id) FROM tokens_token))"
        )
        # Fresh statistics plan every point's statements alike, whatever ran before: they
        # describe the snapshot, its spent history included (bench.seeding.HISTORY_EVERY). A
        # vacuumed table (visibility map set) lets every point start where the previous one did
        # instead of one of them paying for autovacuum of the restored rows. The lock table is
        # left unanalysed (TRUNCATE made its size unknown): statistics of an empty lock table,
        # taken now, would plan every statement of the point for a table that then fills up.
        cursor.execute("VACUUM (ANALYZE) tokens_token")
    forget_changes()
    checkpoint()


def empty_reference() -> None:
    """Empty the reference's tables, if this database has them (``migrate`` creates them).

    Only its own points use them (``reset_reference``); emptied, the tables of an earlier
    point leave autovacuum nothing to work off while another strategy is measured.
    """
    with db_cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [REFERENCE_TABLES[-1]])
        if cursor.fetchone()[0]:
            cursor.execute(f"TRUNCATE {', '.join(REFERENCE_TABLES)} RESTART IDENTITY")
            forget_changes(REFERENCE_TABLES)


def reset_reference() -> None:
    """Fill the reference's tables with the seeded tokens (same ids), after a ``reset``.

    As ``reset`` leaves ours' tables: tokens restored, vacuumed and analysed, lock and
    selection tables empty and left unanalysed, autovacuum's counts zeroed, pages flushed.
    """
    from bench.strategies import reference

    empty_reference()
    with db_cursor() as cursor:
        cursor.execute(reference.RESTORE)
        cursor.execute(reference.RESTORE_IDS)
        cursor.execute(f"VACUUM (ANALYZE) {reference.TOKENS}")
    forget_changes(REFERENCE_TABLES)
    checkpoint()


def forget_changes(tables: tuple[str, ...] = TABLES) -> None:
    """Zero autovacuum's counts of changes of the tables a reset or a seeding emptied.

    TRUNCATE keeps a table's count of changes since its last analysis. The lock table came out
    of a point with up to 500 changes counted (its threshold, migration 0009), so the next
    point's first few changes could bring its analysis while it held no rows and no pages. The
    point's statements were then planned again for an empty table: a sequential scan of the lock
    table for each token's lock, 165-195 buffers per fetch instead of 98, to the point's end.
    With the counts zeroed, the first analysis comes after 500 changes of the new point, when
    the table holds its rows.

    A reset zeroes them right after its TRUNCATE as well, before it restores the tokens: until
    then the previous point's counts still ask for a vacuum and an analysis, and an autovacuum
    worker that came by during the restore vacuumed and analysed the empty lock table. It
    recorded no rows and no pages, as autovacuum does after a quiet spell, and the next point
    ran on plans made for that (1 point in 16: 910 selections/s against 1,040-1,230).

    Needs a superuser (or a grant on the function); without it the points are only noisier.
    """
    from django.db import DatabaseError

    try:
        with db_cursor() as cursor:
            for table in tables:
                cursor.execute("SELECT pg_stat_reset_single_table_counters(%s::regclass)", [table])
    except DatabaseError:
        pass


def checkpoint() -> None:
    """Flush dirty pages now, so a checkpoint due to earlier writes does not land mid-point.

    Needs a superuser (or pg_checkpoint); without the right the points are only noisier.
    """
    from django.db import DatabaseError

    try:
        with db_cursor() as cursor:
            cursor.execute("CHECKPOINT")
    except DatabaseError:
        pass


def server_version() -> str:
    """Return the PostgreSQL server version."""
    with db_cursor() as cursor:
        cursor.execute("SHOW server_version")
        return str(cursor.fetchone()[0])
