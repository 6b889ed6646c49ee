"""Change notifications: what the triggers publish, when, and how a listener applies it."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone
from prometheus_client import REGISTRY

from locks import notifications
from locks.listener import CHANNEL, CacheListener
from locks.models import TokenLock
from locks.store import PostgresTokenStore
from sherdlock import Candidate, Claim, TokenCache, WalletKey
from tests.factories import make_lock, make_token, make_tokens
from tests.helpers.notifies import notified_since
from tokens.models import Token
from tokens.services import TokenSpec, issue_tokens

KEY = WalletKey("alice", "USD")

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def publishing(transactional_db):
    """Install the publishing triggers, as migrate does where replicas listen."""
    notifications.install()
    yield
    notifications.uninstall()


def test_triggers_follow_the_listen_setting(settings):
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LISTEN": False}
    assert notifications.sync() is False and not notifications.installed()
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LISTEN": True}
    assert notifications.sync() is True and notifications.installed()


@pytest.fixture
def listen(db_url):
    """Return a function that lists the notifications committed since the last call."""
    conn = psycopg.connect(db_url, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")
    marker = psycopg.connect(db_url, autocommit=True)

    def received(timeout: float = 10.0) -> list[dict]:
        return [json.loads(p) for p in notified_since(conn, marker, CHANNEL, timeout)]

    received()  # nothing from set-up leaks into the test
    yield received
    marker.close()
    conn.close()


@pytest.fixture
def store() -> PostgresTokenStore:
    return PostgresTokenStore(lease=30)


def pairs(tokens) -> list[list[int]]:
    return [[t.pk, int(t.quantity)] for t in sorted(tokens, key=lambda t: t.pk)]


def ids(tokens) -> list[int]:
    return sorted(t.pk for t in tokens)


# -- what the triggers publish -----------------------------------------------------------------


def test_one_statement_sends_one_issued_notification_per_key(listen):
    issued, _ = issue_tokens(
        [
            TokenSpec("tx-1", 0, "alice", "USD", 10),
            TokenSpec("tx-1", 1, "bob", "USD", 3),
            TokenSpec("tx-1", 2, "alice", "USD", 7),
            TokenSpec("tx-1", 3, "alice", "EUR", 1),
        ]
    )
    alice_usd = [t for t in issued if (t.wallet, t.currency) == ("alice", "USD")]
    assert listen() == [
        {"event": "issued", "wallet": "alice", "currency": "EUR", "tokens": pairs(issued[3:])},
        {"event": "issued", "wallet": "alice", "currency": "USD", "tokens": pairs(alice_usd)},
        {"event": "issued", "wallet": "bob", "currency": "USD", "tokens": pairs(issued[1:2])},
    ]
    issue_tokens([TokenSpec("tx-1", 0, "alice", "USD", 10)])  # a re-send inserts nothing
    assert listen() == []


def test_nothing_is_published_before_commit_nor_after_rollback(listen):
    with transaction.atomic():
        token = make_token()
        assert listen() == []  # written, not committed: no one may hear of it yet
    assert listen() == [
        {"event": "issued", "wallet": "alice", "currency": "USD", "tokens": pairs([token])}
    ]
    with pytest.raises(RuntimeError), transaction.atomic():
        make_tokens(3)
        raise RuntimeError("roll back")
    assert listen() == []


def test_spend_then_change_are_published_in_order(listen):
    tokens = make_tokens(3, quantity=10)
    listen()
    with transaction.atomic():
        Token.objects.filter(pk__in=ids(tokens[:2])).update(
            spent_by="tx-s", spent_at=timezone.now()
        )
        change = make_token(quantity=5, tx_id="tx-s")
    assert listen() == [
        {"event": "spent", "wallet": "alice", "currency": "USD", "ids": ids(tokens[:2])},
        {"event": "issued", "wallet": "alice", "currency": "USD", "tokens": pairs([change])},
    ]


def test_moving_or_unspending_a_token_leaves_one_key_and_enters_another(listen):
    token, spent = make_tokens(2, quantity=4)
    Token.objects.filter(pk=spent.pk).update(spent_by="x", spent_at=timezone.now())
    listen()
    Token.objects.filter(pk=token.pk).update(wallet="bob")
    Token.objects.filter(pk=spent.pk).update(spent_by=None, spent_at=None)
    assert listen() == [
        {"event": "spent", "wallet": "alice", "currency": "USD", "ids": [token.pk]},
        {"event": "issued", "wallet": "bob", "currency": "USD", "tokens": [[token.pk, 4]]},
        {"event": "issued", "wallet": "alice", "currency": "USD", "tokens": [[spent.pk, 4]]},
    ]


def test_store_statements_publish_locks_and_releases(listen, store):
    tokens = make_tokens(6, quantity=10)
    listen()
    fetched = store.fetch_and_lock(Claim("tx-1", KEY, 20, 1), 64)
    granted = sorted(c.token_id for c in fetched.granted)
    assert listen() == [{"event": "locked", "wallet": "alice", "currency": "USD", "ids": granted}]

    tried = store.try_lock(Claim("tx-2", KEY, 1, 2), fetched.spare[:2] + fetched.granted[:1])
    assert len(tried.granted) == 2  # the one tx-1 holds is not granted, and not announced
    assert listen() == [
        {
            "event": "locked",
            "wallet": "alice",
            "currency": "USD",
            "ids": sorted(c.token_id for c in tried.granted),
        }
    ]

    assert store.unlock("tx-1", 1) == 2
    by_id = {t.pk: t for t in tokens}
    assert listen() == [
        {
            "event": "released",
            "wallet": "alice",
            "currency": "USD",
            "tokens": pairs(by_id[i] for i in granted),
        }
    ]


def test_statements_that_change_nothing_publish_nothing(listen, store):
    (token,) = make_tokens(1)
    make_lock(token, "other")
    listen()
    assert store.try_lock(Claim("tx", KEY, 1, 1), [Candidate(token.pk, 10)]).granted == []
    assert store.unlock("nobody", 1) == 0
    Token.objects.filter(wallet="nobody").update(spent_by="x", spent_at=timezone.now())
    # Renewing a lease is no news: the holder did not change.
    TokenLock.objects.update(expires_at=timezone.now() + timedelta(minutes=5))
    assert listen() == []


def test_taking_over_an_expired_lock_is_published_as_locked(listen, store):
    expired, free = make_tokens(2, quantity=3)
    make_lock(expired, "crashed", ttl=-10)
    listen()
    outcome = store.try_lock(
        Claim("tx", KEY, 1, 5), [Candidate(expired.pk, 3), Candidate(free.pk, 3)]
    )
    assert len(outcome.granted) == 2
    # ON CONFLICT DO UPDATE fires the INSERT and the UPDATE statement triggers.
    received = listen()
    assert sorted(i for message in received for i in message["ids"]) == ids([expired, free])
    assert {message["event"] for message in received} == {"locked"}


def test_spent_tokens_lock_removal_and_token_deletion(listen):
    spent, gone = make_tokens(2, quantity=2)
    for token in (spent, gone):
        make_lock(token, "tx")
    Token.objects.filter(pk=spent.pk).update(spent_by="tx", spent_at=timezone.now())
    listen()
    # Housekeeping removing the lock of a spent token announces nothing: no one can select it.
    TokenLock.objects.filter(pk=spent.pk).delete()
    assert listen() == []
    # The ORM deletes the lock first, then the token: both are news, in that order.
    Token.objects.filter(pk=gone.pk).delete()
    assert listen() == [
        {"event": "released", "wallet": "alice", "currency": "USD", "tokens": [[gone.pk, 2]]},
        {"event": "spent", "wallet": "alice", "currency": "USD", "ids": [gone.pk]},
    ]


def test_truncate_tells_listeners_to_start_over(listen):
    make_tokens(2)
    listen()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE locks_tokenlock")
    assert listen() == [{"event": "reset"}]


def test_a_group_too_big_for_one_payload_becomes_an_overflow(listen):
    make_tokens(100, wallet="small")
    make_tokens(1500, wallet="w" * 128)
    small, big = listen()
    assert small["event"] == "issued" and len(small["tokens"]) == 100
    assert big == {"event": "overflow", "wallet": "w" * 128, "currency": "USD", "cause": "issued"}
    Token.objects.update(spent_by="x", spent_at=timezone.now())
    spent_small, spent_big = listen()
    assert spent_small["event"] == "spent" and len(spent_small["ids"]) == 100
    assert spent_big == {
        "event": "overflow",
        "wallet": "w" * 128,
        "currency": "USD",
        "cause": "spent",
    }  # 1500 ids of 4+ digits: over 8000 bytes


def test_the_size_limit_counts_bytes_not_characters(listen):
    # PostgreSQL refuses payloads of 8000 bytes or more. Pad two payloads to 7990 characters:
    # with an ASCII wallet that is 7990 bytes and goes out as is; with a wallet of 3-byte
    # characters it is over the limit and must become an overflow (pg_notify would fail).
    def publish(wallet: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT char_length(json_build_object('event', 'issued', 'wallet', %s,"
                " 'currency', 'USD', 'tokens', ''::text)::text)",
                [wallet],
            )
            padding = 7990 - cursor.fetchone()[0]
            cursor.execute(
                "SELECT sherdlock_publish('issued', %s, 'USD', 'tokens', to_json(%s::text))",
                [wallet, "x" * padding],
            )

    publish("e" * 128)
    publish("€" * 128)
    fits, overflow = listen()
    assert fits["event"] == "issued" and fits["wallet"] == "e" * 128
    assert overflow == {
        "event": "overflow",
        "wallet": "€" * 128,
        "currency": "USD",
        "cause": "issued",
    }


def test_publishing_can_be_switched_off_per_session_or_database(listen):
    with connection.cursor() as cursor:
        cursor.execute("SET sherdlock.notify = off")
        try:
            make_tokens(3)
            Token.objects.update(spent_by="x", spent_at=timezone.now())
        finally:
            cursor.execute("RESET sherdlock.notify")
    assert listen() == []
    make_tokens(1)
    assert [m["event"] for m in listen()] == ["issued"]


def test_the_migration_reverses_to_nothing():
    migration = importlib.import_module("locks.migrations.0003_change_notifications")
    count = (
        "SELECT (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'sherdlock%'),"
        " (SELECT count(*) FROM pg_proc WHERE proname LIKE 'sherdlock%')"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(count)
        assert cursor.fetchone() == (len(migration.TRIGGERS), len(migration.FUNCTION_SIGNATURES))
        for statement in migration.DROP:
            cursor.execute(statement)
        cursor.execute(count)
        assert cursor.fetchone() == (0, 0)
        transaction.set_rollback(True)  # DDL is transactional: the test database keeps them


# -- how a listener applies them ---------------------------------------------------------------


@pytest.fixture
def cache() -> TokenCache:
    return TokenCache(ttl=30)


@pytest.fixture
def listener(cache) -> CacheListener:
    def refuse() -> psycopg.Connection:
        raise AssertionError("this listener is fed by hand")

    return CacheListener(cache, refuse)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_published_changes_update_only_queues_the_replica_has(listen, store, cache, listener):
    other = WalletKey("bob", "USD")
    mine = make_tokens(3, quantity=10)
    cache.put(KEY, [Candidate(t.pk, 10) for t in mine])
    listen()

    fresh = make_tokens(2, quantity=7)
    make_tokens(2, wallet="bob")
    store.try_lock(Claim("tx", KEY, 1, 1), [Candidate(mine[0].pk, 10)])
    Token.objects.filter(pk=mine[1].pk).update(spent_by="tx-s", spent_at=timezone.now())
    store.unlock("tx", 1)
    for message in listen():
        listener.apply(json.dumps(message))

    queued = {c.token_id: c.quantity for c in cache.peek(KEY)}
    # mine[1] was spent; mine[0] was locked, then released with its quantity.
    assert queued == {mine[2].pk: 10, fresh[0].pk: 7, fresh[1].pk: 7, mine[0].pk: 10}
    assert cache.peek(other) == [] and len(cache) == 1  # no queue for a wallet never asked for
    assert listener.stats.received == {"issued": 2, "locked": 1, "spent": 1, "released": 1}


def test_overflow_drops_the_key_and_reset_or_garbage_drops_everything(cache, listener):
    other = WalletKey("bob", "USD")
    cache.put(KEY, [Candidate(1, 1)])
    cache.put(other, [Candidate(2, 1)])
    before = sample("sherdlock_listener_invalidations_total", scope="key")
    overflow = {"event": "overflow", "wallet": "alice", "currency": "USD", "cause": "issued"}
    assert listener.apply(json.dumps(overflow)) == "overflow"
    assert cache.peek(KEY) == [] and cache.peek(other) == [Candidate(2, 1)]
    assert sample("sherdlock_listener_invalidations_total", scope="key") == before + 1

    for payload in (
        '{"event": "reset"}',
        "not json",
        '{"event": "moved"}',
        '{"event": "issued", "wallet": "bob", "currency": "USD", "tokens": [[3]]}',
        '{"event": "spent", "wallet": "bob", "currency": "USD", "ids": ["x"]}',
    ):
        cache.put(other, [Candidate(2, 1)])
        listener.apply(payload)
        assert len(cache) == 0, payload
    assert listener.stats.received == {"overflow": 1, "reset": 1, "invalid": 4}
    assert listener.stats.invalidations == 6
