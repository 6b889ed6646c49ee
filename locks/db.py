"""Run the application's own statements on Django's connections, prepared and typed.

Django's cursors bind parameters on the client, so PostgreSQL plans every query afresh; for the
hot statements planning costs more than running them. These run through a server-binding cursor
instead (one per server connection, reused), which psycopg prepares on the server once a
statement has run ``prepare_threshold`` times on that connection. They still go through
Django's cursor wrapper, so Django logs them (``CaptureQueriesContext``, DEBUG) and turns driver
errors into ``django.db`` errors, marking the connection for its health check.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.types.numeric import Int8Dumper

_cursors: weakref.WeakKeyDictionary[psycopg.Connection, psycopg.Cursor] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def prepare_threshold() -> int | None:
    """Return after how many runs a statement is prepared (None: never; behind a pooler)."""
    return settings.SHERDLOCK["PREPARE_THRESHOLD"]


def cursor(using: str = DEFAULT_DB_ALIAS, threshold: int | None = -1) -> psycopg.Cursor:
    """Return the server-binding cursor of this thread's connection to ``using``."""
    connection = connections[using]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    found = _cursors.get(raw)
    if found is None or found.closed:
        raw.prepare_threshold = prepare_threshold() if threshold == -1 else threshold
        found = psycopg.Cursor(raw)
        # Ids, fences and limits always travel as int8, so that one prepared statement
        # serves every call (psycopg would pick int2, int4 or int8 by value).
        found.adapters.register_dumper(int, Int8Dumper)
        with _lock:
            _cursors[raw] = found
    return found


def execute(statement: str, params: dict[str, Any], using: str = DEFAULT_DB_ALIAS,
            threshold: int | None = -1) -> psycopg.Cursor:
    """Execute ``statement`` and return the cursor holding its result."""
    connection = connections[using]
    raw_cursor = cursor(using, threshold)
    wrapper = (connection.make_debug_cursor(raw_cursor) if connection.queries_logged
               else connection.make_cursor(raw_cursor))
    wrapper.execute(statement, params)
    return raw_cursor
