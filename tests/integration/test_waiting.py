"""Waiting for held funds: who is told what, and what a sleeping request holds.

The queues themselves (arrival order, no starvation) are exercised across processes by
``tests/e2e/test_chain.py``; these check the pieces one process can see.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import ClassVar

import psycopg
import pytest
from django.db import connection
from prometheus_client import REGISTRY

from common import db
from locks import wait_loop, wait_slots, waiting
from locks.selections import release_selection
from locks.services import select_tokens
from locks.sql import waiting as queries
from tests.factories import make_token
from tests.helpers.notifies import notified_since

pytestmark = pytest.mark.django_db(transaction=True)


def _notifications(listener: psycopg.Connection) -> list[str]:
    """What was notified since the last call (the listener sends its own sentinel)."""
    return notified_since(listener, listener, queries.CHANNEL)


@pytest.fixture
def listener(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {queries.CHANNEL}")
        yield conn


def _join(wallet: str) -> int:
    row = db.one(db.execute(queries.JOIN, {"wallet": wallet, "currency": "USD", "seconds": [30.0]}))
    (joined,) = row[0]
    return int(joined)


def test_only_a_waiter_that_heads_its_queue_is_announced(listener):
    first = _join("w")
    (payload,) = _notifications(listener)
    assert f'"head" : {first}' in payload
    second = _join("w")  # behind the first: no head changed
    assert _notifications(listener) == []
    db.execute(queries.LEAVE, {"id": first})
    (payload,) = _notifications(listener)
    assert f'"head" : {second}' in payload


def test_a_served_waiter_leaves_without_naming_the_next_head(listener):
    first, second = _join("w"), _join("w")
    _notifications(listener)  # the first join announces the head

    db.execute(queries.LEAVE_SERVED, {"id": first})
    assert _notifications(listener) == []  # the next head waits for what frees the funds

    db.execute(queries.LEAVE, {"id": second})
    (payload,) = _notifications(listener)
    assert '"head" : null' in payload
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM locks_waiter")
        assert cursor.fetchone() == (0,)


def test_a_waiting_request_holds_no_database_connection(db_url):
    pool = connection.pool
    assert pool is not None, "the default settings pool connections"
    make_token(wallet="w", quantity=5)
    select_tokens("holder", "w", "USD", 5)
    result: dict[str, object] = {}

    def wait() -> None:
        try:
            result["selection"], _ = select_tokens("waiter", "w", "USD", 5, wait=10)
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        deadline = time.monotonic() + 10
        while not _waiters(db_url) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _waiters(db_url) == 1
        assert REGISTRY.get_sample_value("sherdlock_waiting_requests") == 1  # /metrics says so
        in_use = []
        for _ in range(10):  # the sleeper borrows one only for its once-a-second look around
            stats = pool.get_stats()
            in_use.append(stats["pool_size"] - stats["pool_available"])
            time.sleep(0.05)
        assert min(in_use) == 1  # this thread's, not the sleeper's
    finally:
        release_selection("holder")
        waiter.join(15)
    assert not waiter.is_alive()
    assert result["selection"].tx_id == "waiter"
    assert REGISTRY.get_sample_value("sherdlock_waiting_requests") == 0


def test_a_request_finding_no_wait_slot_is_answered_at_once(monkeypatch):
    """With every wait slot of the process taken, a patient request is answered as an
    impatient one: funds locked at once, with advice on when to retry, and nobody queued."""
    from sherdlock import FundsLocked

    monkeypatch.setattr("locks.waiting.WAIT_SLOTS", 0)
    make_token(wallet="w", quantity=5)
    select_tokens("holder", "w", "USD", 5)
    started = time.monotonic()
    with pytest.raises(FundsLocked) as refused:
        select_tokens("patient", "w", "USD", 5, wait=10)
    assert time.monotonic() - started < 5  # not the ten seconds it offered to wait
    assert refused.value.retry_after > 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM locks_waiter")
        assert cursor.fetchone() == (0,)


@pytest.mark.parametrize(
    "configured,threads,slots",
    [
        (120, None, 120),  # not a web worker: the knob as set
        (120, 128, 120),
        (120, 32, 24),  # a worker given fewer threads keeps 8 of them free
        (10, 32, 10),
        (120, 16, 8),  # small workers keep half
        (120, 1, 0),
    ],
)
def test_waiting_requests_never_take_every_thread_of_a_worker(configured, threads, slots):
    assert wait_slots.wait_slots(configured, threads) == slots


def test_a_web_worker_learns_its_thread_count(monkeypatch):
    from types import SimpleNamespace

    from config import gunicorn

    # setenv, not delenv: an absent variable that delenv skipped would not be restored, and
    # post_fork's value would outlive this test.
    monkeypatch.setenv("WEB_THREADS", "")
    assert wait_slots.worker_threads() is None
    gunicorn.post_fork(None, SimpleNamespace(cfg=SimpleNamespace(threads=20), nr_conns=0))
    assert wait_slots.worker_threads() == 20
    assert wait_slots.wait_slots(120, wait_slots.worker_threads()) == 12


def test_release_keeps_a_connection_inside_a_transaction():
    from django.db import transaction

    with transaction.atomic():
        connection.ensure_connection()
        assert db.release() is False
        assert connection.connection is not None
    assert db.release() is True
    assert connection.connection is None


@dataclass
class _WatchedTry(waiting.Try):
    """A first try that says when another request starts waiting for its outcome."""

    watched: ClassVar[threading.Event] = threading.Event()

    def __post_init__(self) -> None:
        watched, done = self.watched, self.done

        class Done(threading.Event):
            def wait(self, timeout: float | None = None) -> bool:
                watched.set()
                return done.wait(timeout)

            def set(self) -> None:
                done.set()

        self.done = Done()


def _two_together(monkeypatch, first_finds, second_finds):
    """Run two waiting requests of one key in this process, the second while the first tries.

    ``first_finds(n)`` and ``second_finds(n)`` play each one's n-th try (raise or return).
    Return each one's result and the times of each one's tries, relative to the moment the
    first one's first try was let go on.
    """
    from sherdlock import WalletKey

    monkeypatch.setattr(waiting, "Try", _WatchedTry)
    _WatchedTry.watched = threading.Event()
    key = WalletKey("w", "USD")
    tries: dict[str, list[float]] = {"first": [], "second": []}
    results: dict[str, object] = {}
    gate, trying = threading.Event(), threading.Event()

    def request(name, finds, gated):
        def attempt():
            tries[name].append(time.monotonic())
            if gated and len(tries[name]) == 1:
                trying.set()
                assert gate.wait(10)
            return finds(len(tries[name]))

        try:
            results[name] = wait_loop.wait_for(key, 5, attempt)
        except Exception as exc:
            results[name] = exc
        finally:
            connection.close()

    first = threading.Thread(target=request, args=("first", first_finds, True))
    first.start()
    assert trying.wait(10)
    second = threading.Thread(target=request, args=("second", second_finds, False))
    second.start()
    assert _WatchedTry.watched.wait(10), "the second request waits for the first one's try"
    opened = time.monotonic()
    gate.set()
    for thread in (first, second):
        thread.join(15)
        assert not thread.is_alive()
    return results, {name: [at - opened for at in times] for name, times in tries.items()}


def test_a_request_arriving_while_another_finds_the_funds_held_queues_without_a_try(
    monkeypatch,
):
    from sherdlock import FundsLocked, WalletKey

    def first_finds(n):
        if n == 1:
            raise FundsLocked(WalletKey("w", "USD"), 5, 0, 0.1)
        return "first"  # as the queue's head, right after joining

    results, tries = _two_together(monkeypatch, first_finds, lambda n: "second")

    assert results == {"first": "first", "second": "second"}
    # The second queued behind the first without a try of its own, and tried once, as head,
    # after the first was served (a served waiter names nobody: the head found it by looking).
    assert len(tries["first"]) == 2 and len(tries["second"]) == 1
    assert tries["second"][0] > tries["first"][1]


def test_a_request_arriving_while_another_is_served_tries_at_once(monkeypatch, db_url):
    results, tries = _two_together(monkeypatch, lambda n: "first", lambda n: "second")

    assert results == {"first": "first", "second": "second"}
    assert len(tries["first"]) == 1 and len(tries["second"]) == 1
    assert tries["second"][0] < waiting.POLL  # not a look around after a second asleep
    assert _waiters(db_url) == 0  # neither joined a queue


def test_a_request_waiting_for_another_ones_try_holds_no_connection(monkeypatch):
    """A request that borrowed a connection (its earlier statements) gives it back while it
    waits for another request's try: threads holding the pool while they wait for each other
    would leave none for the one they wait for."""
    from sherdlock import WalletKey

    held_while_waiting: list[bool] = []

    @dataclass
    class Watched(waiting.Try):
        def __post_init__(self) -> None:
            done = self.done

            class Done(threading.Event):
                def wait(self, timeout: float | None = None) -> bool:
                    held_while_waiting.append(connection.connection is not None)
                    return done.wait(timeout)

                def set(self) -> None:
                    done.set()

            self.done = Done()

    monkeypatch.setattr(waiting, "Try", Watched)
    key, trying, gate = WalletKey("w", "USD"), threading.Event(), threading.Event()

    def first_attempt():
        trying.set()
        assert gate.wait(10)
        return "first"

    def request(attempt, borrow: bool) -> None:
        try:
            if borrow:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
            wait_loop.wait_for(key, 5, attempt)
        finally:
            connection.close()

    first = threading.Thread(target=request, args=(first_attempt, False))
    first.start()
    assert trying.wait(10)
    second = threading.Thread(target=request, args=(lambda: "second", True))
    second.start()
    deadline = time.monotonic() + 10
    while not held_while_waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()
    for thread in (first, second):
        thread.join(15)
        assert not thread.is_alive()
    assert held_while_waiting == [False]


def _waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM locks_waiter").fetchone()[0]


def test_waiters_of_a_process_share_one_look_around():
    """Waiters that heard nothing look for the queues' heads once per process in a while,
    not once each; a local waiter the look names head for the first time is woken."""
    from django.test.utils import CaptureQueriesContext

    from sherdlock import WalletKey

    queues, now = waiting.Queues(), [100.0]
    first, second = _join("w"), _join("w")
    ahead = waiting.Ticket(first, WalletKey("w", "USD"))
    behind = waiting.Ticket(second, WalletKey("w", "USD"))
    queues._local.update({first: ahead, second: behind})
    with CaptureQueriesContext(connection) as looked:
        assert queues.refresh(0.5, clock=lambda: now[0])
        assert ahead.woken.is_set() and not behind.woken.is_set()  # first named head: woken
        ahead.woken.clear()
        now[0] += 0.4
        assert not queues.refresh(0.5, clock=lambda: now[0])  # another waiter's, 0.4 s later
        db.execute(queries.LEAVE, {"id": first})
        now[0] += 0.2
        assert queues.refresh(0.5, clock=lambda: now[0])
    assert [q["sql"] for q in looked].count(db.native(queries.HEADS)[0]) == 2
    assert queues.is_head(behind) and behind.woken.is_set() and not ahead.woken.is_set()
