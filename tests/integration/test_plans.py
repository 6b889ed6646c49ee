"""Plans of the hot statements as prepared statements get them: generic, planned once.

A generic plan is costed from averages, not from the values of a call. These tests plan the
locking statements generically on a token table skewed the way real ones are (one issue of
many tokens under one transaction id) and check that each lookup by key stays a lookup, and
that reads in quantity order walk the amount index instead of sorting a whole wallet.
"""

from __future__ import annotations

import contextlib
import json
import re

import pytest
from django.db import connection
from django.utils import timezone

from bench.vacuum import vacuum_analyse
from common import db
from locks.housekeeping import run_housekeeping
from locks.sql import lifecycle, locking
from tests.factories import make_tokens
from tests.helpers.plans import nodes
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)

# Parameters of a recording fetch, in the order ``common.db.native`` numbers them.
CALL = {
    "fence": None,
    "namespace": "",
    "tx_id": "a-new-tx",
    "wallet": "alice",
    "currency": "USD",
    "limit": 16,
    "need": 5,
    "lease": 60.0,
    "synchronous_commit": None,
    "spare": True,
    "yield_to_turn": True,
    "strategy": "random",
    "quantity": 5,
    "held_total": 0,
    "held_ids": [],
    "held_expiry": None,
    "token_ids": [],
    "wallets": None,
    "indexes": [],
    "output_wallets": [],
    "currencies": [],
    "quantities": [],
    "seconds": 60.0,
    "max_lease": 600.0,
    "smallest": 64,
    "largest": 64,
    "cap": None,
}


def generic_plan(statement: str) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tokens_token")
    with prepared(statement) as plan:
        return plan()


@contextlib.contextmanager
def prepared(statement: str):
    """Prepare ``statement`` for generic plans; yield what explains its plan as it is then."""
    text, names = db.native(statement)
    values = ", ".join(_literal(CALL[name]) for name in names)

    def plan() -> list[dict]:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE probe({values})")
            found = cursor.fetchone()[0]
        found = json.loads(found) if isinstance(found, str) else found
        return list(nodes(found[0]["Plan"]))

    with connection.cursor() as cursor:
        # The session's own mode is put back afterwards, not the server's default (RESET): the
        # connection goes back to the pool, and the next test to borrow it expects what every
        # session of the application is told when it opens (common.postgres).
        cursor.execute("SHOW plan_cache_mode")
        (mode,) = cursor.fetchone()
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(f"PREPARE probe AS {text}")
            yield plan
        finally:
            cursor.execute("DEALLOCATE ALL")
            cursor.execute("SELECT set_config('plan_cache_mode', %s, false)", [mode])


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, list):
        return "'{}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


@pytest.mark.parametrize("fetch", [True, False], ids=["fetch-and-lock", "try-lock"])
def test_the_tx_id_gate_looks_the_claim_up_by_key_under_a_generic_plan(fetch):
    # 3000 tokens issued under one tx id: the gate reads none of them, only the id's claim.
    make_tokens(3000, wallet="alice", quantity=1)
    # Claims as a service in use has them, analysed: the plan must not hang on whatever
    # statistics earlier tests left on an almost empty claim table (a scan is cheapest there).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tokens_txclaim (namespace, tx_id) "
            "SELECT '', 'used-' || n FROM generate_series(1, 3000) n"
        )
        cursor.execute("ANALYZE tokens_txclaim")
    statement = locking.LOCK_STATEMENTS[
        locking.LockStatement("random" if fetch else "given", record=True)
    ]
    plan = generic_plan(statement)
    by_tx_id = [
        n
        for n in plan
        if n.get("Relation Name") in ("tokens_token", "tokens_txclaim")
        and "tx_id" in n.get("Index Cond", "") + n.get("Filter", "")
    ]
    # Index only or not depends on how much of the claim table the visibility map covers
    # (autovacuum's doing); either reads the one claim by key.
    assert [(n["Relation Name"], n["Node Type"].replace(" Only", "")) for n in by_tx_id] == [
        ("tokens_txclaim", "Index Scan")
    ]


# Lock rows as a crash leaves them: many expired ones, analysed, then live ones that the
# statistics have not seen yet (as between two autovacuum analyses while selections run), each
# of its own spender.
PLANT_LOCKS = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at,
                             wallet, currency, quantity)
SELECT id, %s || id, 1, now() + %s * interval '1 second' - interval '1 minute',
       now() + %s * interval '1 second', wallet, currency, quantity
