"""A key's turn on PostgreSQL (sherdlock.turns, locks.sql.turns.TAKE_TURN): sessions, order."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from django.db import connection, transaction

from locks.models import TokenLock
from locks.sql.turns import TURN_KEY
from locks.store import PostgresTokenStore
from sherdlock import Claim, WalletKey
from tests.factories import make_tokens
from tests.helpers.blocked import wait_until_blocked
from tests.helpers.turns import Worker, assert_turns_go_in_the_order_asked

pytestmark = pytest.mark.django_db(transaction=True)

KEY = WalletKey("alice", "USD")


@pytest.fixture
def store() -> PostgresTokenStore:
    return PostgresTokenStore(lease=30)


def _in_session(work, *args) -> Worker:
    """Run ``work`` in a thread of its own, hence on a database session of its own."""
    return Worker(work, *args, after=lambda: connection.close())  # its own, at the end


def _hold(store: PostgresTokenStore, key: WalletKey, taken: threading.Event, done: threading.Event):
    def work() -> None:
        assert store.take_turn(key, 1.0)
        taken.set()
        assert done.wait(10)
        store.end_turn(key)

    thread = _in_session(work)
    assert taken.wait(5)
    return thread


def test_a_held_turn_is_refused_to_others_and_awaited_until_it_ends(store):
    taken, done = threading.Event(), threading.Event()
    holder = _hold(store, KEY, taken, done)

    assert not store.take_turn(KEY, 0.05)  # waited out its lock_timeout
    assert not store.await_turn(KEY, 0.05)
    assert store.await_turn(WalletKey("alice", "EUR"), 0.05)  # another key is not held
    # A timed-out wait leaves the session usable, with no lock_timeout of its own after.
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"

    ended: dict[str, bool] = {}
    pids: queue.Queue[int] = queue.Queue()

    def await_the_end() -> None:
        connection.ensure_connection()
        pids.put(connection.connection.info.backend_pid)
        ended["ended"] = store.await_turn(KEY, 10.0)

    waiter = _in_session(await_the_end)
    wait_until_blocked(pids.get(timeout=5), "advisory")  # waits for the holder
    assert ended == {}
    done.set()
    for thread in (holder, waiter):
        thread.join(10)
    assert ended == {"ended": True}
    assert store.take_turn(KEY, 0.05)
    store.end_turn(KEY)


def test_turns_are_taken_in_the_order_asked(store):
    assert_turns_go_in_the_order_asked(store, KEY, _in_session, _until_waiting)


def _until_waiting(count: int) -> None:
    """Wait until ``count`` sessions wait for an advisory lock."""
    deadline = time.monotonic() + 10
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if cursor.fetchone()[0] >= count:
                return
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_turn_ends_with_its_session(store):
    def take_and_vanish() -> None:
        assert store.take_turn(KEY, 1.0)  # never given back: the session ends, as when
        connection.connection.close()  # its process dies (not back to the pool)

    _in_session(take_and_vanish).join(10)

    assert store.await_turn(KEY, 5.0)


def test_no_turn_is_taken_or_awaited_inside_a_transaction(store):
    taken, done = threading.Event(), threading.Event()
    holder = _hold(store, KEY, taken, done)
    try:
        with transaction.atomic():
            # A timed-out wait would abort the caller's transaction: neither waits.
            assert not store.take_turn(KEY, 0.05)
            assert not store.await_turn(KEY, 0.05)
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
    finally:
        done.set()
        holder.join(10)


def test_a_session_that_cannot_give_its_turn_back_ends_it(store, monkeypatch):
    def take_and_fail() -> None:
        assert store.take_turn(KEY, 1.0)
        monkeypatch.setattr("locks.sql.turns.END_TURN", "SELECT 1 / 0")
        with pytest.raises(Exception, match="division by zero"):
            store.end_turn(KEY)

    _in_session(take_and_fail).join(10)

    assert store.await_turn(KEY, 5.0)  # not left in the pool holding it


# A newcomer to a contested key (sherdlock.turns): its fetch asks whether the turn is free.
NEWCOMER = Claim("tx-new", KEY, 5, contested=True, yield_to_turn=True)


def test_a_newcomers_fetch_locks_nothing_while_the_turn_is_held(store):
    make_tokens(1, quantity=5)
    taken, done = threading.Event(), threading.Event()
    holder = _hold(store, KEY, taken, done)
    try:
        yielded = store.fetch_and_lock(NEWCOMER, 16)
        # Not a newcomer: a selection already under way takes what is free.
        under_way = store.fetch_and_lock(Claim("tx-old", KEY, 5, contested=True), 16)
    finally:
        done.set()
        holder.join(10)

    assert yielded.turn_taken and yielded.granted == [] and yielded.fence is not None
    assert not under_way.turn_taken and [c.quantity for c in under_way.granted] == [5]
    assert list(TokenLock.objects.values_list("spender_tx_id", flat=True)) == ["tx-old"]


def test_a_newcomers_fetch_locks_nothing_while_the_turn_is_asked_for(store):
    make_tokens(1, quantity=5)
    key = {"wallet": KEY.wallet, "currency": KEY.currency}
    sharing, done = threading.Event(), threading.Event()

    def share() -> None:  # as a newcomer's wait does, for as long as the test needs
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_advisory_lock_shared({TURN_KEY})", key)
            sharing.set()
            assert done.wait(10)
            cursor.execute(f"SELECT pg_advisory_unlock_shared({TURN_KEY})", key)

    sharer = _in_session(share)
    assert sharing.wait(5)
    asker = _in_session(lambda: store.take_turn(KEY, 10.0) and store.end_turn(KEY))
    try:
        _until_waiting(1)  # asks, behind the shared lock: nobody holds the turn
        yielded = store.fetch_and_lock(NEWCOMER, 16)
    finally:
        done.set()
        for thread in (sharer, asker):
            thread.join(10)

    assert yielded.turn_taken and yielded.granted == [] and not TokenLock.objects.exists()
    after = store.fetch_and_lock(NEWCOMER, 16)  # nobody holds or asks for it now
    assert not after.turn_taken and [c.quantity for c in after.granted] == [5]


def test_a_newcomers_fetch_inside_a_transaction_does_not_yield(store):
    make_tokens(1, quantity=5)
    taken, done = threading.Event(), threading.Event()
    holder = _hold(store, KEY, taken, done)
    try:
        with transaction.atomic():  # the turn's lock would last as long as the transaction
            result = store.fetch_and_lock(NEWCOMER, 16)
    finally:
        done.set()
        holder.join(10)

    assert not result.turn_taken and [c.quantity for c in result.granted] == [5]
