"""Requests of one process joining a key's queue together: one statement per burst."""

from __future__ import annotations

import threading
import time
import traceback

import psycopg
import pytest
from django.db import connection

from locks import waiting
from locks.sql import waiting as queries
from sherdlock import WalletKey

pytestmark = pytest.mark.django_db(transaction=True)

KEY = WalletKey("w", "USD")


def _until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _live_waiters() -> list[tuple[int, float]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, extract(epoch FROM expires_at - created_at)::float8 FROM locks_waiter"
            " WHERE wallet = %s AND currency = %s ORDER BY id",
            [KEY.wallet, KEY.currency],
        )
        return [(int(i), round(float(s), 3)) for i, s in cursor.fetchall()]


def _join(queues: waiting.Queues, got: dict, name: str, seconds: float, borrow: bool = False):
    """Join the queue as request ``name`` (after a statement of its own with ``borrow``)."""
    try:
        if borrow:  # as a request does that tried before it joins
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        got[name] = queues.join(KEY, seconds)
    except Exception as exc:
        got[name] = exc
    finally:
        connection.close()


def _frames(error: BaseException) -> list[str]:
    """Return the names of the functions ``error``'s traceback passes through."""
    return [frame.name for frame in traceback.extract_tb(error.__traceback__)]


def _open_batch(queues: waiting.Queues) -> int:
    """Return how many requests the statement not yet sent holds."""
    with queues._lock:
        batch = queues._joining.get(KEY)
        return 0 if batch is None else len(batch.seconds)


def _burst(monkeypatch, queues: waiting.Queues, fail_second: bool = False):
    """Join a, then b, c and d while a's statement is under way; return what each got and the
    seconds each statement carried. With ``fail_second`` the second statement fails."""
    sent: list[list[float]] = []
    sending, go_on = threading.Event(), threading.Event()
    send, execute = waiting.Queues._send, waiting.db.execute

    def held_send(self, key, batch):
        sent.append(list(batch.seconds))
        if len(sent) == 1:
            sending.set()
            assert go_on.wait(10)
        send(self, key, batch)

    def failing_execute(statement, params, *args):
        if fail_second and len(sent) == 2:
            raise RuntimeError("the database went away")
        return execute(statement, params, *args)

    monkeypatch.setattr(waiting.Queues, "_send", held_send)
    monkeypatch.setattr(waiting.db, "execute", failing_execute)
    got: dict[str, object] = {}
    threads = [threading.Thread(target=_join, args=(queues, got, "a", 11.0))]
    threads[0].start()
    assert sending.wait(10)  # a's statement is under way
    for count, (name, seconds) in enumerate((("b", 12.0), ("c", 13.0), ("d", 14.0)), start=1):
        threads.append(threading.Thread(target=_join, args=(queues, got, name, seconds)))
        threads[-1].start()
        _until(lambda count=count: _open_batch(queues) == count)  # behind the one before
    go_on.set()
    for thread in threads:
        thread.join(15)
        assert not thread.is_alive()
    return got, sent


def test_joins_arriving_while_one_is_sent_go_together_in_arrival_order(monkeypatch):
    """The first join is sent at once; three arriving while it is under way make one statement
    between them, and every request gets its own place in the order it came, with its own
    deadline."""
    queues = waiting.Queues()
    got, sent = _burst(monkeypatch, queues)

    assert sent == [[11.0], [12.0, 13.0, 14.0]]
    tickets = [got[name] for name in "abcd"]
    assert all(isinstance(ticket, waiting.Ticket) for ticket in tickets)
    ids = [ticket.id for ticket in tickets]
    assert ids == sorted(set(ids))
    assert _live_waiters() == list(zip(ids, (11.0, 12.0, 13.0, 14.0), strict=True))
    assert queues.is_head(tickets[0]) and not queues.is_head(tickets[1])


def test_a_join_statement_that_fails_fails_each_of_its_requests(monkeypatch):
    queues = waiting.Queues()
    got, sent = _burst(monkeypatch, queues, fail_second=True)

    assert sent == [[11.0], [12.0, 13.0, 14.0]]
    assert isinstance(got["a"], waiting.Ticket)
    assert [str(got[name]) for name in "bcd"] == ["the database went away"] * 3
    # b sent the statement and raised its error; c and d each raise a copy of their own (one
    # instance raised in three threads would carry their frames mixed), caused by b's.
    sender, copies = got["b"], [got["c"], got["d"]]
    assert all(type(error) is RuntimeError and error.__cause__ is sender for error in copies)
    assert len({id(error) for error in (sender, *copies)}) == 3
    assert all("_send" not in _frames(error) for error in copies)
    assert "_send" in _frames(sender)
    assert [i for i, _ in _live_waiters()] == [got["a"].id]
    assert queues._joining == {}  # the next request starts a statement of its own
    monkeypatch.undo()
    assert queues.join(KEY, 5.0).id > got["a"].id


