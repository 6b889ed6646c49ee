"""One request reads a bounded part of its wallet, however large the wallet.

Counted in rows, from ``EXPLAIN (ANALYZE)`` of each statement as the service runs it: the token
rows a statement reads and the lock probes it makes never grow past MAX_EXAMINED (and the
batch or window the request asked for), on a wallet several times that size. Covering a
quantity that would take more tokens than that is refused with selection_too_large.
"""

from __future__ import annotations

import pytest
from django.db import connection

from common import db
from locks.sql import locking
from sherdlock.strategies import MAX_EXAMINED
from tests.factories import make_tokens
from tests.helpers.api import counts, issue, token
from tests.helpers.plans import explain_prepared

pytestmark = pytest.mark.django_db(transaction=True)

# A wallet several times the bound, so that reading all of it shows.
WALLET = 4 * MAX_EXAMINED


def run_analysed(statement: str, params: dict) -> list[dict]:
    """Run ``statement`` under EXPLAIN (ANALYZE), as analysed tables plan it; return its nodes."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tokens_token")
    return explain_prepared(statement, params, analyse=True)


def rows_read(plan: list[dict], relation: str) -> int:
    """Rows of ``relation`` the plan's scans read: returned or filtered out, every loop."""
    return sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
        for n in plan
        if n.get("Relation Name") == relation and n["Node Type"] != "ModifyTable"
    )


def probes(plan: list[dict]) -> int:
    """Lock rows looked up (one per candidate token), every loop."""
    return sum(
        n["Actual Loops"]
        for n in plan
        if n.get("Relation Name") == "locks_tokenlock" and n["Node Type"] != "ModifyTable"
    )


FETCH = {
    "fence": None,
    "tx_id": "over-ask",
    "wallet": "alice",
    "currency": "USD",
    "lease": 60.0,
    "synchronous_commit": None,
    "spare": True,
    "yield_to_turn": True,
}


