"""The benchmark's baselines are correct selectors: what ours is measured against must be sound.

Each one must lock what it returns and nothing else, answer insufficient funds only when the
wallet's unspent supply is short, answer funds locked when others hold what is needed, hold no
lock after a failure, and spend into payment and change without creating or losing value.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from django.db import IntegrityError, connection, transaction

from bench.strategies import BASELINES, REFERENCE, build, payment, spend
from bench.strategies.base import Picked
from locks.models import TokenLock
from sherdlock import BackoffPolicy, FundsLocked, InsufficientFunds, WalletKey
from tests.factories import make_lock, make_tokens
from tests.helpers.plans import explain_prepared
from tests.helpers.processes import ROOT, WAIT, child_env, wait_for
from tokens.models import Token

KEY = WalletKey("alice", "USD")

pytestmark = pytest.mark.django_db


@pytest.fixture(params=BASELINES)
def baseline(request):
    return build(request.param, seed=7)


def held(tx_id: str) -> set[int]:
    return set(TokenLock.objects.filter(spender_tx_id=tx_id).values_list("token_id", flat=True))


def unspent(wallet: str = "alice") -> int:
    return sum(int(t.quantity) for t in Token.objects.filter(wallet=wallet, spent_at=None))


def test_a_selection_locks_exactly_its_tokens_under_one_fence(baseline):
    make_tokens(20, quantity=10)
    picked = baseline.select("tx-1", KEY, 35)
    assert picked.total >= 35 and len(picked.tokens) >= 4
    assert held("tx-1") == set(picked.token_ids)
    assert set(TokenLock.objects.values_list("fence", flat=True)) == {picked.fence}
    assert baseline.lock_attempts >= len(picked.tokens)


def test_spending_pays_and_gives_the_change_back_without_creating_value(baseline):
    make_tokens(5, quantity=10)
    picked = baseline.select("tx-1", KEY, 13)
    assert spend(picked, payment(picked.total, 13, "alice", "bob"))
    baseline.spent(picked)
    assert unspent("bob") == 13
    assert unspent("alice") == 50 - 13
    outputs = Token.objects.filter(tx_id="tx-1").order_by("index")
    assert [(t.wallet, int(t.quantity)) for t in outputs] == [("bob", 13), ("alice", 7)]


def test_a_spend_under_a_lost_lock_writes_nothing(baseline):
    make_tokens(3, quantity=10)
    picked = baseline.select("tx-1", KEY, 10)
    stale = Picked(picked.tx_id, picked.key, picked.fence + 1, picked.tokens)
    assert not spend(stale, payment(stale.total, 10, "alice"))
    assert not Token.objects.filter(tx_id="tx-1").exists()
    assert unspent() == 30


def test_insufficient_funds_only_when_the_supply_is_short(baseline):
    make_tokens(3, quantity=10)
    with pytest.raises(InsufficientFunds):
        baseline.select("tx-1", KEY, 31)
    assert not TokenLock.objects.exists()
    assert baseline.select("tx-2", KEY, 30).total == 30


def test_funds_held_by_others_are_funds_locked_and_nothing_stays_locked(baseline):
    tokens = make_tokens(4, quantity=10)
    for token in tokens[:3]:
        make_lock(token, "other")
    with pytest.raises(FundsLocked):
        baseline.select("tx-1", KEY, 20)
    assert not held("tx-1")
    assert baseline.select("tx-2", KEY, 10).token_ids == [tokens[3].pk]


def test_an_expired_lock_row_is_never_taken_for_insufficient_funds(baseline):
    # ON CONFLICT DO NOTHING cannot take a lock over: the token waits for housekeeping, and
    # the wallet is reported as locked, not as short.
    [token] = make_tokens(1, quantity=10)
    make_lock(token, "crashed", ttl=-120)
    with pytest.raises(FundsLocked):
        baseline.select("tx-1", KEY, 5)
    assert not held("tx-1")


def test_release_frees_every_token(baseline):
    make_tokens(10, quantity=10)
    picked = baseline.select("tx-1", KEY, 45)
    baseline.release(picked)
    assert not TokenLock.objects.exists()
    assert baseline.select("tx-2", KEY, 100).total == 100


def test_skip_locked_statement_gives_up_after_six_statements_and_releases():
    # Six statements of sixteen tokens of 1 cover at most 96: a larger request is funds
    # locked (the supply is there), and the 96 locks taken on the way are given back.
    make_tokens(200, quantity=1)
    strategy = build("skip-locked-statement", seed=1)
    with pytest.raises(FundsLocked):
        strategy.select("tx-1", KEY, 150)
    assert not TokenLock.objects.exists()
    assert strategy.lock_attempts >= 96


def test_cache_batch_learns_released_tokens_and_drops_what_others_took():
    tokens = make_tokens(6, quantity=10)
    strategy = build("cache-batch", seed=1)
    first = strategy.select("tx-1", KEY, 10)
    strategy.release(first)
    for token in tokens:
        if token.pk != first.token_ids[0]:
            make_lock(token, "other")
    # Its cache still lists tokens that others now hold: those attempts fail, the selection
    # still finds the one free token.
    assert strategy.select("tx-2", KEY, 10).token_ids == first.token_ids


def test_the_shipped_backoff_and_lease_are_the_baselines_too(settings):
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LEASE_SECONDS": 7}
    make_tokens(1, quantity=10)
    strategy = build("serialized-advisory", seed=random.randrange(1000))
    assert strategy.knobs.lease == 7
    assert strategy.knobs.backoff_attempts == BackoffPolicy().attempts
    strategy.select("tx-1", KEY, 5)
    lock = TokenLock.objects.get()
    assert round((lock.expires_at - lock.created_at).total_seconds()) == 7


# The reference: the strongest simple design, on tables of its own (bench.strategies.reference).


@pytest.fixture
def reference():
    from bench.strategies import reference as module

    module.install()  # inside the test's transaction: gone with it
    return build(REFERENCE, seed=7)


def reference_tokens(count: int, quantity: int = 10, wallet: str = "alice") -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            'INSERT INTO reference_token (tx_id, "index", wallet, currency, quantity) '
            "SELECT 'seed', g, %s, 'USD', %s FROM generate_series(0, %s - 1) g RETURNING id",
            [wallet, quantity, count],
        )
        return sorted(row[0] for row in cursor.fetchall())


def reference_lock(token_id: int, tx_id: str, fence: int = 1, ttl: float = 60.0) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO reference_lock (token_id, spender_tx_id, fence, expires_at) "
            "VALUES (%s, %s, %s, now() + %s * interval '1 second')",
            [token_id, tx_id, fence, ttl],
        )


def rows(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def reference_held(tx_id: str) -> set[int]:
    query = "SELECT token_id FROM reference_lock WHERE spender_tx_id = %s"
    return {token_id for (token_id,) in rows(query, [tx_id])}


def reference_unspent(wallet: str = "alice") -> int:
    query = "SELECT coalesce(sum(quantity), 0) FROM reference_token WHERE wallet = %s"
    return int(rows(query + " AND spent_at IS NULL", [wallet])[0][0])


def state(tx_id: str) -> str | None:
    found = rows("SELECT state FROM reference_selection WHERE tx_id = %s", [tx_id])
    return found[0][0] if found else None


def test_the_reference_locks_exactly_its_tokens_under_one_fence_and_records_it(reference):
    ids = reference_tokens(20)
    picked = reference.select("tx-1", KEY, 35)
    assert picked.token_ids == ids[:4] and picked.total == 40  # the covering prefix, in id order
    assert reference_held("tx-1") == set(picked.token_ids)
    assert rows("SELECT DISTINCT fence FROM reference_lock") == [(picked.fence,)]
    assert rows("SELECT fence, quantity, state FROM reference_selection WHERE tx_id = 'tx-1'") == [
        (picked.fence, 35, "selected")
    ]
    assert reference.lock_attempts == 4


def test_the_reference_spends_into_payment_and_change_all_at_once(reference):
    reference_tokens(5)
    picked = reference.select("tx-1", KEY, 13)
    created = reference.spend(picked, payment(picked.total, 13, "alice", "bob"))
    assert created is not None
    assert [(key.wallet, c.quantity) for key, c in created.outputs] == [("bob", 13), ("alice", 7)]
    assert reference_unspent("bob") == 13 and reference_unspent("alice") == 50 - 13
    assert state("tx-1") == "spent"
    # Spent once: the same selection cannot be spent again.
    assert reference.spend(picked, payment(picked.total, 13, "alice")) is None
    assert reference_unspent("alice") == 50 - 13


def test_a_reference_spend_under_another_fence_writes_nothing(reference):
    reference_tokens(3)
    picked = reference.select("tx-1", KEY, 10)
    stale = Picked(picked.tx_id, picked.key, picked.fence + 1, picked.tokens)
    assert reference.spend(stale, payment(stale.total, 10, "alice")) is None
    assert reference_unspent() == 30 and state("tx-1") == "selected"
    assert not rows("SELECT 1 FROM reference_token WHERE tx_id = 'tx-1'")


def test_a_stale_reference_holder_can_neither_spend_nor_release_the_new_holders_lock(reference):
    [token_id] = reference_tokens(1)
    stale = reference.select("tx-1", KEY, 10)
    with connection.cursor() as cursor:  # its lease runs out
        cursor.execute("UPDATE reference_lock SET expires_at = now() - interval '1 second'")
    taker = reference.select("tx-2", KEY, 10)  # takes the expired lock row over
    assert taker.token_ids == [token_id] and taker.fence != stale.fence
    assert reference.spend(stale, payment(10, 10, "alice")) is None
    reference.release(stale)
    assert reference_held("tx-2") == {token_id}
    assert reference.spend(taker, payment(10, 10, "alice")) is not None


def test_the_reference_answers_insufficient_funds_only_when_the_supply_is_short(reference):
    reference_tokens(3)
    with pytest.raises(InsufficientFunds):
        reference.select("tx-1", KEY, 31)
    assert not rows("SELECT 1 FROM reference_lock") and state("tx-1") is None
    assert reference.select("tx-2", KEY, 30).total == 30


def test_funds_others_hold_are_funds_locked_and_the_reference_gives_back_what_it_took(reference):
    ids = reference_tokens(4)
    for token_id in ids[:3]:
        reference_lock(token_id, "other")
    with pytest.raises(FundsLocked):
        reference.select("tx-1", KEY, 20)
    assert not reference_held("tx-1") and state("tx-1") is None
    assert reference.select("tx-2", KEY, 10).token_ids == [ids[3]]


def test_the_reference_takes_an_expired_lock_row_over(reference):
    [token_id] = reference_tokens(1)
    reference_lock(token_id, "crashed", ttl=-120)
    picked = reference.select("tx-1", KEY, 5)
    assert picked.token_ids == [token_id] and reference_held("tx-1") == {token_id}


def test_the_reference_releases_every_token_and_its_record(reference):
    reference_tokens(10)
    picked = reference.select("tx-1", KEY, 45)
    reference.release(picked)
    assert not rows("SELECT 1 FROM reference_lock") and state("tx-1") == "released"
    assert reference.select("tx-2", KEY, 100).total == 100


def test_a_reference_tx_id_used_before_is_refused_and_holds_nothing(reference):
    reference_tokens(4)
    reference.release(reference.select("tx-1", KEY, 10))
    with pytest.raises(IntegrityError), transaction.atomic():
        reference.select("tx-1", KEY, 10)
    assert not rows("SELECT 1 FROM reference_lock")


def test_a_large_reference_request_takes_several_growing_steps(reference):
    # 16 + 32 + 64 tokens of 1 cover 100; a request of more than the wallet holds is short.
    reference_tokens(200, quantity=1)
    picked = reference.select("tx-1", KEY, 100)
    assert len(picked.tokens) == 100 and reference.lock_attempts == 16 + 32 + 52
    with pytest.raises(FundsLocked):  # the other 100 are free, the rest held by tx-1
        reference.select("tx-2", KEY, 150)
    assert not reference_held("tx-2")


def test_a_reference_step_reads_its_wallet_index_on_a_table_of_one_wallet(reference):
    # A contested workload's statistics: one wallet, nothing spent. Walking the primary key in
    # id order then costs about what the wallet's index does; a step is planned on the index.
    from bench.strategies.reference import STEPS

    reference_tokens(1000)
    call = {"fence": None, "wallet": "alice", "currency": "USD", "batch": 16, "need": 5}
    call |= {"tx_id": "tx-1", "lease": 60, "quantity": 5}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE reference_token")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    scans = [
        node.get("Index Name", node["Node Type"])
        for node in explain_prepared(STEPS[False], call)
        if node.get("Relation Name") == "reference_token"
    ]
    assert scans == ["reference_token_unspent"]


@pytest.mark.django_db(transaction=True)
def test_a_lease_taken_over_while_a_reference_spend_waits_is_refused(db_url):
    """The spend checks the lock row's latest version, not the one its snapshot saw.

    A step that takes a lease over holds the token's row lock until it commits; a spend that
    began before then waits for that row lock, and must then see the new holder.
    """
    import psycopg

    from bench.strategies import reference as module

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(module.SCHEMA)
        try:
            [token_id] = conn.execute(
                'INSERT INTO reference_token (tx_id, "index", wallet, currency, quantity) '
                "VALUES ('seed', 0, 'alice', 'USD', 10) RETURNING id"
            ).fetchone()
            conn.execute(
                "INSERT INTO reference_lock VALUES (%s, 'tx-1', 1, now() + interval '1 minute')",
                [token_id],
            )
            conn.execute(
                "INSERT INTO reference_selection (tx_id, fence, wallet, currency, quantity) "
                "VALUES ('tx-1', 1, 'alice', 'USD', 10)"
            )
            # A step of tx-2 holds the token's row lock (its lease about to take the row over).
            with psycopg.connect(db_url) as taker:
                taker.execute("SELECT 1 FROM reference_token WHERE id = %s FOR UPDATE", [token_id])
                params = {
                    "ids": [token_id],
                    "tx_id": "tx-1",
                    "fence": 1,
                    "count": 1,
                    "currency": "USD",
                    "wallets": ["alice"],
                    "quantities": [10],
                }
                child = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests.workers.statement",
                        db_url,
                        module.SPEND,
                        json.dumps(params),
                    ],
                    cwd=ROOT,
                    env=child_env(db_url),
                    stdout=subprocess.PIPE,
                    text=True,
                )
                waiting = (
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%reference_selection SET state = ''spent''%%'"
                )
                wait_for(lambda: conn.execute(waiting).fetchone()[0], "the spend to wait")
                taker.execute(
                    "UPDATE reference_lock SET spender_tx_id = 'tx-2', fence = 2, "
                    "expires_at = now() + interval '1 minute' WHERE token_id = %s",
                    [token_id],
                )
                taker.commit()
            out, _ = child.communicate(timeout=WAIT)
            assert out.strip() == "0"  # nothing spent
            spent = conn.execute("SELECT spent_at FROM reference_token WHERE id = %s", [token_id])
            assert spent.fetchone()[0] is None
        finally:
            conn.execute("DROP TABLE reference_lock, reference_selection, reference_token")
            conn.execute("DROP SEQUENCE reference_fence_seq")