def test_requests_waiting_for_a_join_statement_leave_the_pool_to_it(monkeypatch):
    """Requests that had borrowed every connection of the pool (each made a try) and then wait
    for another's join statement give their connections back, so that statement finds one."""
    pool = connection.pool
    assert pool is not None, "the default settings pool connections"
    connection.close()  # this thread's goes back: the requests below take every one
    queues = waiting.Queues()
    sending, go_on = threading.Event(), threading.Event()
    send, sent = waiting.Queues._send, []

    def held_send(self, key, batch):
        sent.append(len(batch.seconds))
        if len(sent) == 1:  # the first statement is under way, not yet connected
            sending.set()
            assert go_on.wait(10)
        send(self, key, batch)

    monkeypatch.setattr(waiting.Queues, "_send", held_send)
    got: dict[str, object] = {}
    first = threading.Thread(target=_join, args=(queues, got, "first", 5.0))
    first.start()
    assert sending.wait(10)
    # The next statement's sender has no connection; those joining it hold the whole pool.
    joining = [threading.Thread(target=_join, args=(queues, got, "next", 5.0))]
    joining += [
        threading.Thread(target=_join, args=(queues, got, f"tried-{n}", 5.0, True))
        for n in range(pool.max_size)
    ]
    for count, thread in enumerate(joining, start=1):
        thread.start()
        _until(lambda count=count: _open_batch(queues) == count)
    started = time.monotonic()
    go_on.set()
    for thread in (first, *joining):
        thread.join(70)  # two pool timeouts of 30 s if the statements found no connection
    assert time.monotonic() - started < 10, "the statements waited for a connection"
    assert all(isinstance(ticket, waiting.Ticket) for ticket in got.values()), got
    assert sent == [1, 1 + pool.max_size]


@pytest.fixture
def behind_a_head(db_url):
    """A listening process's queues, and another's connection with a waiter heading KEY's."""
    queues = waiting.Queues()
    assert queues.start()
    try:
        with psycopg.connect(db_url, autocommit=True) as other:
            (head,) = other.execute(
                "INSERT INTO locks_waiter (wallet, currency, created_at, expires_at)"
                " VALUES (%s, %s, now(), now() + interval '1 minute') RETURNING id",
                [KEY.wallet, KEY.currency],
            ).fetchone()
            yield queues, other, head
    finally:
        queues.stop()
        connection.close()


def _leaves_after(monkeypatch, statement: str, other, head: int, heard) -> None:
    """Make ``head`` give up (its LEAVE names the next head) right after this process runs
    ``statement``, before its answer is used, and wait until the listener has heard it."""
    execute = waiting.db.execute

    def meanwhile(text, params, *args):
        cursor = execute(text, params, *args)
        if text == statement:
            other.execute(queries.LEAVE, {"id": head})
            _until(heard)
        return cursor

    monkeypatch.setattr(waiting.db, "execute", meanwhile)


def test_a_head_named_while_a_join_runs_is_not_undone_by_the_joins_answer(
    monkeypatch, behind_a_head
):
    """The notification naming the newcomer head is heard before the join's answer (the old
    head) is used: the answer must not undo it, or the newcomer sleeps a whole poll with the
    queue behind it."""
    queues, other, head = behind_a_head
    _leaves_after(monkeypatch, queries.JOIN, other, head, lambda: KEY in queues._heads)
    ticket = queues.join(KEY, 30.0)
    assert queues.is_head(ticket)
    assert ticket.woken.is_set()  # it tries at once


def test_a_head_named_while_the_heads_are_read_again_is_not_undone_by_the_read(
    monkeypatch, behind_a_head
):
    """A waiter's look around (``refresh``) reads every head; the notification naming the next
    head, a waiter of this process, is heard before the read is used: it must not undo it."""
    queues, other, head = behind_a_head
    ticket = queues.join(KEY, 30.0)
    assert not queues.is_head(ticket)
    _leaves_after(monkeypatch, queries.HEADS, other, head, lambda: queues.is_head(ticket))
    assert queues.refresh()
    assert queues.is_head(ticket)
    assert ticket.woken.is_set()


def test_overlapping_reads_of_the_heads_each_hear_what_arrives_while_they_read():
    queues = waiting.Queues()
    with queues._hearing() as first:
        with queues._hearing() as second:
            pass  # ends first, while the two records are still equal (empty)
        queues.apply('{"wallet": "w", "currency": "USD", "head": 7}')
    assert first == {KEY} and second == set()
