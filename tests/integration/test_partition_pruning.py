"""Every hot statement touches one partition of each table partitioned by wallet.

The token, lock and selection tables are copied into a schema of their own and partitioned
there by hash of wallet into 4 (``common.partitioning``, as the migrations do with
``SHERDLOCK_PARTITIONS=4``); the statements then run on it (``search_path``), each under EXPLAIN
ANALYZE in a savepoint rolled back after it, both as a generic plan (prepared statements, pruned
when the executor starts: "Subplans Removed", or never executed) and as a custom one (pruned by
the planner). A partition counts as touched when a scan of it ran at least once.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import psycopg
import pytest
from django.db import connection

from common import db, partitioning
from locks.housekeeping import guard_key, run_housekeeping
from locks.sql import legs, lifecycle, locking
from locks.sql.housekeeping import partition_statements
from tests.helpers.processes import database_url

pytestmark = pytest.mark.django_db

PARTITIONS = 4
SCHEMA = "wallet_partitions"
COPIED = ("tokens_token", "locks_tokenlock", "locks_selection", "tokens_txclaim")
WALLETS = [f"w{n}" for n in range(12)]
PARTITION = re.compile(r"^(tokens_token|locks_tokenlock|locks_selection)_p(\d+)$")
MODES = ("force_generic_plan", "force_custom_plan")


@pytest.fixture
def partitioned():
    """Partitioned copies of the tables, 12 wallets of 20 tokens of 10 USD; yield a cursor."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE SCHEMA {SCHEMA}")
        for table in COPIED:
            cursor.execute(f"CREATE TABLE {SCHEMA}.{table} (LIKE public.{table} INCLUDING ALL)")
        for table, column in partitioning.TABLES:
            cursor.execute(partitioning.partition(table, column, PARTITIONS, schema=SCHEMA))
        cursor.execute(f"SET LOCAL search_path TO {SCHEMA}, public")
        cursor.execute(
            'INSERT INTO tokens_token (tx_id, "index", wallet, currency, quantity) '
            "SELECT 'issue-' || w, i, w, 'USD', 10 "
            "FROM unnest(%s::text[]) AS w, generate_series(0, 19) AS i",
            [WALLETS],
        )
        cursor.execute("ANALYZE tokens_token")
        yield cursor


def touched(plan: dict) -> dict[str, set[int]]:
    """Return the partitions of each partitioned table that a scan of the plan ran on."""
    found: dict[str, set[int]] = {}

    def visit(node: dict) -> None:
        match = PARTITION.match(node.get("Relation Name", ""))
        if match and node.get("Actual Loops", 0) > 0:
            found.setdefault(match.group(1), set()).add(int(match.group(2)))
        for child in node.get("Plans", ()):
            visit(child)

    visit(plan["Plan"])
    return found


def explain(cursor, statement: str, params: dict, mode: str) -> dict[str, set[int]]:
    """Run ``statement`` prepared, planned per ``mode``, under EXPLAIN ANALYZE; roll it back."""
    text, names = db.native(statement)
    cursor.execute("SAVEPOINT probe")
    try:
        cursor.execute(f"SET LOCAL plan_cache_mode = {mode}")
        cursor.execute(f"PREPARE probe AS {text}")
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe({values})".format(
                values=", ".join(["%s"] * len(names))
            ),
            [params[name] for name in names],
        )
        plan = cursor.fetchone()[0]
    finally:
        cursor.execute("ROLLBACK TO SAVEPOINT probe")
        cursor.execute("DEALLOCATE ALL")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return touched(plan[0])


def partition_of(cursor, wallet: str) -> int:
    cursor.execute(
        "SELECT tableoid::regclass::text FROM tokens_token WHERE wallet = %s LIMIT 1", [wallet]
    )
    return int(cursor.fetchone()[0].rsplit("_p", 1)[1])


def token_ids(cursor, wallet: str) -> list[int]:
    cursor.execute("SELECT id FROM tokens_token WHERE wallet = %s ORDER BY id", [wallet])
    return [row[0] for row in cursor.fetchall()]


