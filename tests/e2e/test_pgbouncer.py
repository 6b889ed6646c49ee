"""The project behind Debian's PgBouncer pooling transactions, as deployed at scale.

Replica processes run with ``DATABASE_POOLING=transaction``: their statements go through a pool
of ``POOL_SIZE`` server sessions shared by more clients than that, while the cache listener and
the housekeeping guard keep sessions of their own on ``DATABASE_DIRECT_URL``. The default run
is short; ``-m slow`` runs 50 replicas.
"""

from __future__ import annotations

from decimal import Decimal

import psycopg
import pytest
from django.db import connection

from locks import notifications
from locks.housekeeping import GUARD_APPLICATION_NAME, GUARD_KEY, run_housekeeping
from locks.models import TokenLock
from tests.factories import make_lock, make_token, make_tokens
from tests.helpers.processes import POOL_SIZE, manage, wait_for
from tests.helpers.replicas import (
    assert_books_balance,
    assert_never_held_twice,
    outcomes,
    run_replicas,
)
from tests.integration.test_housekeeping import holder_has_gone
from tests.workers.remote_replica import RemoteReplica
from tokens.services import TokenSpec, issue_tokens


def database() -> str:
    return connection.settings_dict["NAME"]


def transactions_through(pgbouncer) -> int:
    """Transactions PgBouncer has run on the test database so far."""
    return sum(
        int(row["total_xact_count"])
        for row in pgbouncer.show("STATS")
        if row["database"] == database()
    )


@pytest.fixture
def publishing(transactional_db):
    """Install the cache-notification triggers, as migrate does where replicas listen."""
    notifications.install()
    yield
    notifications.uninstall()


def test_the_pool_lends_one_server_session_per_transaction(pgbouncer):
    """What the pooled mode guards against: session state leaks from one client to the next."""
    url = pgbouncer.url(database())
    with (
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as first,
        psycopg.connect(url, autocommit=True, prepare_threshold=None) as second,
    ):
        first.execute("SET statement_timeout = '4321ms'")
        # One idle server session, so the second client is lent the first one's.
        assert second.execute("SHOW statement_timeout").fetchone() == ("4321ms",)
        first.prepare_threshold = second.prepare_threshold = 0  # prepare at once
        first.execute("SELECT %s::int", [1])  # prepared on that session as _pg3_0
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            second.execute("SELECT %s::text", ["x"])  # the second client's _pg3_0


@pytest.mark.parametrize(
    "replicas,selections,tokens",
    [
        pytest.param(POOL_SIZE + 2, 8, 200, id="short"),
        pytest.param(50, 30, 500, id="long", marks=pytest.mark.slow),
    ],
)
def test_listening_replicas_through_the_pool_never_double_spend(
    tmp_path, pooled_env, pgbouncer, publishing, replicas, selections, tokens
):
    make_tokens(tokens, wallet="hot", quantity=10)
    before = transactions_through(pgbouncer)
    records = run_replicas(
        tmp_path,
        {**pooled_env, "SHERDLOCK_LISTEN": "1"},
        replicas,
        wallets=["hot"],
        selections=selections,
        min_quantity=1,
        max_quantity=40,
    )
    counts = outcomes(records)
    assert len(records) == replicas * selections
    # Supply (10 per token) always covers what every replica holds at once (40 each).
    assert counts.get("insufficient_funds", 0) == 0, counts
    assert counts.get("funds_locked", 0) == 0, counts
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(10 * tokens))
    # Every selection ran its statements through the pool, on at most POOL_SIZE sessions.
    assert transactions_through(pgbouncer) - before >= replicas * selections
    pool = next(row for row in pgbouncer.show("POOLS") if row["database"] == database())
    assert pool["sv_active"] + pool["sv_idle"] + pool["sv_used"] <= POOL_SIZE


@pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(POOL_SIZE + 2, 8, id="short"),
        pytest.param(50, 30, id="long", marks=pytest.mark.slow),
    ],
)
def test_replicas_through_the_pool_across_wallets(tmp_path, pooled_env, replicas, selections):
    wallets = [f"w{i}" for i in range(20)]
    for wallet in wallets:
        make_tokens(20, wallet=wallet, quantity=5)
    records = run_replicas(
        tmp_path,
        pooled_env,
        replicas,
        wallets=wallets,
        selections=selections,
        min_quantity=1,
        max_quantity=20,
    )
    counts = outcomes(records)
    assert counts.get("insufficient_funds", 0) == 0, counts
    assert counts.get("funds_locked", 0) == 0, counts
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(20 * 20 * 5))


@pytest.mark.timeout(120)
def test_a_pooled_replica_hears_changes_on_its_direct_session(pooled_env, publishing):
    """Through the pool a LISTEN would hear nothing: the listener connects directly."""
    make_tokens(2, wallet="w", quantity=1)
    worker = RemoteReplica({**pooled_env, "SHERDLOCK_LISTEN": "1"})
    try:
        assert worker.hello["listening"]
        worker("warm", wallet="w")
        worker("select", tx="a-1", wallet="w", quantity=1)  # fills its queue of "w"
        (issued,), _ = issue_tokens([TokenSpec("issuer", 0, "w", "USD", 100)])
        wait_for(
            lambda: [issued.pk, 100] in worker("peek", wallet="w")["tokens"],
            "the pooled replica to hear of the new token",
        )
        second = worker("select", tx="a-2", wallet="w", quantity=50)
        assert issued.pk in second["tokens"] and second["fetches"] == 0
    finally:
        worker.close()


def housekeep(env: dict[str, str]) -> str:
    """Run one housekeeping pass in a child process, as cron would; return its output."""
    return manage("housekeep", env=env, timeout=120)


def guard_is_free(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as other:
        return other.execute("SELECT pg_try_advisory_lock(%s)", [GUARD_KEY]).fetchone()[0]


@pytest.mark.timeout(180)
def test_housekeeping_through_the_pool_keeps_one_runner(pooled_env, db_url, pgbouncer):
    stale = make_token()
    make_lock(stale, "crashed-replica", ttl=-60)
    live = make_token()
    make_lock(live, "working-replica", fence=2, ttl=600)
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [GUARD_KEY])
        assert "skipped" in housekeep(pooled_env)
        pid = holder.info.backend_pid
    holder_has_gone(db_url, pid)
    assert set(TokenLock.objects.values_list("token_id", flat=True)) == {stale.pk, live.pk}
    before = transactions_through(pgbouncer)
    housekeep(pooled_env)
    assert set(TokenLock.objects.values_list("token_id", flat=True)) == {live.pk}
    assert transactions_through(pgbouncer) > before  # the deletes went through the pool
    assert guard_is_free(db_url)  # its session ended with the pass


def test_the_pooled_guard_is_a_session_of_its_own(transactional_db, db_url, settings):
    settings.DATABASE_POOLING = "transaction"
    settings.DATABASE_DIRECT_URL = db_url
    make_lock(make_token(), ttl=-60)
    holders: list[tuple[int, str]] = []

    def probe(kind: str, removed: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as other:
            holders.extend(
                other.execute(
                    "SELECT a.pid, a.application_name FROM pg_locks l "
                    "JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' "
                    "AND l.database = (SELECT oid FROM pg_database WHERE datname = "
                    "current_database()) "
                    "AND l.granted AND (l.classid::bigint << 32 | l.objid::bigint) = %s",
                    [GUARD_KEY],
                ).fetchall()
            )

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (django_pid,) = cursor.fetchone()
    run = run_housekeeping(grace_seconds=0, progress=probe)
    assert run.expired_removed == 1
    assert holders and {name for _, name in holders} == {GUARD_APPLICATION_NAME}
    assert django_pid not in {pid for pid, _ in holders}
    assert guard_is_free(db_url)
