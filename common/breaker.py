"""Whether this process last failed to reach the database: requests then fail at once.

When the database is gone for good (its machine lost, a primary awaiting promotion), waiting
for a pooled connection would park each request for the pool's whole timeout before its 503,
and under load every thread of every worker with it. The pool tells the breaker when it gave
up connecting and when it connected (``common.postgres``); while the last attempt failed, a
request waits for a connection only ``OPEN_WAIT`` seconds. Its wait still asks the pool for a
connection, so each request is also a probe: once a server answers, the next request connects
and the breaker closes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

# How long a request waits for a connection while the database is thought gone: enough for a
# connection attempt to a server that answers again (milliseconds), short enough that a client
# gets its 503 well within a second.
OPEN_WAIT = 0.25
# How soon after a failed attempt a request may ask the pool to try again: requests arriving in
# between wait for that moment and share its attempt, instead of starting one each (two warnings
# in the log and, on a server starting up, a refused session each), so that a process tries a
# few times a second.
PROBE_INTERVAL = 0.25

_lock = threading.Lock()
_failed_at: float | None = None


def connect_failed(pool: Any = None) -> None:
    """Note that connecting failed (psycopg_pool's ``reconnect_failed`` callback)."""
    global _failed_at
    with _lock:
        _failed_at = time.monotonic()


def connected() -> None:
    """Note that a connection was made: the database answers."""
    global _failed_at
    if _failed_at is not None:
        with _lock:
            _failed_at = None


def is_open() -> bool:
    """Tell whether the last connection attempt failed (and none succeeded since)."""
    return _failed_at is not None


def until_probe() -> float:
    """Return how long until the next attempt may be made (0 unless the last one failed)."""
    failed = _failed_at
    if failed is None:
        return 0.0
    return max(0.0, failed + PROBE_INTERVAL - time.monotonic())


def failed_at() -> float | None:
    """Return when the last failed attempt gave up (monotonic), None if none since a success."""
    return _failed_at
