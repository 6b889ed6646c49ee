"""Django's PostgreSQL backend: generic plans for what it prepares; a pool lending at no cost.

Each new server session is told to plan prepared statements generically at once
(``plan_cache_mode = force_generic_plan``), where the application prepares its statements
(``common.db``; not behind a transaction-pooling proxy). PostgreSQL would otherwise plan each
of them afresh at its first five runs on a session and again after any change to a table it reads
(a TRUNCATE; an ANALYZE, which autovacuum runs on the lock table every few hundred changes)
before settling on the generic plan most of them end up running anyway, and a few it keeps
planning at every call. Django's own statements are never prepared: this changes nothing for
them.

Django's pool (``OPTIONS["pool"]``) checks each connection it lends with psycopg_pool's
``check_connection``, an empty query: a round trip before the first statement of every request,
two of the seven of a select + spend or release cycle. Here a lent connection is checked the
way ``common.db.cursor`` checks a kept one: psycopg knows it closed or broken, or the server has
said something to it while it sat idle (a server shutting down or restarting, or an operator's
``pg_terminate_backend``, sends its sessions a FATAL message and closes them, so the socket
turns readable). Such a connection is closed, which makes the pool drop it, and another is
borrowed. ``config.settings`` turns Django's own check off for this engine
(``CONN_HEALTH_CHECKS``), since this one replaces it.

A web process (``serve``, called by ``config.wsgi``) also gives each new session its
``statement_timeout`` (``SHERDLOCK_STATEMENT_TIMEOUT``): a runaway statement is cancelled
rather than holding one of the pool's connections, which every request of the process shares.
Management commands and workers run long statements of their own (migrations, recounts,
bulk loads) and keep the server's setting.

The pool reports to ``common.breaker`` when it gives up connecting and when it connects; while
its last attempt failed, a request waits for a connection ``breaker.OPEN_WAIT`` seconds, not the
pool's whole timeout, so that a lost database answers 503 at once. The pool gives up after
``RECONNECT_TIMEOUT`` rather than retrying with a backoff of its own: the requests' waits ask it
for connections, so it tries again as soon as a request needs one and connects to a server (a
newly promoted primary) as soon as one answers.
"""

from __future__ import annotations

import time
from typing import Any

from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool, PoolTimeout

from common import breaker, sessions
from common.db import prepare_threshold, spoken_to
from common.knobs import knobs
from common.pool_metrics import POOL_IN_USE, POOL_WAITING

# What a new server session is told when the application prepares statements on it.
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"

# Whether this process serves requests: its sessions get the statement timeout (``serve``).
serving = False


def serve() -> None:
    """Give the sessions this process opens from now on the statement timeout of its requests."""
    global serving
    serving = True


def session_settings() -> list[str]:
    """Return the SETs a new session of this process runs, given its knobs."""
    found = []
    if prepare_threshold() is not None:
        found.append(GENERIC_PLANS)
    timeout = knobs().statement_timeout
    if serving and timeout:
        found.append(f"SET statement_timeout = {max(1, round(timeout * 1000))}")
    return found


# Connections a borrow may find dead in a row before it gives up checking and takes the next
# one as it is (its first statement then fails, and that request answers 503).
MAX_DEAD = 16

# Seconds the pool keeps retrying a failed connection attempt before it gives up and says so to
# the breaker. Its retries back off (1 s, 2 s, 4 s...), which after a failover would keep the
# pool away from the new primary for seconds; given up, the next request's wait retries at once.
RECONNECT_TIMEOUT = 0.0


class DatabaseWrapper(base.DatabaseWrapper):
    """Django's PostgreSQL wrapper: prepared statements planned generically; a pooled
    connection checked without a query."""

    @property
    def pool(self) -> ConnectionPool | None:
        # Django builds the pool from OPTIONS["pool"]; the breaker's hooks are added here, once.
        options = self.settings_dict["OPTIONS"].get("pool")
        if options and self.alias not in self._connection_pools:  # type: ignore[attr-defined]
            given = {} if options is True else options
            self.settings_dict["OPTIONS"]["pool"] = {
                "reconnect_timeout": RECONNECT_TIMEOUT,
                "reconnect_failed": breaker.connect_failed,
                **given,
            }
        return super().pool  # type: ignore[misc]  # Django 5.1's pool; not in django-stubs

    def _configure_connection(self, connection: Any) -> bool:
        # Called once per server session: by the pool as it opens a connection (in autocommit),
        # or by Django's init_connection_state without a pool (which commits if told to).
        # Behind a transaction-pooling proxy a SET would outlive the transaction on a server
        # session the proxy lends to others: nothing is prepared there, and the statement
        # timeout is the role's (docs/configuration.md, SHERDLOCK_STATEMENT_TIMEOUT).
        commit = super()._configure_connection(connection)  # type: ignore[misc]
        breaker.connected()
        if sessions.transaction_pooled():
            return bool(commit)
        found = session_settings()
        if not found:
            return bool(commit)
        with connection.cursor() as cursor:
            for statement in found:
                cursor.execute(statement)
        return True

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        # Django 5.1's pool; django-stubs does not declare it yet.
        pool = self.pool  # type: ignore[attr-defined]
        if pool is None:
            return super().get_new_connection(conn_params)
        pool.open()
        POOL_WAITING.inc()
        try:
            raw = self._borrow(pool)
        finally:
            POOL_WAITING.dec()
        POOL_IN_USE.inc()
        return raw

    def _borrow(self, pool: Any) -> Any:
        deadline = time.monotonic() + pool.timeout
        for _ in range(MAX_DEAD):
            raw = borrow(pool, deadline)
            if not (raw.closed or raw.broken or spoken_to(raw)):
                return raw
            raw.close()  # a closed connection given back is dropped and replaced
            pool.putconn(raw)
        return borrow(pool, deadline)

    def _close(self) -> None:
        # A pooled connection goes back to the pool here (Django's own _close).
        lent = self.connection is not None and self.pool is not None  # type: ignore[attr-defined]
        try:
            super()._close()  # type: ignore[misc]  # not in django-stubs
        finally:
            if lent:
                POOL_IN_USE.dec()

    def _set_autocommit(self, autocommit: bool) -> None:
        # Django sets autocommit on every connection it is lent, and psycopg takes the
        # connection's lock and runs its state machine to set it, even to what it already is.
        # A pooled connection comes back in autocommit (Django's pool opens them so).
        if self.connection.autocommit != autocommit:
            super()._set_autocommit(autocommit)  # type: ignore[misc]  # not in django-stubs


def borrow(pool: ConnectionPool, deadline: float) -> Any:
    """Borrow a connection by ``deadline``; give up sooner once the database is thought gone.

    The wait is cut in slices of ``breaker.OPEN_WAIT`` so that a request already waiting when
    the database goes away stops waiting too. Right after a failed attempt a request first
    waits for the next probe (``breaker.PROBE_INTERVAL``), so that the requests of that spell
    share one attempt instead of each starting its own; if the server answers by then, they
    are served, not refused.
    """
    time.sleep(breaker.until_probe())
    while True:
        wait = max(min(breaker.OPEN_WAIT, deadline - time.monotonic()), 0.001)
        try:
            return pool.getconn(timeout=wait)
        except PoolTimeout:
            if breaker.is_open() or time.monotonic() >= deadline:
                raise
