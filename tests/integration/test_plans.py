"""Plans of the hot statements as prepared statements get them: generic, planned once.

A generic plan is costed from averages, not from the values of a call. These tests plan the
locking statements generically on a token table skewed the way real ones are (one issue of
many tokens under one transaction id) and check that each lookup by key stays a lookup.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from common import db
from locks.sql import locking
from tests.factories import make_tokens

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
    "quantity": 5,
    "held_total": 0,
    "held_ids": [],
    "held_expiry": None,
    "token_ids": [],
}


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def generic_plan(statement: str) -> list[dict]:
    text, names = db.native(statement)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tokens_token")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(f"PREPARE probe AS {text}")
            values = ", ".join(_literal(CALL[name]) for name in names)
            cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE probe({values})")
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("DEALLOCATE ALL")
            cursor.execute("RESET plan_cache_mode")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return list(nodes(plan[0]["Plan"]))


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
    statement = locking.LOCK_STATEMENTS[
        locking.LockStatement(fetch=fetch, record=True, durable=True)
    ]
    plan = generic_plan(statement)
    by_tx_id = [
        n
        for n in plan
        if n.get("Relation Name") in ("tokens_token", "tokens_txclaim")
        and "tx_id" in n.get("Index Cond", "") + n.get("Filter", "")
    ]
    assert [(n["Relation Name"], n["Node Type"]) for n in by_tx_id] == [
        ("tokens_txclaim", "Index Only Scan")
    ]
