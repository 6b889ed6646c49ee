"""A statement the database gives up on is a 503 database_busy with Retry-After, never a 500.

Each failure is a real one: a statement cancelled by ``statement_timeout`` while it waits for
a table another session holds, a deadlock between two sessions, a serialization failure between
two SERIALIZABLE transactions. A deadlock or serialization failure of a statement that runs on
its own is run once more (``common.db.execute``); inside a transaction it is answered.
"""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest
from django.db import DataError, OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from common import db
from tests.helpers.blocked import seen_blocked
from tests.helpers.processes import database_url
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)


def _other() -> psycopg.Connection:
    return psycopg.connect(database_url(connection.settings_dict), autocommit=True)


def _assert_busy(response, caplog) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"] == "1"
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    lines = [r for r in caplog.records if "database busy" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.fixture
def table_held():
    """Hold the token table in another session, so that every read of it waits."""
    with _other() as other:
        other.execute("BEGIN")
        other.execute("LOCK TABLE tokens_token IN ACCESS EXCLUSIVE MODE")
        yield
        other.execute("ROLLBACK")


@pytest.fixture
def short_timeout():
    """Give this thread's session a short statement_timeout, and no other session after."""
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '300ms'")
    yield
    # The request gave its connection back to the pool, setting and all: drop them all.
    connection.close()
    if connection.pool is not None:
        connection.close_pool()


CANCELLED_CALLS = [
    ("get", "/api/v1/wallets/alice/balances/", None),  # the ORM
    (
        "post",  # the locking statement (common.db)
        "/api/v1/selections/",
        {"tx_id": "t", "wallet": "alice", "currency": "USD", "quantity": "1"},
    ),
]


@pytest.mark.parametrize(
    "method, url, body", CANCELLED_CALLS, ids=[u for _, u, _ in CANCELLED_CALLS]
)
def test_a_statement_cancelled_by_its_timeout_answers_503(
    api, caplog, method, url, body, short_timeout, table_held
):
    caplog.clear()
    response = getattr(api, method)(url, body, format="json")
    _assert_busy(response, caplog)
    assert response.json()["code"] == "database_busy"


def test_an_admin_page_whose_statement_is_cancelled_answers_503(
    admin_client, caplog, short_timeout, table_held
):
    caplog.clear()
    response = admin_client.get("/admin/tokens/token/")
    _assert_busy(response, caplog)
    assert response["Content-Type"].startswith("text/plain")


# Takes two advisory locks, the first before the second, in one statement: the application's
# way into a deadlock with a session that takes them the other way round. Heavyweight locks are
# granted in queue order, so once the statement is cancelled the other session has the first
# lock before a retry can ask for it, and a retry waits for it instead of deadlocking again.
BOTH_LOCKS = """
SELECT true FROM (SELECT pg_advisory_xact_lock(%(first)s::bigint) OFFSET 0) a,
                 (SELECT pg_advisory_xact_lock(%(second)s::bigint) OFFSET 0) b
"""
FIRST, SECOND = 5_900_001, 5_900_002


def _deadlock(run) -> list[object]:
    """Deadlock ``run`` (a call running BOTH_LOCKS, in a thread) with another session.

    The other session holds the second lock, waits until the statement holds the first and
    waits for the second, then asks for the first. Its deadlock_timeout is the longer, so the
    statement is the one PostgreSQL cancels. Returns what ``run`` returned or raised.
    """
    outcome: list[object] = []
    pid: list[int] = []
    ready = threading.Event()

    def app() -> None:
        try:
            connection.ensure_connection()
            pid.append(connection.connection.info.backend_pid)
            ready.set()
            outcome.append(run({"first": FIRST, "second": SECOND}))
        except Exception as exc:  # reported to the test
            outcome.append(exc)
        finally:
            connection.close()

    with _other() as other, _other() as observer:
        other.execute("SET deadlock_timeout = '60s'")
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (SECOND,))
        thread = threading.Thread(target=app)
        thread.start()
        assert ready.wait(30)
        seen_blocked(observer, pid[0])
        # Returns once PostgreSQL has cancelled the statement (its deadlock check runs first).
        other.execute("SELECT pg_advisory_xact_lock(%s)", (FIRST,))
        other.execute("COMMIT")
        thread.join(60)
        assert not thread.is_alive()
    return outcome


def test_a_deadlocked_statement_on_its_own_is_run_again():
    outcome = _deadlock(lambda params: db.one(db.execute(BOTH_LOCKS, params)))
    assert outcome == [(True,)]


def test_a_deadlock_inside_a_transaction_is_answered_503(api, caplog, monkeypatch):
    def in_transaction(params):
        with transaction.atomic():
            return db.execute(BOTH_LOCKS, params)

    (raised,) = _deadlock(in_transaction)
    assert isinstance(raised, OperationalError)
    assert isinstance(raised.__cause__, psycopg.errors.DeadlockDetected)
    _answers_busy(api, caplog, monkeypatch, raised)


def _answers_busy(api, caplog, monkeypatch, raised: Exception) -> None:
    """Check that ``raised``, raised by a view, is answered 503 database_busy."""

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr("tokens.views.balances", fail)
    caplog.clear()
    response = api.get("/api/v1/wallets/alice/balances/")
    _assert_busy(response, caplog)
    assert response.json()["code"] == "database_busy"


WRITE = "UPDATE tokens_token SET"


def _serialization_failure() -> OperationalError:
    """Fail a SERIALIZABLE transaction of this connection against another one; return it."""
    Token.objects.bulk_create(
        Token(tx_id="d", index=i, wallet="alice", currency="USD", quantity=5) for i in (0, 1)
    )
    with _other() as other:
        other.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        other.execute("SELECT sum(quantity) FROM tokens_token WHERE tx_id = 'd'")
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                cursor.execute("SELECT sum(quantity) FROM tokens_token WHERE tx_id = 'd'")
                cursor.execute(
                    "UPDATE tokens_token SET quantity = 6 WHERE tx_id = 'd' AND index = 0"
                )
                other.execute(
                    "UPDATE tokens_token SET quantity = 7 WHERE tx_id = 'd' AND index = 1"
                )
                other.execute("COMMIT")
                cursor.execute("SELECT 1")
        except OperationalError as exc:
            return exc
    raise AssertionError("no serialization failure")


def test_a_serialization_failure_is_answered_503(api, caplog, monkeypatch):
    raised = _serialization_failure()
    assert isinstance(raised.__cause__, psycopg.errors.SerializationFailure)
    _answers_busy(api, caplog, monkeypatch, raised)


def test_a_statement_that_fails_otherwise_is_not_run_again():
    with CaptureQueriesContext(connection) as queries, pytest.raises(DataError) as raised:
        db.execute("SELECT 1 / 0", {})
    assert getattr(raised.value.__cause__, "sqlstate", None) == "22012"
    assert len(queries) == 1
