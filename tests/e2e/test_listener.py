"""Replica caches kept current by LISTEN/NOTIFY, across OS processes.

The test process is one replica (``locks.replica``, listener on); a child process driven over
its stdin/stdout is the other (``tests.workers.remote_replica``). Every wait polls with a
deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from decimal import Decimal

import psycopg
import pytest
from django.db import connection
from prometheus_client import REGISTRY

from locks import notifications, replica
from locks.listener import CacheListener
from sherdlock import TokenCache, WalletKey
from sherdlock.config import CACHE_TTL
from tests.factories import make_tokens
from tests.helpers.processes import ROOT, WAIT, wait_for
from tests.helpers.replicas import assert_books_balance, assert_never_held_twice, run_replicas
from tests.helpers.warming import warm
from tests.workers.remote_replica import RemoteReplica
from tokens.services import TokenSpec, issue_tokens


@pytest.fixture(autouse=True)
def publishing(transactional_db):
    """Install the publishing triggers, as migrate does where replicas listen."""
    notifications.install()
    yield
    notifications.uninstall()


@pytest.fixture
def start_worker(subprocess_env):
    workers: list[RemoteReplica] = []

    def start(**env: str) -> RemoteReplica:
        worker = RemoteReplica({**subprocess_env, "SHERDLOCK_LISTEN": "1", **env})
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.close()


@pytest.fixture
def local(transactional_db, settings):
    """This process as a replica with its listener connected; stopped afterwards."""
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LISTEN": True}
    replica.reset()
    selector = replica.get_selector()
    listener = replica.get_listener()
    assert listener is not None and listener.wait_connected(WAIT)
    yield selector, listener
    replica.reset()


def queued(selector, wallet: str) -> dict[int, int]:
    return {c.token_id: c.quantity for c in selector.cache.peek(WalletKey(wallet, "USD"))}


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_token_issued_elsewhere_is_selected_from_a_warm_cache(transactional_db, start_worker):
    make_tokens(2, wallet="w", quantity=1)
    worker = start_worker()
    assert worker.hello["listening"]
    worker("warm", wallet="w")
    first = worker("select", tx="a-1", wallet="w", quantity=1)  # one locked, one queued
    assert first["fetches"] == 1
    assert len(worker("peek", wallet="w")["tokens"]) == 1

    (issued,), _ = issue_tokens([TokenSpec("issuer", 0, "w", "USD", 100)])  # by this process
    wait_for(
        lambda: [issued.pk, 100] in worker("peek", wallet="w")["tokens"],
        "the other replica to hear of the new token",
    )

    second = worker("select", tx="a-2", wallet="w", quantity=50)
    assert issued.pk in second["tokens"]
    assert second["fetches"] == 0  # the cached token alone (1) could not have covered 50
    assert second["lock_conflicts"] == 0


def test_a_token_locked_elsewhere_is_never_attempted(local, start_worker):
    selector, listener = local
    tokens = make_tokens(10, wallet="w", quantity=10)
    warm(selector, "w", listener=listener)
    mine = selector.select("a-1", "w", "USD", 10)  # locks one, caches the other nine
    assert mine.stats.fetches == 1 and len(queued(selector, "w")) == 9

    theirs = start_worker()("select", tx="b-1", wallet="w", quantity=80)["tokens"]
    assert len(theirs) == 8
    free = {t.pk for t in tokens} - set(mine.token_ids) - set(theirs)
    wait_for(lambda: set(queued(selector, "w")) == free, "the other replica's locks to arrive")

    again = selector.select("a-2", "w", "USD", 10)
    assert set(again.token_ids) == free
    assert (again.stats.lock_attempts, again.stats.lock_conflicts) == (1, 0)
    assert again.stats.fetches == 0
    assert listener.stats.received["locked"] >= 2  # theirs, and our own (harmless)


def test_released_tokens_come_back_and_spent_ones_leave(local, start_worker):
    selector, listener = local
    make_tokens(6, wallet="w", quantity=10)
    warm(selector, "w", listener=listener)
    mine = selector.select("a-1", "w", "USD", 10)
    cached = set(queued(selector, "w"))
    assert len(cached) == 5
    worker = start_worker()

    taken = set(worker("select", tx="b-1", wallet="w", quantity=20)["tokens"])
    wait_for(lambda: set(queued(selector, "w")) == cached - taken, "the locks to arrive")
    worker("release", tx="b-1")
    wait_for(lambda: queued(selector, "w") == dict.fromkeys(cached, 10), "the release to arrive")

    spent = set(worker("select", tx="b-2", wallet="w", quantity=10)["tokens"])
    change = worker("spend", tx="b-2", pay=4)["change"]
    expected = dict.fromkeys(cached - spent, 10) | {change: 6}
    wait_for(lambda: queued(selector, "w") == expected, "the spend and its change to arrive")

    everything = selector.select("a-2", "w", "USD", 46)
    assert set(everything.token_ids) == set(expected)
    assert everything.stats.fetches == 0 and everything.stats.lock_conflicts == 0
    assert not set(everything.token_ids) & set(mine.token_ids)


def test_the_listener_reconnects_after_its_backend_is_killed(local):
    selector, listener = local
    make_tokens(4, wallet="w", quantity=10)
    warm(selector, "w", listener=listener)
    selector.select("a-1", "w", "USD", 10)
    assert queued(selector, "w")
    killed = listener.backend_pid
    reconnects = metric("sherdlock_listener_reconnects_total")
    assert metric("sherdlock_listener_connected", listener="cache") == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [killed])
        assert cursor.fetchone()[0]

    wait_for(lambda: listener.stats.reconnects == 1 and listener.connected, "a reconnection")
    assert metric("sherdlock_listener_connected", listener="cache") == 1
    assert listener.backend_pid not in (None, killed)
    assert metric("sherdlock_listener_reconnects_total") == reconnects + 1
    # What happened while nobody listened is unknown: the cache was dropped.
    assert len(selector.cache) == 0

    selector.select("a-2", "w", "USD", 10)  # warm again, then hear news on the new session
    (issued,), _ = issue_tokens([TokenSpec("issuer", 0, "w", "USD", 7)])
    wait_for(lambda: queued(selector, "w").get(issued.pk) == 7, "news after the reconnection")


def test_the_cache_falls_back_to_the_short_ttl_while_not_listening(db_url):
    cache = TokenCache(ttl=30.0)
    gate = threading.Event()
    attempts = []

    def connect() -> psycopg.Connection:
        attempts.append(time.monotonic())
        if not gate.is_set():
            raise psycopg.OperationalError("database unreachable")
        return psycopg.connect(db_url, autocommit=True)

    listener = CacheListener(cache, connect, fallback_ttl=0.5, backoff=(0.01, 0.05))
    listener.start()
    try:
        wait_for(lambda: len(attempts) >= 3, "retries")
        assert cache.ttl == 0.5 and not listener.connected
        gate.set()
        assert listener.wait_connected(WAIT)
        assert cache.ttl == 30.0 and listener.stats.connects == 1
    finally:
        assert listener.stop()
    assert not listener.running and cache.ttl == 0.5


def test_an_overflow_drops_only_that_key(local):
    selector, listener = local
    make_tokens(3, wallet="w", quantity=10)
    make_tokens(3, wallet="v", quantity=10)
    warm(selector, "w", listener=listener)
    warm(selector, "v", listener=listener)
    selector.select("a-1", "w", "USD", 10)
    selector.select("a-2", "v", "USD", 10)
    assert len(queued(selector, "w")) == 2 and len(queued(selector, "v")) == 2
    issued = listener.stats.received["issued"]
    make_tokens(1500, wallet="w")  # one statement: too many ids for one payload
    wait_for(lambda: listener.stats.received["overflow"] == 1, "the overflow")
    assert queued(selector, "w") == {} and len(queued(selector, "v")) == 2
    assert listener.stats.received["issued"] == issued


def test_stopping_closes_the_listening_session(local):
    _, listener = local
    pid = listener.backend_pid

    def sessions() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0]

    assert sessions() == 1
    replica.reset()
    assert not listener.running and replica.get_listener() is None
    wait_for(lambda: sessions() == 0, "the session to end")


def test_a_forked_worker_gets_its_own_listener_and_leaves_the_parents_alone(
    transactional_db, subprocess_env
):
    make_tokens(2, wallet="f", quantity=1)
    env = {**subprocess_env, "SHERDLOCK_LISTEN": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tests.workers.forking_replica"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["first"]["inherited"] is False and report["first"]["connected"] is True
    assert report["first"]["backend"] != report["before"]
    assert report["second"] == {"inherited": False}
    # Both children exited (running the exit hook); the parent's session is untouched.
    assert report["connected"] and report["after"] == report["before"]
    assert report["reconnects"] == 0 and report["heard"]


def test_with_the_listener_off_the_selector_works_alone(transactional_db, settings):
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LISTEN": False}
    replica.reset()
    try:
        selector = replica.get_selector()
        assert replica.get_listener() is None and selector.cache.ttl == CACHE_TTL
        make_tokens(3, wallet="w", quantity=10)
        assert selector.select("a-1", "w", "USD", 25).total == 30
    finally:
        replica.reset()


def test_hot_wallet_replicas_with_listeners_never_double_spend(tmp_path, subprocess_env):
    # test_contention runs the same with listeners off (the default).
    make_tokens(200, wallet="hot", quantity=10)
    env = {**subprocess_env, "SHERDLOCK_LISTEN": "1"}
    records = run_replicas(
        tmp_path, env, 8, wallets=["hot"], selections=12, min_quantity=1, max_quantity=40
    )
    assert len(records) == 8 * 12
    assert {r["outcome"] for r in records} == {"selected"}
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(2000))


def test_loading_the_apps_starts_no_listener(subprocess_env):
    # Management commands and Celery workers load every app but never select.
    env = {**subprocess_env, "SHERDLOCK_LISTEN": "1"}  # even where replicas would listen
    result = subprocess.run(
        [sys.executable, "-m", "tests.workers.app_loader"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1].split() == ["True", "False"]
