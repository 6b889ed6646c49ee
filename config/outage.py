"""A lost or overloaded database: how to recognise it, and how to log it once, not a traceback.

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
# Seconds a client should wait before retrying a statement the database gave up on.
BUSY_RETRY_AFTER = "1"
# SQLSTATEs of a statement the database gave up on while it is reachable: a serialization
# failure and a deadlock (class 40, the transaction was rolled back; running it again may
# succeed) and a cancelled statement (statement_timeout, an operator's pg_cancel_backend) or a
# lock wait that timed out (lock_timeout). None is the request's fault, and none is a bug of
# its own: the database was too busy to answer it now.
TRANSIENT = frozenset({"40001", "40P01"})
GAVE_UP = TRANSIENT | {"57014", "55P03"}


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


def sqlstate_of(exc: BaseException | None) -> str | None:
    """Return the SQLSTATE of a database error (Django's, or the driver's own), else None."""
    if exc is None:
        return None
    found = getattr(exc, "sqlstate", None)
    return found if found is not None else getattr(exc.__cause__, "sqlstate", None)


def is_transient(exc: BaseException | None) -> bool:
    """Tell whether ``exc`` rolled back a statement that may succeed if run again at once."""
    return isinstance(exc, OperationalError) and sqlstate_of(exc) in TRANSIENT


def is_overload(exc: BaseException | None) -> bool:
    """Tell whether ``exc`` means the database gave up on a statement: busy, not unreachable.

    A deadlock, a serialization failure, a statement cancelled by ``statement_timeout`` or a
    lock wait past ``lock_timeout``: answered 503 with Retry-After, never 500.
    """
    return isinstance(exc, OperationalError) and sqlstate_of(exc) in GAVE_UP


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


def note_overload(request, exc: BaseException) -> None:
    """Log one line for a request whose statement the database gave up on."""
    method, path = getattr(request, "method", "?"), getattr(request, "path", "?")
    logger.warning("database busy, answered 503 to %s %s: %s", method, path, first_line(exc))


class ConnectionLossFilter(logging.Filter):
    """Strip the traceback from log records about a lost or overloaded database.

    Errors raised in middleware reach Django's request logger with their traceback; during an
    outage every request would print one. The record keeps its message and the error's first
    line, as a warning.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and (is_connection_loss(exc) or is_overload(exc)):
            what = "unavailable" if is_connection_loss(exc) else "busy"
            record.msg = f"{record.getMessage()} (database {what}: {first_line(exc)})"
            record.args = ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
