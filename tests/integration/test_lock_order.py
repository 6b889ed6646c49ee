"""Lock rows are taken in token-id order by every statement, so none deadlocks with another.

A takeover (the locking statements' insert) waits for lock rows in ascending token id. A
statement that took them in physical order instead (a plain UPDATE or DELETE) could hold a
higher row while waiting for a lower one that the takeover holds while it waits for the
higher: a deadlock, answered 500. These tests put the rows out of physical order, hold the
lower one as a takeover would, and check that the statement under test waits without holding
the higher one.
"""

from __future__ import annotations

import queue
import threading

import psycopg
import pytest
from django.db import connection

from locks import replica
from locks.services import extend_selection, release_selection, select_tokens
from tests.factories import make_tokens
from tests.helpers.blocked import wait_until_blocked

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_replica():
    replica.reset()
    yield
    replica.reset()


def _in_thread(call):
    """Run ``call`` in a thread with its own connection; return (thread, outcome list, the
    connection's backend pid).

    The connection reads tables sequentially, in physical order (on a table this small that is
    a plan the planner may pick anyway; an index scan would meet the rows in key order).
    """
    outcome: list[object] = []
    pids: queue.Queue[int] = queue.Queue()

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET enable_indexscan = off")
                cursor.execute("SET enable_bitmapscan = off")
                pids.put(cursor.connection.info.backend_pid)
            outcome.append(call())
        except Exception as exc:  # reported to the test
            outcome.append(exc)
        finally:
            # The connection goes back to the process's pool: leave no setting behind.
            with connection.cursor() as cursor:
                cursor.execute("RESET enable_indexscan")
                cursor.execute("RESET enable_bitmapscan")
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome, pids.get(timeout=10)


@pytest.mark.parametrize("operation", ["extend", "release"])
def test_waits_for_a_takeover_without_holding_a_higher_row(db_url, operation):
    make_tokens(2, wallet="alice", quantity=5)
    selection, _ = select_tokens("tx-a", "alice", "USD", 10)
    low, high = sorted(selection.token_ids)
    with connection.cursor() as cursor:
        # A new version of the lower row goes after the higher one: a sequential scan now
        # meets the higher token first.
        cursor.execute(
            "UPDATE locks_tokenlock SET created_at = created_at WHERE token_id = %s", [low]
        )
        cursor.execute("SELECT token_id FROM locks_tokenlock ORDER BY ctid")
        assert [row[0] for row in cursor.fetchall()] == [high, low]
    taker = psycopg.connect(db_url, autocommit=True)
    try:
        taker.execute("BEGIN")
        taker.execute("SELECT 1 FROM locks_tokenlock WHERE token_id = %s FOR UPDATE", [low])
        if operation == "extend":
            thread, outcome, pid = _in_thread(lambda: extend_selection("tx-a", 30))
        else:
            thread, outcome, pid = _in_thread(lambda: release_selection("tx-a"))
        wait_until_blocked(pid)  # the statement under test waits for the lower row
        assert thread.is_alive()
        # The takeover goes on to the higher row: free, unless the statement took it first.
        taker.execute("SET LOCAL lock_timeout = '3s'")
        taker.execute("SELECT 1 FROM locks_tokenlock WHERE token_id = %s FOR UPDATE", [high])
        taker.execute("COMMIT")
    finally:
        taker.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
