"""Keep a replica's token cache current from the change notifications the database publishes.

Triggers (migration ``locks.0003_change_notifications``) send one NOTIFY per statement and
(wallet, currency) on ``CHANNEL`` when tokens are issued or spent and when locks are taken or
removed. NOTIFY is delivered after commit and in commit order, so a listener only hears of
changes that happened, in the order they happened. The cache stays a hint: a notification that
is lost or arrives late costs a failed lock attempt or a fetch, never a wrong selection, because
every store statement checks the token and lock rows itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import select
import socket
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from django.db import DEFAULT_DB_ALIAS
from psycopg import sql

from common import sessions
from locks import metrics
from sherdlock import Candidate, TokenCache, WalletKey

log = logging.getLogger(__name__)

CHANNEL = "sherdlock_tokens"
APPLICATION_NAME = "sherdlock-listener"

# A server that vanished without closing the socket (host down, network cut) is noticed by TCP
# keepalives within about idle + interval * count seconds; without them a listener would wait
# on a dead socket forever while its cache silently stops learning. The connect timeout keeps
# an unreachable server from holding a reconnection (and stop()) for minutes.
CONNECTION_DEFAULTS = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "connect_timeout": 10,
}

Connect = Callable[[], psycopg.Connection]


def django_connect(alias: str = DEFAULT_DB_ALIAS) -> Connect:
    """Return a factory of dedicated autocommit connections to the database of Django's `alias`.

    Parameters are read at every (re)connection, so the listener follows the store's database.
    A LISTEN needs a session of its own: behind a transaction-pooling proxy these connect to
    ``DATABASE_DIRECT_URL`` instead (``common.sessions``).
    """

    def connect() -> psycopg.Connection:
        return sessions.connect(
            alias, application_name=APPLICATION_NAME, defaults=CONNECTION_DEFAULTS
        )

    return connect


@dataclass
class ListenerStats:
    """Count what one listener did; read by tests and benchmarks."""

    received: Counter[str] = field(default_factory=Counter)
    connects: int = 0
    reconnects: int = 0
    invalidations: int = 0


class CacheListener:
    """Apply token and lock changes published by the database to one TokenCache, from a thread.

    Run one per replica process, on its own connection: a LISTEN session must stay open and
    idle, so it cannot be a connection that also serves queries. Every (re)connection drops
    every cached queue once LISTEN is in place, because changes made while nobody listened are
    unknown. The cache's ttl is its own while connected and `fallback_ttl` (if given) while not:
    a long ttl is safe only while news keeps the queues current. Announced tokens join a queue
    only while it holds fewer than `queue_limit` tokens.
    """

    def __init__(
        self,
        cache: TokenCache,
        connect: Connect,
        *,
        channel: str = CHANNEL,
        poll_interval: float = 1.0,
        backoff: tuple[float, float] = (0.05, 5.0),
        fallback_ttl: float | None = None,
        queue_limit: int | None = 256,
        rng: random.Random | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        if not 0 < backoff[0] <= backoff[1]:
            raise ValueError(f"backoff must be 0 < min <= max seconds, got {backoff!r}")
        if fallback_ttl is not None and not fallback_ttl > 0:
            raise ValueError(f"fallback_ttl must be positive, got {fallback_ttl!r}")
        if queue_limit is not None and queue_limit < 1:
            raise ValueError(f"queue_limit must be positive, got {queue_limit!r}")
        self.cache = cache
        self.channel = channel
        self.poll_interval = poll_interval
        self.stats = ListenerStats()
        self.backend_pid: int | None = None  # of the listening session, while connected
        self._connect = connect
        self._backoff = backoff
        self._listening_ttl = cache.ttl
        self._fallback_ttl = fallback_ttl
        self._queue_limit = queue_limit
        self._rng = rng if rng is not None else random.Random()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner_pid = os.getpid()
        # stop() writes to the pair to wake the thread at once, not after a poll interval.
        self._wake: tuple[socket.socket, socket.socket] | None = None

    @property
    def connected(self) -> bool:
        """Tell whether the listener is listening right now."""
        return self._connected.is_set()

    @property
    def running(self) -> bool:
        """Tell whether the listener thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start listening from a daemon thread; the cache uses the fallback ttl until then."""
        if self._thread is not None:
            raise RuntimeError("listener already started")
        self._set_ttl(self._fallback_ttl)
        self._wake = socket.socketpair()
        self._wake[1].setblocking(False)
        self._thread = threading.Thread(target=self._run, name="sherdlock-listener", daemon=True)
        self._thread.start()

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until the listener is listening; return whether it is."""
        return self._connected.wait(timeout)

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread and close its connection; return whether it ended within `timeout`."""
        if os.getpid() != self._owner_pid:
            # Inherited through fork: the thread stayed in the parent, and the socket and the
            # connection are the parent's. Touching them would stop or break the parent's.
            return True
        self._stop.set()
        if self._wake is not None:
            # A full buffer means a wake-up is already pending; a closed one, nobody to wake.
            with contextlib.suppress(OSError):
                self._wake[1].send(b"\0")
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        stopped = thread is None or not thread.is_alive()
        if stopped and self._wake is not None:
            for end in self._wake:
                end.close()
        return stopped

    def apply(self, payload: str) -> str:
        """Apply one notification payload to the cache; return its event name."""
        try:
            event = self._apply(json.loads(payload))
        except (ValueError, KeyError, TypeError) as exc:
            # Something we cannot read may have announced anything: forget everything.
            log.warning(
                "unreadable notification %.200r (%s): dropping every cached queue", payload, exc
            )
            event = "invalid"
            self._invalidate(None)
        self.stats.received[event] += 1
        metrics.LISTENER_NOTIFICATIONS.labels(event=event).inc()
        return event

    def _apply(self, message: dict) -> str:
        """Update the cache from one decoded message; raise on anything malformed."""
        event = message["event"]
        if event == "reset":
            self._invalidate(None)
            return event
        key = WalletKey(str(message["wallet"]), str(message["currency"]))
        if event in ("issued", "released"):
            candidates = [
                Candidate(int(token_id), int(quantity)) for token_id, quantity in message["tokens"]
            ]
            # Only keys this replica has a queue for: queues for every wallet in the system
            # would evict the ones in use; a replica with no queue fetches anyway. Every
            # replica hears of the same tokens in the same order: appended, they would be
            # tried by all replicas at once, so each puts them at random places. The limit
            # keeps a busy wallet's queue from growing towards the whole wallet.
            self.cache.add(key, candidates, create=False, rng=self._rng, limit=self._queue_limit)
        elif event in ("spent", "locked"):
            # Our own locks come back too; they already left the queue, so this is a no-op.
            self.cache.discard(key, [int(token_id) for token_id in message["ids"]])
        elif event == "overflow":
            self._invalidate(key)
        else:
            raise ValueError(f"unknown event {event!r}")
        return str(event)

    def _invalidate(self, key: WalletKey | None) -> None:
        """Drop the queue of `key`, or every queue, and count it."""
        self.cache.invalidate(key)
        self.stats.invalidations += 1
        metrics.LISTENER_INVALIDATIONS.labels(scope="all" if key is None else "key").inc()

    def _set_ttl(self, ttl: float | None) -> None:
        """Give the cache `ttl`, unless it is None (the cache keeps its own)."""
        if ttl is not None:
            self.cache.ttl = ttl

    def _run(self) -> None:
        """Listen until stopped, reconnecting with jittered exponential backoff."""
        delay = self._backoff[0]
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                self._listen(conn)
                delay = self._backoff[0]  # the session ended because we were told to stop
            except Exception as exc:  # anything, so that the thread never dies silently
                if self._stop.is_set():
                    break
                if self.connected:
                    delay = self._backoff[0]  # it worked until now: retry soon
                log.warning(
                    "cache listener lost its connection (%s); retrying in <= %.2fs",
                    exc,
                    delay,
                    exc_info=not isinstance(exc, psycopg.Error | OSError),
                )
            finally:
                self._disconnected(conn)
            if self._stop.wait(self._rng.uniform(delay / 2, delay)):
                break
            delay = min(delay * 2, self._backoff[1])

    def _listen(self, conn: psycopg.Connection) -> None:
        """LISTEN on `conn`, drop what the cache may have missed, then apply news until stopped."""
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        # Changes committed before LISTEN took effect were never heard; cached queues may
        # predate them. From here on nothing is missed, so start over once.
        self._invalidate(None)
        self.stats.connects += 1
        if self.stats.connects > 1:
            self.stats.reconnects += 1
            metrics.LISTENER_RECONNECTS.inc()
        self.backend_pid = conn.info.backend_pid
        self._set_ttl(self._listening_ttl)
        self._connected.set()
        metrics.LISTENER_CONNECTED.labels(listener="cache").set(1)
        log.info("cache listener listening on %s (backend %s)", self.channel, self.backend_pid)
        assert self._wake is not None
        wake = self._wake[0]
        while not self._stop.is_set():
            ready, _, _ = select.select([conn.fileno(), wake], [], [], self.poll_interval)
            if wake in ready:
                wake.recv(64)
                continue
            if ready:
                # The socket is readable: take what arrived without blocking. A closed or
                # broken connection raises here.
                for notify in conn.notifies(timeout=0):
                    self.apply(notify.payload)

    def _disconnected(self, conn: psycopg.Connection | None) -> None:
        """Mark the listener as not listening and close `conn`."""
        self._connected.clear()
        metrics.LISTENER_CONNECTED.labels(listener="cache").set(0)
        self.backend_pid = None
        self._set_ttl(self._fallback_ttl)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken; nothing more to release
                log.debug("closing the listener connection failed", exc_info=True)
