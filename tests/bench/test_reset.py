"""The benchmark's reset between points: each point starts from the seeded tokens alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from bench import books, database, seeding
from bench.quiet_spell import quiet_spell
from locks.models import TokenLock, Waiter
from tests.factories import make_lock
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)


def lock_table_activity(columns: str) -> tuple:
    """Read ``columns`` of the lock table's row in pg_stat_user_tables, this session's flushed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            f"SELECT {columns} FROM pg_stat_user_tables WHERE relid = 'locks_tokenlock'::regclass"
        )
        return cursor.fetchone()


def test_a_point_inherits_no_lock_and_no_queue():
    seeding.seed((("w", 5), ("w", 7)), "USD")
    try:
        unspent = Token.objects.filter(spent_at__isnull=True)
        token = unspent.order_by("id").first()
        assert token is not None
        make_lock(token)
        Token.objects.filter(id=token.id).update(quantity=1)  # a change the reset must undo
        live = timezone.now() + timedelta(minutes=1)
        Waiter.objects.create(wallet="w", currency="USD", expires_at=live)

        database.reset()

        assert sorted(unspent.values_list("quantity", flat=True)) == [5, 7]
        assert Token.objects.filter(spent_by=seeding.HISTORY_TX).count() == 1
        assert not TokenLock.objects.exists()
        assert not Waiter.objects.exists()  # a left-over waiter would head the queue
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")


def test_a_second_run_on_the_same_database_refuses_to_start(db_url):
    """Two runs on one database would truncate each other's tables mid-point."""
    import psycopg

    with (
        database.exclusive(db_url),
        pytest.raises(database.RunInProgress, match="another benchmark run"),
        database.exclusive(db_url),
    ):
        pass
    # Free again once the first run ended, and held against others while this one runs.
    with database.exclusive(db_url), psycopg.connect(db_url, autocommit=True) as other:
        held = other.execute("SELECT pg_try_advisory_lock(%s, %s)", database.RUN_LOCK).fetchone()
        assert held == (False,)


def test_a_run_gives_the_lock_back_before_its_session_ends(db_url, monkeypatch):
    """The server process of a closed session keeps its locks until it has exited, which may be
    after the client has moved on: the run (or test) that starts right after must find the
    database free all the same."""
    import psycopg

    lingering: list[psycopg.Connection] = []
    connect = psycopg.connect

    def connect_lingering(*args, **kwargs):
        conn = connect(*args, **kwargs)
        lingering.append(conn)
        conn.close = lambda: None  # its server process has not exited yet
        return conn

    monkeypatch.setattr(psycopg, "connect", connect_lingering)
    try:
        with database.exclusive(db_url):
            pass
        monkeypatch.undo()
        assert lingering, "the run took no session"
        with database.exclusive(db_url):
            pass
    finally:
        for conn in lingering:
            psycopg.Connection.close(conn)


def test_a_stand_alone_script_refuses_a_database_a_run_holds(db_url, monkeypatch, capsys):
    """A script that reseeds the database (bench.library_cpu, say) must not do it mid-run."""
    from urllib.parse import urlsplit

    monkeypatch.setenv("DATABASE_URL", db_url)
    name = urlsplit(db_url).path.lstrip("/")
    with (
        database.exclusive(db_url),
        pytest.raises(SystemExit) as exited,
        database.django_on(name),
    ):
        pytest.fail("the script ran on a database another run holds")
    assert exited.value.code == 2
    assert "another benchmark run is using" in capsys.readouterr().err


def test_a_point_starts_with_no_change_counted_towards_an_analysis():
    """A count left by the previous point would bring an analysis of the emptied lock table.

    ``seed_generated`` ends the same way, but is not run here: its bulk load recreates the
    token table's indexes, which would change the plans later tests of this database check.
    """
    seeding.seed((("w", 5), ("w", 7)), "USD")
    try:
        for token in Token.objects.all():
            make_lock(token)
        TokenLock.objects.all().delete()

        def changes() -> int:
            return lock_table_activity("n_mod_since_analyze")[0]

        assert changes() >= 4  # two inserts and two deletes

        database.reset()

        assert changes() == 0
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")


def test_a_quiet_spell_leaves_the_lock_table_vacuumed_empty_and_housekept():
    """``--quiet-spell``: the point starts as the next burst after a quiet spell would."""
    from locks.models import HousekeepingRun

    seeding.seed([("w", 1)] * 300, "USD")
    try:
        runs = HousekeepingRun.objects.count()

        database.reset()
        quiet_spell(200)

        assert not TokenLock.objects.exists()
        assert Token.objects.filter(spent_at__isnull=True).count() == 300
        assert HousekeepingRun.objects.count() == runs + 1
        vacuumed = lock_table_activity("last_vacuum IS NOT NULL, last_analyze IS NOT NULL")
        assert vacuumed == (True, True)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")


def test_a_reset_zeroes_the_change_counts_before_it_restores_the_tokens():
    """Until then an autovacuum worker may take the emptied lock table for one to vacuum."""
    from django.test.utils import CaptureQueriesContext

    seeding.seed((("w", 5), ("w", 7)), "USD")
    try:
        with CaptureQueriesContext(connection) as queries:
            database.reset()
        steps = [q["sql"] for q in queries.captured_queries]
        truncate = next(i for i, sql in enumerate(steps) if sql.startswith("TRUNCATE"))
        restore = next(i for i, sql in enumerate(steps) if "FROM bench_snapshot" in sql)
        zeroed = [i for i, sql in enumerate(steps) if "pg_stat_reset_single_table_counters" in sql]
        assert [i for i in zeroed if truncate < i < restore], steps
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")


def test_the_reference_starts_its_points_from_the_same_tokens_and_no_lock():
    from bench.strategies import reference

    reference.install()
    seeding.seed((("w", 5), ("w", 7), ("v", 3)), "USD")
    try:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO reference_lock VALUES (1, 'left-over', 1, now())")
        database.reset()
        database.reset_reference()
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, wallet, quantity FROM reference_token ORDER BY id")
            restored = cursor.fetchall()
            cursor.execute("SELECT count(*) FROM reference_lock")
            assert cursor.fetchone()[0] == 0
        assert restored == list(
            Token.objects.order_by("id").values_list("id", "wallet", "quantity")
        )
        assert books.unspent_by_wallet(reference=True) == {"w": 12, "v": 3}
        assert books.leaked_locks(reference=True) == 0
        # Every other point leaves the reference's tables empty.
        database.reset()
        assert books.unspent_by_wallet(reference=True) == {}
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")
            cursor.execute(f"DROP TABLE {', '.join(database.REFERENCE_TABLES)}")
            cursor.execute("DROP SEQUENCE reference_fence_seq")
