"""The process's wait queues for held funds: a queue per wallet/currency, served in arrival order.

A request that may wait (``Prefer: wait=N``) and finds the funds held by others joins its key's
queue (``locks.sql.waiting``) and sleeps (``locks.wait_loop``). Only the queue's head, its oldest
live waiter, tries again: when something frees that key's funds, the statement that did it
notifies the head by name, this process's listener wakes exactly that request, and it selects.
A request that gives up leaves, which names the next head; one that is served leaves silently,
since it now holds the funds: the spend or release that frees them names the next head. Nobody
starves: a later waiter never goes first.

``Queues`` is what one process knows of them: every queue's head, kept current by a listener
thread, and its own waiting requests (``Ticket``), its wait slots (``locks.wait_slots``), the
first tries and the joins under way. Requests of one process that arrive together for a key
nobody waits for yet make one try between them (``Queues.first_try``): the others wait for its
outcome, and when it found the funds held they join the queue behind it without trying
themselves. Joins arriving while one of their key is under way go together in the next
statement (``Queues.join``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import select
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
from psycopg import sql as pgsql

from common import db
from locks import metrics
from locks.listener import django_connect
from locks.sql import waiting as queries
from locks.wait_slots import WAIT_SLOTS, Slots, wait_slots, worker_threads
from sherdlock import WalletKey

log = logging.getLogger(__name__)

# Seconds a waiter sleeps before it looks again by itself: the head re-selects, the others
# re-read who heads their queue (a head whose process died stops counting at its deadline).
POLL = 1.0

# Locks that keep one join statement per key under way in a process (keys hash to one of them).
SENDING_LOCKS = 16


@dataclass
class Try:
    """A first try at a key's funds under way in this process, and whether it found them held."""

    done: threading.Event = field(default_factory=threading.Event)
    locked: bool = False


@dataclass
class Joining:
    """Requests of this process joining a key's queue in one statement, in arrival order."""

    seconds: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    ids: list[int] = field(default_factory=list)
    failed: BaseException | None = None


def _own(failure: BaseException) -> BaseException:
    """Copy a join's error for one request: one instance raised in many threads mixes tracebacks."""
    try:
        own = copy.copy(failure)
    except Exception:  # an error that cannot be rebuilt from its arguments
        return failure
    own.__cause__ = failure  # where it was raised
    return own


@dataclass
class Ticket:
    """One waiting request's place in its key's queue."""

    id: int
    key: WalletKey
    woken: threading.Event = field(default_factory=threading.Event)


