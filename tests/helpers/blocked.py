"""Waiting for a database session to block: how a test knows it forced the interleaving."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.helpers.processes import wait_for

if TYPE_CHECKING:
    import psycopg


def wait_until_blocked(pid: int, lock: str | None = None) -> None:
    """Wait until session ``pid`` waits for a lock (of kind ``lock``, e.g. "advisory", "tuple",
    "transactionid"), as ``pg_stat_activity`` shows; fail if it never does.

    A sleep before checking that a thread is still running passes on a loaded machine
    whether or not the thread got as far as the lock: this fails unless it did.
    """
    from django.db import connection

    def blocked() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", [pid]
            )
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock" and lock in (None, row[1])

    wait_for(blocked, f"session {pid} to wait for a {lock or 'lock'}")


def seen_blocked(observer: psycopg.Connection, pid: int) -> None:
    """Wait until session ``pid`` waits for a lock, as an autocommit ``observer`` sees it.

    For a test whose own connection is inside a transaction, where ``pg_stat_activity`` would
    answer the snapshot it took first, not the session's state now.
    """

    def blocked() -> bool:
        row = observer.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        return row is not None and row[0] == "Lock"

    wait_for(blocked, f"session {pid} to wait for a lock: the interleaving was not forced")