FROM tokens_token WHERE wallet = %s ORDER BY id LIMIT %s
"""


STATEMENTS = {
    "fetch-and-lock": locking.LOCK_STATEMENTS[locking.LockStatement("random")],
    "try-lock": locking.LOCK_STATEMENTS[locking.LockStatement("given")],
    "spend": lifecycle.SPEND,
    "extend": lifecycle.EXTEND_STATEMENTS[True],
    "read": lifecycle.READ,
    "release": lifecycle.RELEASE_STATEMENTS[False],
    "unlock": locking.UNLOCK_STATEMENTS[True],
}


def lock_reads(plan: list[dict]) -> list[dict]:
    return [
        n
        for n in plan
        if n.get("Relation Name") == "locks_tokenlock" and n["Node Type"] != "ModifyTable"
    ]


def by_key(node: dict) -> bool:
    """A read of lock rows by key: a token's (primary key) or a holder's (spender index).

    An index scan is not enough: on the primary key (token, wallet) a condition on the wallet
    alone walks the whole index.
    """
    return node["Node Type"] in ("Index Scan", "Index Only Scan") and (
        "(token_id = " in node.get("Index Cond", "")
        or node.get("Index Name") == "tokenlock_spender"
    )


def described(reads: list[dict]) -> list[tuple[str, str | None, str | None]]:
    return [(n["Node Type"], n.get("Index Name"), n.get("Index Cond")) for n in reads]


@pytest.mark.parametrize("name", STATEMENTS)
def test_lock_rows_are_found_by_key_whatever_the_statistics_say(name):
    # Planned from statistics that saw almost no live lock, a lease test that an index can
    # answer reads every live lock row of every wallet through the expiry index, where one probe
    # by key (token and wallet, or the selection's spender and fence) is what it should do. It
    # then costs more with every live lock in the table.
    make_tokens(3000, wallet="alice", quantity=1)
    make_tokens(3000, wallet="bob", quantity=1)
    with connection.cursor() as cursor:
        cursor.execute(PLANT_LOCKS, ["crashed", -3600, -3600, "alice", 2000])
        cursor.execute("ANALYZE locks_tokenlock")
        cursor.execute(PLANT_LOCKS, ["live", 0, 60, "bob", 2500])
    reads = lock_reads(generic_plan(STATEMENTS[name]))
    assert reads and all(map(by_key, reads)), described(reads)


@pytest.mark.parametrize("name", STATEMENTS)
def test_a_burst_after_a_quiet_spell_is_planned_again_to_read_by_key(name):
    # Every lock released, then the vacuum autovacuum runs after a quiet spell: it records an
    # empty table of no pages, and plans made on that read the whole lock table. A connection
    # that planned its statement then (a burst that began before housekeeping's next pass) is
    # planned again once the pass has forgotten those statistics.
    make_tokens(3000, wallet="alice", quantity=1)
    with connection.cursor() as cursor:
        cursor.execute(PLANT_LOCKS, ["burst", 0, 60, "alice", 3000])
        cursor.execute("DELETE FROM locks_tokenlock")
        vacuum_analyse(cursor, "locks_tokenlock")
        cursor.execute("ANALYZE tokens_token")
    with prepared(STATEMENTS[name]) as plan:
        before = lock_reads(plan())
        run_housekeeping()
        after = lock_reads(plan())
    assert before and not all(map(by_key, before)), described(before)  # the fault, as it was
    assert after and all(map(by_key, after)), described(after)


# Lock rows of many wallets, as a service in use has them.
PLANT_ALL_LOCKS = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at,
                             wallet, currency, quantity)
SELECT id, 'held-' || id / 3, 1, now(), now() + interval '1 minute', wallet, currency, quantity
FROM tokens_token
"""


def target_reads(plan: list[dict]) -> list[dict]:
    """The scans that find the lock rows a statement deletes or renews (not its subqueries')."""
    found: list[dict] = []

    def walk(node: dict) -> None:
        if node.get("Relation Name") == "locks_tokenlock" and "Scan" in node["Node Type"]:
            found.append(node)
        for child in node.get("Plans", ()):
            if child.get("Parent Relationship") in ("Outer", "Inner", "Member"):
                walk(child)

    for node in plan:
        if node["Node Type"] == "ModifyTable" and node.get("Relation Name") == "locks_tokenlock":
            for child in node.get("Plans", ()):
                if child.get("Parent Relationship") == "Outer":
                    walk(child)
    return found


@pytest.mark.parametrize("name", ["unlock", "release", "spend", "extend"])
def test_rows_found_once_are_found_again_by_key(name):
    # The lock rows a statement deletes or renews were found by its first read, and are found
    # again by key: the ids are a condition of the primary key's scan (`= ANY(ARRAY(...))`), not
    # a join, which a plan may run as a walk of the key (token, wallet) by wallet alone, every
    # lock row of the table at every call, for as long as the plan lives.
    for n in range(800):
        make_tokens(6, wallet=f"w{n}", quantity=1)
    with connection.cursor() as cursor:
        cursor.execute(PLANT_ALL_LOCKS)
        cursor.execute("ANALYZE locks_tokenlock")
        cursor.execute("ANALYZE tokens_token")
    with prepared(STATEMENTS[name]) as plan:
        reads = target_reads(plan())
    assert reads and all(map(by_key, reads)), described(reads)


# Every fetch in quantity order: the strategies' (ascending, descending), a random selection's
# largest-first fetch after a short batch (descending), each also as a contested wallet's fetch,
# and the window of exact and consolidate.
ORDERED = {
    **{
        f"{order}{'-contested' if contested else ''}": locking.LOCK_STATEMENTS[
            locking.LockStatement(order, contested=contested)
        ]
        for order in ("ascending", "descending")
        for contested in (False, True)
    },
    "window": locking.CANDIDATES,
}


