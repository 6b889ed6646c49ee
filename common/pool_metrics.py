"""How the process's connection pool is used: connections lent out, and borrowers waiting.

Kept by the engine (``common.postgres``) as it lends and takes back connections, so the
numbers are the process's own at every moment: per process under ``PROMETHEUS_MULTIPROC_DIR``
(a pid label, live processes only). A pool whose connections are all lent, with borrowers
waiting, is the first sign that ``DATABASE_POOL_SIZE`` (or the server) is too small: a
borrower waits up to 30 s, then its request is answered 503.
"""

from __future__ import annotations

from prometheus_client import Gauge

POOL_IN_USE = Gauge(
    "sherdlock_db_pool_connections_in_use",
    "Connections of this process's pool lent to a request or task.",
    multiprocess_mode="liveall",
)
POOL_WAITING = Gauge(
    "sherdlock_db_pool_waiting",
    "Borrowers of this process waiting for a connection of its pool.",
    multiprocess_mode="liveall",
)
