"""Run the application's own statements on Django's connections, prepared and typed.

Django's cursors bind parameters on the client, so PostgreSQL plans every query afresh; for the
hot statements planning costs more than running them. These run through cursors that send
parameters separately (one per statement on each server connection, reused), which psycopg
prepares on the server once a statement has run ``prepare_threshold`` times on that
connection. Statements are written with named parameters (``%(name)s``) and turned into
PostgreSQL's own ``$1 .. $n`` once, so nothing parses a statement's text on the way out. Django
still logs them (``CaptureQueriesContext``, DEBUG), its execute wrappers still see them, and
driver errors still arrive as ``django.db`` errors, marking the connection for its health check.
"""

from __future__ import annotations

import functools
import re
import select
import threading
import types
from typing import Any

import orjson
import psycopg
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import set_json_loads
from psycopg.types.numeric import Int8Dumper

from common.knobs import knobs

# A cursor per statement on each server connection: psycopg keeps a cursor's adaptation state
# (the dumpers its parameters chose, the loaders of its result's columns) from one execute to
# the next only while the cursor runs the same query, so one cursor alternating between the
# select, the spend and the release rebuilt it at every call. A cursor holds its connection, so
# a closed connection's cursors are dropped here (``_keep``), not by the garbage collector.
_cursors: dict[psycopg.Connection, dict[str, psycopg.RawCursor]] = {}
_lock = threading.Lock()
MAX_CURSORS = 64  # per connection
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")
# SQLSTATEs after which a statement run on its own is run once more: a serialization failure
# and a deadlock. PostgreSQL rolled the statement back whole (in autocommit it is its own
# transaction), so running it again cannot apply anything twice, and the other side of a
# deadlock has gone on meanwhile. Once only: a second failure is answered (503, Retry-After).
RETRIED = frozenset({"40001", "40P01"})


@functools.lru_cache(maxsize=256)
def native(statement: str) -> tuple[str, tuple[str, ...]]:
    """Return ``statement`` with ``$n`` placeholders, and the parameter name of each ``$n``."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PLACEHOLDER.sub(number, statement), tuple(names)


def prepare_threshold() -> int | None:
    """Return after how many runs a statement is prepared (None: never; behind a pooler)."""
    return knobs().prepare_threshold


def cursor(
    statement: str,
    using: str = DEFAULT_DB_ALIAS,
    threshold: int | None = -1,
    connection: BaseDatabaseWrapper | None = None,
) -> psycopg.RawCursor:
    """Return the cursor of ``statement`` (native) on this thread's connection to ``using``.

    Django's health check (``CONN_HEALTH_CHECKS``) costs a ``SELECT 1`` round trip at the first
    query of every request: a fifth of a web worker's busy time on the selection path. Here it
    runs only when the connection shows a sign of trouble, which costs nothing to look at:
    psycopg knows it closed or broken, or the server has said something to an idle connection
    (a server shutting down or restarting sends its sessions a FATAL message and closes them,
    so the socket turns readable). Counted as the request's check, so the ORM skips its own.
    With a pool (``DATABASE_POOL_SIZE``) the same check is made on each connection the pool lends
    (``common.postgres``), and this thread's connection is borrowed here if it holds none.
    ``connection`` is this thread's wrapper for ``using`` when the caller already has it.
    """
    if connection is None:
        connection = connections[using]
    raw = connection.connection
    # health_check_done is set by BaseDatabaseWrapper.__init__; django-stubs does not declare it.
    if raw is not None and not connection.health_check_done:  # type: ignore[attr-defined]
        if raw.closed or raw.broken:
            connection.close()
        elif spoken_to(raw):
            connection.close_if_health_check_failed()
        connection.health_check_done = True  # type: ignore[attr-defined]
    connection.ensure_connection()
    raw = connection.connection
    of_connection = _cursors.get(raw)
    found = None if of_connection is None else of_connection.get(statement)
    if found is None or found.closed:
        raw.prepare_threshold = prepare_threshold() if threshold == -1 else threshold
        found = psycopg.RawCursor(raw)
        # Ids, fences and limits always travel as int8, so that one prepared statement
        # serves every call (psycopg would pick int2, int4 or int8 by value).
        found.adapters.register_dumper(int, Int8Dumper)
        # psycopg's own (compiled) timestamptz loader, in the session's time zone. Django's
        # parses in Python and then labels the wall time UTC, which is right only while the
        # server session's TimeZone is UTC (a pooler's shared session may carry another).
        found.adapters.register_loader("timestamptz", TimestamptzLoader)
        # The statements answer tokens as JSON arrays of ids, indexes, names and quantities
        # (integers of at most 64 bits, which orjson reads exactly): orjson reads them four
        # to five times faster than the standard library.
        set_json_loads(orjson.loads, found)
        _keep(raw, statement, found)
    return found


def _keep(raw: psycopg.Connection, statement: str, found: psycopg.RawCursor) -> None:
    """Keep ``found`` as the cursor of ``statement`` on ``raw``; forget closed connections'.

    Runs at a statement's first call on a connection only, so the sweep is rare: the pool
    replaces its connections now and then (psycopg_pool's ``max_lifetime``), and Django closes
    a thread's own after ``CONN_MAX_AGE``.
    """
    with _lock:
        for gone in [conn for conn in _cursors if conn.closed]:
            del _cursors[gone]
        kept = _cursors.setdefault(raw, {})
        while len(kept) >= MAX_CURSORS:  # the statements are a fixed set: a backstop
            kept.pop(next(iter(kept))).close()
        kept[statement] = found


def release(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Give this thread's connection back to its process's pool; return whether it did.

    For a thread about to sleep (a request waiting for held funds): its next statement borrows
    a connection again. Without a pool (``DATABASE_POOL_SIZE=off``) or inside a transaction the
    connection stays where it is.
    """
    connection = connections[using]
    pooled = bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))
    if not pooled or connection.connection is None or connection.in_atomic_block:
        return False
    connection.close()
    return True