def token_reads(plan: list[dict]) -> list[tuple[str, str | None]]:
    return [
        (n["Node Type"], n.get("Index Name"))
        for n in plan
        if n.get("Relation Name") == "tokens_token" and n["Node Type"] != "ModifyTable"
    ]


def wallets_of_many_amounts() -> None:
    for quantity in range(1, 31):
        make_tokens(100, wallet="alice", quantity=quantity)
        make_tokens(100, wallet="bob", quantity=quantity)


@pytest.mark.parametrize("name", ORDERED)
def test_fetches_in_quantity_order_walk_the_amount_index(name):
    # Read through token_unspent_by_wallet (id order), a batch in quantity order had to read
    # and sort every free token of the wallet: its cost grew with the wallet, not the batch.
    wallets_of_many_amounts()
    plan = generic_plan(ORDERED[name])
    batch = token_reads(plan)[0]  # the batch is the statement's first read of the tokens
    assert batch[1] == "token_unspent_by_amount", token_reads(plan)
    # Equal quantities are shuffled by an incremental sort; nothing sorts a whole wallet.
    by_amount = [n for n in plan if n["Node Type"] == "Sort" and "quantity" in n["Sort Key"][0]]
    assert not by_amount, by_amount


def test_the_random_fetch_keeps_its_walk_from_a_random_point():
    wallets_of_many_amounts()
    plan = generic_plan(locking.LOCK_STATEMENTS[locking.LockStatement("random")])
    # The amount index must not take over the random fetch's read in id order: both halves of
    # the walk (from the random pivot up, then from the start up to it) read an index by id,
    # bounded by the pivot. Which one is the planner's choice at this size. So is the index
    # of the wallet's supply, summed only when the batch falls short: it reads every free token
    # of the wallet whichever it takes, and at times it takes the amount index.
    walk = [
        node.get("Index Name")
        for node in plan
        if node.get("Relation Name") == "tokens_token"
        and any(bound in node.get("Index Cond", "") for bound in ("(id >= ", "(id < "))
    ]
    assert len(walk) == 2 and "token_unspent_by_amount" not in walk, token_reads(plan)


@pytest.mark.parametrize("contested", [False, True], ids=["cold", "contested"])
def test_a_random_fetch_from_the_front_walks_the_wallets_unspent_tokens_in_id_order_once(contested):
    # As in any wallet in use, its oldest tokens are spent: they are the front of its tokens
    # in id order, where a cold or a contested key's fetch starts.
    wallets_of_many_amounts()
    oldest = Token.objects.order_by("id").values_list("id", flat=True)[:3000]
    Token.objects.filter(id__in=list(oldest)).update(spent_by="tx-x", spent_at=timezone.now())
    variant = locking.LockStatement("random", front=True, contested=contested)
    plan = generic_plan(locking.LOCK_STATEMENTS[variant])
    # Its batch is the first read of the tokens: one walk of the wallet's unspent tokens in id
    # order, not of all its tokens (token_by_wallet, through every spent one first), nor of
    # the amount index (which would sort the wallet to find its first tokens by id).
    assert token_reads(plan)[0][1] == "token_unspent_by_wallet", token_reads(plan)
    bounds = [n for n in plan if re.search(r"\(id [<>]=? ", n.get("Index Cond", ""))]
    assert not bounds, bounds  # no pivot to walk from, no wrap-around below it
    assert not [n for n in plan if n["Node Type"] == "Sort" and "quantity" in n["Sort Key"][0]]


@pytest.mark.parametrize("name", [name for name in ORDERED if name != "window"])
def test_a_full_batch_asks_only_the_largest_free_tokens_whether_they_cover_the_need(name):
    # A batch in quantity order that cannot cover the need is locked whole if the wallet's free
    # tokens can: a running sum down the amount index, stopped (LIMIT 1) at the first token
    # that covers it, not the sum of every free token of the wallet.
    wallets_of_many_amounts()
    walks = [
        node
        for node in generic_plan(ORDERED[name])
        if node["Node Type"] == "Limit"
        and [m["Node Type"] for m in nodes(node)][:3] == ["Limit", "Subquery Scan", "WindowAgg"]
        and any(m.get("Index Name") == "token_unspent_by_amount" for m in nodes(node))
    ]
    assert len(walks) == 1, walks


@pytest.mark.parametrize("order", ["random", "descending"])
@pytest.mark.parametrize("contested", [False, True], ids=["plain", "contested"])
def test_a_fetch_row_locks_only_the_tokens_it_chose(order, contested):
    # The tokens a fetch chose are row-locked by key (locking.WANTED), not by a read of the
    # wallet's unspent tokens, however many the wallet holds.
    make_tokens(1000, wallet="alice", quantity=1)
    front = order == "random" and contested
    variant = locking.LockStatement(order, front=front, contested=contested)
    plan = generic_plan(locking.LOCK_STATEMENTS[variant])
    wanted = next(n for n in plan if n.get("Subplan Name") == "CTE wanted")
    assert token_reads(list(nodes(wanted))) == [("Index Scan", "tokens_token_pkey")]