@pytest.mark.parametrize("order", ["ascending", "descending"])
@pytest.mark.parametrize("quantities", ["equal", "distinct"])
def test_an_over_ask_in_quantity_order_reads_at_most_the_bound(order, quantities):
    # The descending fetch is a random selection's after a short batch.
    if quantities == "equal":
        make_tokens(WALLET, quantity=10)
    else:
        for quantity in range(1, WALLET // 100 + 1):
            make_tokens(100, quantity=quantity)
    statement = locking.LOCK_STATEMENTS[locking.LockStatement(order)]
    need = 10**12  # far more than the wallet holds
    plan = run_analysed(statement, {**FETCH, "limit": 64, "need": need})
    # The batch, then at most MAX_EXAMINED + 1 of the largest: a bound, not the wallet.
    assert rows_read(plan, "tokens_token") <= 64 + MAX_EXAMINED + 1, rows_read(plan, "tokens_token")
    assert probes(plan) <= 64 + MAX_EXAMINED + 1, probes(plan)
    row = db.one(db.execute(statement, {**FETCH, "limit": 64, "need": need}))
    assert row[1] is None  # nothing granted
    assert row[7] == -1  # free: more than the bound would be needed (batches.TOO_MANY)


@pytest.mark.parametrize("strategy", ["exact", "consolidate"])
def test_the_window_of_equal_tokens_reads_the_window_only(strategy):
    make_tokens(WALLET, quantity=10)
    smallest, largest = (0, 64) if strategy == "exact" else (100, 100)
    params = {
        "wallet": "alice",
        "currency": "USD",
        "smallest": smallest,
        "largest": largest,
        "cap": 30 if strategy == "exact" else None,
    }
    plan = run_analysed(locking.CANDIDATES, params)
    assert rows_read(plan, "tokens_token") <= smallest + largest
    assert probes(plan) <= smallest + largest


def test_the_supply_reads_at_most_the_bound():
    make_tokens(WALLET, quantity=10)
    plan = run_analysed(locking.SUPPLY, {"wallet": "alice", "currency": "USD", "tx_id": "x"})
    assert rows_read(plan, "tokens_token") <= MAX_EXAMINED + 1
    assert probes(plan) <= MAX_EXAMINED + 1


STRATEGIES = ["random", "smallest_first", "fewest_tokens", "exact", "consolidate"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_over_ask_of_a_large_wallet_is_refused_as_too_large(api, strategy):
    make_tokens(WALLET, quantity=10)
    before = counts()
    response = api.post(
        "/api/v1/selections/",
        {
            "tx_id": "big",
            "wallet": "alice",
            "currency": "USD",
            "quantity": str(10 * WALLET + 1),
            "strategy": strategy,
        },
        format="json",
    )
    assert response.status_code == 409, response.json()
    body = response.json()
    assert (body["code"], body["limit"]) == ("selection_too_large", MAX_EXAMINED)
    assert counts() == before  # nothing locked, nothing recorded


@pytest.mark.parametrize("strategy", ["random", "fewest_tokens"])
def test_a_quantity_needing_more_tokens_than_the_bound_is_refused(api, strategy):
    # The wallet holds it, but only in more than MAX_EXAMINED tokens.
    make_tokens(WALLET, quantity=10)
    response = api.post(
        "/api/v1/selections/",
        {
            "tx_id": "many",
            "wallet": "alice",
            "currency": "USD",
            "quantity": str(10 * MAX_EXAMINED + 1),
            "strategy": strategy,
        },
        format="json",
    )
    assert (response.status_code, response.json()["code"]) == (409, "selection_too_large")


def test_small_tokens_first_stop_at_the_bound(api):
    # The largest tokens could cover it, but smallest_first takes the small ones first: it
    # stops once it holds MAX_EXAMINED of them, and lets them go.
    make_tokens(MAX_EXAMINED + 100, quantity=1)
    make_tokens(2, quantity=10 * MAX_EXAMINED)
    before = counts()
    response = api.post(
        "/api/v1/selections/",
        {
            "tx_id": "small",
            "wallet": "alice",
            "currency": "USD",
            "quantity": str(MAX_EXAMINED + 50),
            "strategy": "smallest_first",
        },
        format="json",
    )
    assert (response.status_code, response.json()["code"]) == (409, "selection_too_large")
    assert counts() == before


def test_a_selection_within_the_bound_still_succeeds(api):
    make_tokens(WALLET, quantity=10)
    response = api.post(
        "/api/v1/selections/",
        {"tx_id": "fits", "wallet": "alice", "currency": "USD", "quantity": "5000"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert len(response.json()["tokens"]) == 500


def test_an_over_ask_of_a_small_wallet_is_still_insufficient_funds(api):
    issue(api, token("m", 0, quantity="80"), token("m", 1, quantity="20"))
    response = api.post(
        "/api/v1/selections/",
        {"tx_id": "t", "wallet": "alice", "currency": "USD", "quantity": "101"},
        format="json",
    )
    assert response.status_code == 409
    assert (response.json()["code"], response.json()["available"]) == ("insufficient_funds", "100")


# Live locks of another spender on a wallet's tokens, in token-id order.
PLANT_LOCKS = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at,
                             wallet, currency, quantity)
SELECT id, 'other', 1, now(), now() + interval '1 minute', wallet, currency, quantity
FROM tokens_token WHERE wallet = %s ORDER BY id LIMIT %s
"""


def test_a_shortfall_counts_at_most_the_bound_of_unspent_tokens():
    # Few free tokens, many held by others: the walk ends within the bound, and the unspent
    # total it reports is read from the largest MAX_EXAMINED + 1 unspent tokens only.
    make_tokens(WALLET, quantity=10)
    with connection.cursor() as cursor:
        cursor.execute(PLANT_LOCKS, ["alice", WALLET - 200])
    statement = locking.LOCK_STATEMENTS[locking.LockStatement("descending")]
    plan = run_analysed(statement, {**FETCH, "limit": 64, "need": 10**12})
    # The batch and the walk pass the held tokens by; the total reads no more than the bound.
    assert rows_read(plan, "tokens_token") <= 64 + WALLET + MAX_EXAMINED + 1
    cursor = db.execute(statement, {**FETCH, "limit": 64, "need": 10**12})
    row = dict(zip([column.name for column in cursor.description], db.one(cursor), strict=True))
    assert row["free"] == 2000  # every free token
    assert [int(v) for v in row["unspent"]] == [10 * (MAX_EXAMINED + 1), MAX_EXAMINED + 1]


def test_an_over_ask_of_a_wallet_held_by_others_is_refused_as_too_large(api):
    make_tokens(WALLET, quantity=10)
    with connection.cursor() as cursor:
        cursor.execute(PLANT_LOCKS, ["alice", WALLET - 200])
    response = api.post(
        "/api/v1/selections/",
        {"tx_id": "t", "wallet": "alice", "currency": "USD", "quantity": str(10 * WALLET + 1)},
        format="json",
    )
    assert (response.status_code, response.json()["code"]) == (409, "selection_too_large")