def spoken_to(raw: psycopg.Connection) -> bool:
    """Tell whether the server has sent anything to this idle connection (no wait)."""
    try:
        readable, _, _ = select.select([raw.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


def execute(
    statement: str,
    params: dict[str, Any],
    using: str = DEFAULT_DB_ALIAS,
    threshold: int | None = -1,
    connection: BaseDatabaseWrapper | None = None,
) -> psycopg.RawCursor:
    """Execute ``statement`` with its named ``params``; return the cursor holding its result.

    Without query logging or execute wrappers (``connection.execute_wrapper``), Django's
    cursor wrapper would do no more than what is done here: refuse to run in a broken
    transaction and turn driver errors into ``django.db`` errors. Building that wrapper, walking
    its empty chain of wrappers and looking the connection up twice more are a measurable share
    of a replica's work per select + release cycle, so the wrapper is built only when
    something would see it. ``connection`` is this thread's wrapper for ``using`` when the
    caller already has it.
    """
    if connection is None:
        connection = connections[using]
    text, names = native(statement)
    raw_cursor = cursor(text, using, threshold, connection)
    values = [params[name] for name in names]
    try:
        _run(connection, raw_cursor, text, values)
    except DatabaseError as exc:
        # Inside a transaction the caller's earlier statements were rolled back too: only it
        # may run them again.
        alone = not connection.in_atomic_block and connection.get_autocommit()
        if not alone or getattr(exc.__cause__, "sqlstate", None) not in RETRIED:
            raise
        _run(connection, raw_cursor, text, values)
    return raw_cursor


def _run(
    connection: BaseDatabaseWrapper, raw_cursor: psycopg.RawCursor, text: str, values: list[Any]
) -> None:
    """Execute ``text`` on ``raw_cursor``, through Django's wrappers only if one would see it."""
    if connection.queries_logged or connection.execute_wrappers:
        # Django wraps the driver's own cursor here; django-stubs types it as a wrapper.
        wrapper = (
            connection.make_debug_cursor(_Logged(raw_cursor, text))  # type: ignore[arg-type]
            if connection.queries_logged
            else connection.make_cursor(raw_cursor)  # type: ignore[arg-type]
        )
        wrapper.execute(text, values)
        return
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        raw_cursor.execute(text, values)


class _Logged:
    """A cursor as Django's query log reads it: the statement's text, prepared or not.

    Django logs what psycopg says it sent (``cursor._query``), and psycopg says nothing of a
    statement it ran prepared, so the log would read ``None`` for every hot statement.
    """

    def __init__(self, cursor: psycopg.RawCursor, text: str) -> None:
        self._cursor = cursor
        self._query = types.SimpleNamespace(query=text.encode())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def one(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """Return the row of a statement that always answers exactly one (it aggregates)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("a statement that always answers one row answered none")
    return row
