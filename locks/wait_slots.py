"""How many requests may wait for held funds at once in one process (``locks.waiting``)."""

from __future__ import annotations

import os

# Threads of a web worker that waiting requests never take, so that the spends and releases
# that move the queues on always find one (half of them in a worker of 16 threads or fewer).
THREADS_KEPT_FREE = 8


def wait_slots(configured: int, threads: int | None) -> int:
    """Return how many requests may wait at once in a process of ``threads`` threads.

    ``configured`` is the WAIT_SLOTS knob; ``threads`` the web worker's thread count (None
    outside a web worker: no cap). A worker whose threads could all park would leave no thread
    for the spend that frees the funds, and every waiter would wait out its deadline.
    """
    if threads is None:
        return configured
    spare = threads - THREADS_KEPT_FREE if threads > 2 * THREADS_KEPT_FREE else threads // 2
    return max(0, min(configured, spare))


def worker_threads() -> int | None:
    """Return this web worker's thread count (set by ``config/gunicorn.py``), else None."""
    value = os.environ.get("WEB_THREADS", "")
    return int(value) if value.isdigit() else None