def lock_params(cursor, wallet: str, tx_id: str = "tx-new") -> dict:
    return {
        "fence": None,
        "namespace": "",
        "tx_id": tx_id,
        "wallet": wallet,
        "currency": "USD",
        "limit": 16,
        "need": Decimal(25),
        "lease": 60.0,
        "synchronous_commit": None,
        "spare": True,
        "yield_to_turn": True,
        "quantity": Decimal(25),
        "held_total": Decimal(0),
        "held_ids": [],
        "held_expiry": None,
        "token_ids": token_ids(cursor, wallet)[:5],
        "strategy": "smallest_first",
        "smallest": 8,
        "largest": 8,
        "cap": None,
        # A metered variant's rate-limit buckets (unpartitioned, keyed by name).
        "keys": ["selections_per_key:k", f"selections_per_wallet:{wallet}"],
        "capacities": [1000.0, 1000.0],
        "periods": [60.0, 60.0],
    }


def assert_one_partition(found: dict[str, set[int]], partition: int, what: str) -> None:
    assert found, f"{what}: no partition touched at all"
    for table, parts in found.items():
        assert parts == {partition}, f"{what}: {table} partitions {sorted(parts)}"


def record_selection(cursor, wallet: str, tx_id: str) -> dict:
    """Lock and record a selection of 25 of ``wallet``; return the parameters that made it."""
    params = lock_params(cursor, wallet, tx_id)
    variant = locking.LockStatement("random", record=True)
    cursor.execute(locking.LOCK_STATEMENTS[variant], params)
    assert cursor.fetchone()[-3] is not None  # recorded
    return params


def lifecycle_params(cursor, wallet: str, tx_id: str, pays: str) -> dict:
    cursor.execute("SELECT total FROM locks_selection WHERE tx_id = %s", [tx_id])
    total = cursor.fetchone()[0]
    return {
        "namespace": "",
        "tx_id": tx_id,
        "wallets": None,
        "indexes": [0],
        "output_wallets": [pays],
        "currencies": ["USD"],
        "quantities": [total],
        "seconds": 30.0,
        "max_lease": 600.0,
    }


@pytest.mark.parametrize("mode", MODES)
def test_every_locking_statement_touches_one_partition(partitioned, mode):
    cursor = partitioned
    wallet = WALLETS[5]
    partition = partition_of(cursor, wallet)
    for variant, statement in locking.LOCK_STATEMENTS.items():
        found = explain(cursor, statement, lock_params(cursor, wallet), mode)
        assert_one_partition(found, partition, str(variant))
    for name, statement in (("candidates", locking.CANDIDATES), ("supply", locking.SUPPLY)):
        found = explain(cursor, statement, lock_params(cursor, wallet), mode)
        assert_one_partition(found, partition, name)


@pytest.mark.parametrize("mode", MODES)
def test_unlock_spend_release_extend_and_read_touch_one_partition(partitioned, mode):
    cursor = partitioned
    wallet, other = WALLETS[2], WALLETS[7]
    partition = partition_of(cursor, wallet)
    assert partition != partition_of(cursor, other)
    params = record_selection(cursor, wallet, "tx-held")
    cursor.execute("SELECT fence FROM locks_selection WHERE tx_id = 'tx-held'")
    fence = cursor.fetchone()[0]
    statement = locking.UNLOCK_STATEMENTS[True]
    for some in (None, token_ids(cursor, wallet)[:3]):
        for commit in (None, "off"):
            unlock = {**params, "fence": fence, "token_ids": some, "synchronous_commit": commit}
            found = explain(cursor, statement, unlock, mode)
            assert_one_partition(found, partition, f"unlock of {some} commit={commit}")
    # A spend paying the payer and a spend paying another wallet (in another partition): the
    # outputs' rows go where their wallets live, every read stays in the payer's partition.
    for pays in (wallet, other):
        spend = lifecycle_params(cursor, wallet, "tx-held", pays)
        assert_one_partition(explain(cursor, lifecycle.SPEND, spend, mode), partition, "spend")
    spend = lifecycle_params(cursor, wallet, "tx-held", wallet)
    for durable in (False, True):
        for name, statements in (
            ("release", lifecycle.RELEASE_STATEMENTS),
            ("extend", lifecycle.EXTEND_STATEMENTS),
        ):
            found = explain(cursor, statements[durable], spend, mode)
            assert_one_partition(found, partition, f"{name} durable={durable}")
    assert_one_partition(explain(cursor, lifecycle.READ, spend, mode), partition, "read")


