"""The pooled engine (``common.postgres``): what the pool lends is checked without a query."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from common import db

pytestmark = pytest.mark.django_db(transaction=True)

# Each call returns once its backend has exited (within 10 s), its FATAL message sent.
END_OTHERS = """
SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_connection_the_server_ended_is_not_lent(db_url):
    assert connection.pool is not None, "the default settings pool connections"
    assert not connection.settings_dict["CONN_HEALTH_CHECKS"]  # no check query per borrow
    first = backend_pid()
    db.release()  # back to the pool, idle, as between two requests
    with psycopg.connect(db_url, autocommit=True) as operator:
        ended = operator.execute(END_OTHERS).fetchall()
    assert ended and all(done for (done,) in ended), "the pooled connection's backend ended"
    # Without the check the pool would lend a dead connection and this would fail.
    assert backend_pid() != first
    db.release()


def test_autocommit_is_set_only_when_it_changes(monkeypatch):
    # Django sets autocommit on every connection it is lent; psycopg locks the connection to
    # set it even to what it already is. Only a change reaches the connection.
    connection.ensure_connection()
    raw = connection.connection
    sets = []
    real = type(raw).set_autocommit
    monkeypatch.setattr(
        type(raw), "set_autocommit", lambda conn, value: (sets.append(value), real(conn, value))
    )
    assert raw.autocommit
    connection.set_autocommit(True)  # what every borrow does
    assert sets == []
    connection.set_autocommit(False)
    assert not raw.autocommit
    connection.set_autocommit(True)
    assert raw.autocommit
    assert sets == [False, True]
