"""The statement cursors (``common.db``): what they read back from PostgreSQL, which are kept."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from django.db import DataError, ProgrammingError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from common import db

pytestmark = pytest.mark.django_db(transaction=True)

INSTANT = datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=UTC)


def read_back(zone: str) -> datetime:
    db.execute("SELECT set_config('TimeZone', %(zone)s::text, false)", {"zone": zone})
    try:
        return db.one(db.execute("SELECT %(at)s::timestamptz", {"at": INSTANT}))[0]
    finally:
        db.execute("SELECT set_config('TimeZone', 'UTC', false)", {})


def test_times_are_read_as_the_instant_they_are():
    at = read_back("UTC")
    assert at == INSTANT
    assert at.utcoffset().total_seconds() == 0


def test_times_keep_their_instant_whatever_the_sessions_time_zone():
    # A server session shared through a transaction pooler may carry another TimeZone; the
    # answer's times must still be the same instants (not the local wall time marked UTC).
    at = read_back("Asia/Kolkata")
    assert at == INSTANT
    assert at.astimezone(UTC).isoformat() == "2026-01-01T10:00:00.123456+00:00"


ONE = "SELECT %(n)s::bigint[] AS ids"
OTHER = "SELECT %(n)s::bigint + 1 AS next"


def test_each_statement_keeps_a_cursor_of_its_own():
    # psycopg keeps a cursor's adaptation state between executes only while it runs the same
    # query, so statements that alternate on one connection each get a cursor of their own.
    first = db.execute(ONE, {"n": [1, 2]})
    other = db.execute(OTHER, {"n": 1})
    again = db.execute(ONE, {"n": [3]})
    assert again is first
    assert other is not first
    assert db.one(again) == ([3],)
    assert db.one(other) == (2,)  # the other cursor's result is still there to read


def test_a_connection_keeps_a_bounded_number_of_statement_cursors(monkeypatch):
    monkeypatch.setattr(db, "MAX_CURSORS", 2)
    oldest = db.execute("SELECT 1 AS a", {})
    db.execute("SELECT 2 AS b", {})
    db.execute("SELECT 3 AS c", {})  # a third statement pushes out the oldest's cursor
    assert oldest.closed
    assert db.one(db.execute("SELECT 1 AS a", {})) == (1,)


def test_a_closed_connections_cursors_are_let_go():
    # A cursor holds its connection: kept forever, every connection the pool ever replaced
    # would stay in memory with its cursors and their last results.
    first = db.execute(ONE, {"n": [1]})
    old = first.connection
    old.close()  # as the pool does to a connection past its lifetime
    connection.close()  # Django's side lets go of it; the next statement gets another
    # A statement's first call on a connection keeps its cursor, and sweeps the closed ones.
    assert db.one(db.execute("SELECT %(n)s::bigint + 2 AS swept", {"n": 1})) == (3,)
    assert old not in db._cursors


def test_driver_errors_arrive_as_djangos_without_query_logging(settings):
    settings.DEBUG = False
    assert not connection.queries_logged and not connection.execute_wrappers
    with pytest.raises(DataError) as raised:
        db.execute("SELECT %(n)s::bigint / 0 AS none", {"n": 1})
    assert isinstance(raised.value.__cause__, psycopg.errors.DivisionByZero)
    with pytest.raises(ProgrammingError) as raised:
        db.execute("SELECT n FROM no_such_table WHERE n = %(n)s", {"n": 1})
    assert isinstance(raised.value.__cause__, psycopg.errors.UndefinedTable)
    # Django's error wrapper also marks the connection for its next health check.
    assert connection.errors_occurred


def test_a_broken_transaction_refuses_statements_without_query_logging(settings):
    settings.DEBUG = False
    with transaction.atomic():
        connection.needs_rollback = True
        with pytest.raises(TransactionManagementError):
            db.execute("SELECT %(n)s::bigint AS n", {"n": 1})
        connection.needs_rollback = False


def test_execute_wrappers_and_query_logging_see_each_statement(settings):
    settings.DEBUG = False
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        assert db.one(db.execute("SELECT %(n)s::bigint AS n", {"n": 7})) == (7,)
    assert seen == ["SELECT $1::bigint AS n"]
    with CaptureQueriesContext(connection) as captured:
        db.execute("SELECT %(n)s::bigint AS n", {"n": 8})
    assert [query["sql"] for query in captured.captured_queries] == ["SELECT $1::bigint AS n"]
