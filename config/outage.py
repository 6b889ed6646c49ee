"""A lost database: how to recognise it, and how to log it once per request, not a traceback.

Imports only ``django.db``: the logging filter here is built while Django configures logging,
before the apps are loaded.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError, connections

logger = logging.getLogger("config.exceptions")

# Seconds a client should wait before retrying while the database is unreachable.
UNAVAILABLE_RETRY_AFTER = "1"
# SQLSTATEs of a server going away: admin shutdown, crash shutdown, cannot connect now (starting
# up, shutting down, in recovery). Class 08 is "connection exception".
SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


def is_connection_loss(exc: BaseException | None) -> bool:
    """Tell whether ``exc`` means the database cannot be reached (not a bug, not bad input).

    Django wraps the driver's error and keeps it as ``__cause__``: a client-side failure (no
    SQLSTATE: refused, reset, closed) or a server going away counts; a statement timeout, a
    deadlock or a serialization failure (also OperationalError) does not.
    """
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in SERVER_GONE


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def note_connection_loss(request, exc: BaseException) -> None:
    """Log one line for a request that lost the database, and drop the broken connections.

    Closing them makes the next request connect afresh instead of failing on a dead socket
    (with persistent connections, ``CONN_MAX_AGE`` > 0, they would otherwise be reused).
    """
    method, path = getattr(request, "method", "?"), getattr(request, "path", "?")
    logger.warning("database unavailable, answered 503 to %s %s: %s", method, path, first_line(exc))
    for connection in connections.all(initialized_only=True):
        connection.close()


class ConnectionLossFilter(logging.Filter):
    """Strip the traceback from log records about a lost database connection.

    Errors raised in middleware reach Django's request logger with their traceback; during an
    outage every request would print one. The record keeps its message and the error's first
    line, as a warning.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_connection_loss(exc):
            record.msg = f"{record.getMessage()} (database unavailable: {first_line(exc)})"
            record.args = ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