class Queues:
    """What this process knows of every queue's head, and its own waiting requests.

    One listener thread per process keeps the heads current from the notifications on
    ``queries.CHANNEL`` and wakes the local request a notification names.
    """

    def __init__(self, slots: int = 16) -> None:
        # Waiting requests park threads; the slots leave the rest of a worker's threads to
        # the requests that move a queue on (spends, releases), which must never wait behind
        # the requests waiting for them. One client's requests hold a capped share of them.
        self.slots = Slots(slots)
        self._lock = threading.Lock()
        self._heads: dict[WalletKey, int] = {}
        self._local: dict[int, Ticket] = {}
        self._trying: dict[WalletKey, Try] = {}
        self._joining: dict[WalletKey, Joining] = {}  # the batch still open, per key
        # One set per statement under way that reads heads (a join, a refresh): the keys
        # notifications were heard about meanwhile (None: every key, the listener reconnected).
        self._reading: list[set[WalletKey | None]] = []
        self._sending = [threading.Lock() for _ in range(SENDING_LOCKS)]
        self._refreshed: float | None = None  # when the heads were last read (monotonic)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._pid = os.getpid()

    # -- what requests use -------------------------------------------------------------

    def start(self, timeout: float = 5.0) -> bool:
        """Listen from a daemon thread (once per process); return whether it is listening."""
        with self._lock:
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._ready.clear()
                self._thread = threading.Thread(target=self._run, name="sherdlock-waiting")
                self._thread.daemon = True
                self._thread.start()
        return self._ready.wait(timeout)

    def queued(self, key: WalletKey) -> bool:
        """Tell whether requests of ``key`` are waiting (a newcomer must queue behind them)."""
        with self._lock:
            return key in self._heads

    def first_try(self, key: WalletKey) -> tuple[Try, bool]:
        """Return the try at ``key`` under way here, and whether the caller is to make it.

        The caller that is (no try was under way) tells its outcome with ``tried``.
        """
        with self._lock:
            found = self._trying.get(key)
            if found is not None:
                return found, False
            found = self._trying[key] = Try()
            return found, True

    def tried(self, key: WalletKey, attempt: Try) -> None:
        """Tell the others waiting on a first try at ``key`` its outcome (``attempt.locked``)."""
        with self._lock:
            if self._trying.get(key) is attempt:
                del self._trying[key]
        attempt.done.set()

    def join(self, key: WalletKey, seconds: float) -> Ticket:
        """Take a place at the end of the queue of ``key`` for at most ``seconds``.

        Requests of this process join a key's queue one statement at a time: those that arrive
        while a statement is under way join together in the next one (the first of them sends
        it), so a burst of joins costs a few statements, not one each. A request gives its
        connection back first: requests holding every connection of the pool while they wait
        for another's statement would leave none for it.
        """
        db.release()
        with self._lock:
            batch = self._joining.get(key)
            if batch is None:
                batch = self._joining[key] = Joining()
            place = len(batch.seconds)
            batch.seconds.append(float(seconds))
            sending = self._sending[hash(key) % SENDING_LOCKS]
        if place == 0:
            with sending:
                with self._lock:
                    del self._joining[key]  # whoever comes now joins the next statement
                self._send(key, batch)
        else:
            batch.done.wait()
        if batch.failed is not None:
            raise _own(batch.failed)
        ticket = Ticket(batch.ids[place], key)
        with self._lock:
            self._local[ticket.id] = ticket
            if self._heads.get(key) == ticket.id:
                ticket.woken.set()  # named head before it was known here
        return ticket

    def _send(self, key: WalletKey, batch: Joining) -> None:
        """Insert the waiters of ``batch``; record their ids and their queue's head.

        The head the statement answers is the queue's as of its start. A notification about
        the key heard while it runs may be newer (the head it answered has left since, and the
        new head is one of these waiters) or older, and nothing tells which: setting the
        answered head over it could leave the new head asleep until its next look, a ``POLL``
        later, with the whole queue behind it. After such a race the heads are read again.
        """
        try:
            with self._hearing() as heard:
                ids, head, _ = db.one(
                    db.execute(
                        queries.JOIN,
                        {"wallet": key.wallet, "currency": key.currency, "seconds": batch.seconds},
                    )
                )
                batch.ids = [int(i) for i in ids]
                with self._lock:
                    raced = bool(heard & {key, None})
                    if not raced:
                        self._set_head(key, head)
            if raced:
                self.refresh()
        except BaseException as exc:
            batch.failed = exc
            raise
        finally:
            batch.done.set()

    @contextlib.contextmanager
    def _hearing(self) -> Iterator[set[WalletKey | None]]:
        """Collect the keys notifications are heard about while the block reads heads."""
        heard: set[WalletKey | None] = set()
        with self._lock:
            self._reading.append(heard)
        try:
            yield heard
        finally:
            with self._lock:
                # By identity: list.remove would take the first equal set, another reader's.
                self._reading = [other for other in self._reading if other is not heard]

    def is_head(self, ticket: Ticket) -> bool:
        """Tell whether ``ticket`` heads its queue (only the head may try to select)."""
        with self._lock:
            return self._heads.get(ticket.key) == ticket.id

    def wait(self, ticket: Ticket, timeout: float) -> bool:
        """Sleep until ``ticket`` is named head or ``timeout`` passes; return whether woken."""
        woken = ticket.woken.wait(max(timeout, 0.0))
        ticket.woken.clear()
        return woken

    def refresh(self, fresh_for: float = 0.0, clock=time.monotonic) -> bool:
        """Re-read every queue's head from the database; return whether this call read them.

        Nothing is read if this process read them less than ``fresh_for`` seconds ago (or is
        reading them now): waiters share one look per process. A local waiter the reading names
        head for the first time is woken."""
        with self._lock:
            now = clock()
            if self._refreshed is not None and now - self._refreshed < fresh_for:
                return False
            self._refreshed = now
        with self._hearing() as heard:
            rows = db.execute(queries.HEADS, {}).fetchall()
            with self._lock:
                if None in heard:
                    return True  # the listener has just read them all again itself
                # A key a notification was heard about during the read keeps what it said:
                # the read may be older, and undoing a newer head leaves it asleep (``_send``).
                read = {WalletKey(w, c): int(head) for w, c, head in rows}
                before = self._heads
                self._heads = {k: h for k, h in read.items() if k not in heard}
                self._heads.update({k: before[k] for k in heard if k in before})
                for key, head in self._heads.items():
                    local = self._local.get(head)
                    if local is not None and before.get(key) != head:
                        local.woken.set()
        return True

    def leave(self, ticket: Ticket, served: bool = False) -> None:
        """Give up the place of ``ticket``, telling every process who heads the queue now.

        A ``served`` ticket leaves silently: whatever frees its funds names the next head.
        """
        with self._lock:
            self._local.pop(ticket.id, None)
            if not served and self._heads.get(ticket.key) == ticket.id:
                del self._heads[ticket.key]
        db.execute(queries.LEAVE_SERVED if served else queries.LEAVE, {"id": ticket.id})

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and close the connection (within about ``POLL`` seconds)."""
        self._stop.set()
        thread, mine = self._thread, self._pid == os.getpid()
        if mine and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the listener -----------------------------------------------------------------

    def apply(self, payload: str) -> None:
        """Apply one notification: a queue's new head; wake it if it waits here."""
        try:
            message = json.loads(payload)
            key = WalletKey(str(message["wallet"]), str(message["currency"]))
            head = None if message["head"] is None else int(message["head"])
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable wake-up %.200r", payload)
            return
        with self._lock:
            for heard in self._reading:
                heard.add(key)
            self._set_head(key, head)

    def _set_head(self, key: WalletKey, head: int | None) -> None:
        if head is None:
            self._heads.pop(key, None)
            return
        self._heads[key] = head
        local = self._local.get(head)
        if local is not None:
            local.woken.set()

    def _run(self) -> None:
        """Listen until the process ends, reconnecting after a pause."""
        connect = django_connect()
        while not self._stop.is_set():
            try:
                with contextlib.closing(connect()) as conn:
                    conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(queries.CHANNEL)))
                    self._resync(conn)
                    self._ready.set()
                    metrics.LISTENER_CONNECTED.labels(listener="wakeup").set(1)
                    while not self._stop.is_set():
                        ready, _, _ = select.select([conn.fileno()], [], [], POLL)
                        if ready:
                            for notify in conn.notifies(timeout=0):
                                self.apply(notify.payload)
            except (psycopg.Error, OSError) as exc:
                if self._stop.is_set():
                    break
                log.warning("wake-up listener lost its connection (%s); reconnecting", exc)
            self._ready.clear()
            metrics.LISTENER_CONNECTED.labels(listener="wakeup").set(0)
            self._stop.wait(0.5)

    def _resync(self, conn: psycopg.Connection) -> None:
        """Start over after (re)connecting: what was announced meanwhile is unknown."""
        rows = conn.execute(queries.HEADS).fetchall()
        with self._lock:
            self._heads = {WalletKey(w, c): int(head) for w, c, head in rows}
            for heard in self._reading:
                heard.add(None)
            for ticket in self._local.values():
                ticket.woken.set()  # let every local waiter look again


_queues: Queues | None = None


def queues() -> Queues:
    """Return this process's queues (each process, forked or not, has its own)."""
    global _queues
    if _queues is None:
        _queues = Queues(wait_slots(WAIT_SLOTS, worker_threads()))
    return _queues


def reset(timeout: float = 5.0) -> None:
    """Forget this process's queues and stop its listener (tests, settings changes)."""
    global _queues
    queues_, _queues = _queues, None
    if queues_ is not None:
        queues_.stop(timeout)