@pytest.mark.parametrize("mode", MODES)
def test_recording_legs_touches_one_partition(partitioned, mode):
    cursor = partitioned
    wallet = WALLETS[9]
    partition = partition_of(cursor, wallet)
    ids = token_ids(cursor, wallet)[:3]
    params = {
        "namespace": "",
        "tx_id": "tx-legs",
        "wallet": wallet,
        "currency": "USD",
        "quantity": Decimal(30),
        "total": Decimal(30),
        "fence": 1,
        "token_ids": ids,
        "strategy": "random",
        "legs": json.dumps([{"currency": "USD", "quantity": "30", "total": "30"}]),
        "expires_at": None,
    }
    assert_one_partition(explain(cursor, legs.RECORD, params, mode), partition, "record legs")


def test_housekeeping_statements_stay_in_their_partition(partitioned):
    cursor = partitioned
    for number, statements in enumerate(partition_statements(PARTITIONS)):
        for name, statement in statements.items():
            found = explain(cursor, statement, {"grace": 0.0, "limit": 100}, MODES[0])
            assert found, name
            assert all(parts == {number} for parts in found.values()), (name, found)


def test_a_statement_without_the_wallet_filter_is_caught(partitioned):
    """The check can fail: the lock anti-join without its wallet reads every partition."""
    cursor = partitioned
    wallet = WALLETS[5]
    variant = locking.LockStatement("random")
    statement = locking.LOCK_STATEMENTS[variant]
    unfiltered = statement.replace(" AND l.wallet = %(wallet)s::text", "")
    assert unfiltered != statement
    for mode in MODES:
        found = explain(cursor, unfiltered, lock_params(cursor, wallet), mode)
        with pytest.raises(AssertionError, match="locks_tokenlock partitions"):
            assert_one_partition(found, partition_of(cursor, wallet), "unfiltered")


def test_partitioning_keeps_rows_keys_and_index_names(partitioned):
    cursor = partitioned
    cursor.execute(
        "SELECT c.relkind, (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = ANY(%s) ORDER BY c.relname",
        [SCHEMA, [table for table, _ in partitioning.TABLES]],
    )
    assert cursor.fetchall() == [("p", PARTITIONS)] * 3
    cursor.execute(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = 'tokens_token'::regclass AND contype = 'p'"
    )
    assert cursor.fetchone()[0] == "PRIMARY KEY (id, wallet)"
    cursor.execute("SELECT count(*), count(DISTINCT id) FROM tokens_token")
    assert cursor.fetchone() == (20 * len(WALLETS),) * 2


def test_housekeeping_runs_per_partition_each_under_its_own_guard(partitioned, settings):
    """One pass per partition; a partition whose guard is held is left to its holder."""
    cursor = partitioned
    settings.SHERDLOCK = {**settings.SHERDLOCK, "PARTITIONS": PARTITIONS}
    held, free = WALLETS[2], WALLETS[7]
    held_partition = partition_of(cursor, held)
    assert held_partition != partition_of(cursor, free)
    for wallet in (held, free):
        cursor.execute(
            "INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, "
            "wallet, currency, quantity) SELECT id, 'old', 1, now() - interval '2 minutes', "
            "now() - interval '1 minute', wallet, currency, quantity FROM tokens_token "
            "WHERE wallet = %s",
            [wallet],
        )
    with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [guard_key(held_partition)])
        run = run_housekeeping(grace_seconds=0)
        # Let go before closing: a closed session's backend may hold its locks a while longer.
        other.execute("SELECT pg_advisory_unlock(%s)", [guard_key(held_partition)])
    assert not run.skipped and run.expired_removed == 20
    cursor.execute("SELECT DISTINCT wallet FROM locks_tokenlock")
    assert cursor.fetchall() == [(held,)]
    with pytest.raises(ValueError, match="partition"):
        run_housekeeping(partition=PARTITIONS)
    run = run_housekeeping(grace_seconds=0, partition=held_partition)
    assert run.expired_removed == 20
