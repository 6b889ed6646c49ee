"""How many requests may wait for held funds at once in one process (``locks.waiting``).

The slots are shared by every client, and one client's share is capped (``Slots``).
"""

from __future__ import annotations

import math
import os
import threading
from collections import Counter

# Requests one process lets wait for held funds at once (Prefer: wait), whoever sends them: enough
# for a burst of payments from one wallet to queue rather than retry, few enough that waiting
# requests never take a web worker's threads (see wait_slots: a worker keeps some free anyway).
WAIT_SLOTS = 120
# Threads of a web worker that waiting requests never take, so that the spends and releases
# that move the queues on always find one (half of them in a worker of 16 threads or fewer).
THREADS_KEPT_FREE = 8


def wait_slots(configured: int, threads: int | None) -> int:
    """Return how many requests may wait at once in a process of ``threads`` threads.

    ``configured`` is ``WAIT_SLOTS``; ``threads`` the web worker's thread count (None
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


# The share of the slots one client may hold of those the other clients leave it. A slot is held
# for as long as its request waits, and a client that came first and took every slot would leave
# every other client's patient request to answer funds_locked at once until its waits ended.
# Capped, a client waiting alone still has most of a process's slots (a chain of its own
# payments waits as before), and each client leaves a quarter of the slots it found (at least
# one, when it found more than one) to the clients that come after it.
CLIENT_SHARE = 0.75


def client_cap(left: int) -> int:
    """Return how many slots a client may hold when the other clients leave it ``left``.

    Never all of them, unless a single one (one slot cannot be shared), and at least one while
    any is left.
    """
    if left <= 0:
        return 0
    return max(1, min(left - 1, math.ceil(left * CLIENT_SHARE)))


class Slots:
    """The wait slots of one process, each held by a client (a namespace of API keys)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()
        self._total = 0

    def take(self, client: str) -> bool:
        """Take a slot for a request of ``client``; False if none is free for it now."""
        with self._lock:
            mine = self._held[client]
            if mine >= client_cap(self.count - (self._total - mine)):
                return False
            self._held[client] = mine + 1
            self._total += 1
            return True

    def give_back(self, client: str) -> None:
        """Give back a slot ``client`` took."""
        with self._lock:
            self._total -= 1
            self._held[client] -= 1
            if not self._held[client]:
                del self._held[client]

    def held(self, client: str) -> int:
        """Return how many slots ``client`` holds."""
        with self._lock:
            return self._held[client]
