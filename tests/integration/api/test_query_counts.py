"""The statements each selection request costs, API-key authentication included."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from locks.models import Selection, TokenLock
from tests.helpers.api import issue, output, select, spend, token

# Outside a test transaction, as in production: no savepoints in the counts.
pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/selections/"


@pytest.fixture
def warm(api):
    """A funded wallet and a key this process has already verified."""
    issue(api, *[token("mint", i, quantity="10") for i in range(40)])
    assert api.get("/api/v1/tokens/?page_size=1").status_code == 200
    return api


def queries_of(call) -> tuple[list[str], object]:
    with CaptureQueriesContext(connection) as captured:
        result = call()
    return [q["sql"] for q in captured], result


def test_select_is_one_statement_that_takes_the_rate_limit_where_it_locks(warm):
    # A cold replica cache: the fetch takes the key's and the wallet's units, locks and records
    # the selection, all in one statement.
    statements, response = queries_of(lambda: select(warm, "tx-1", "25"))
    assert len(statements) == 1, statements
    assert "clients_ratebucket" in statements[0]
    assert "INSERT INTO locks_tokenlock" in statements[0]
    assert "INSERT INTO locks_selection" in statements[0]
    assert response.json()["tokens"]  # built from the statement, no refetch
    # The wallet is warm now: its fetch keeps what it does not lock. Still one statement.
    statements, _ = queries_of(lambda: select(warm, "tx-2", "25"))
    assert len(statements) == 1, statements
    assert "pivot" in statements[0]
    # Served from the cache that fetch filled: still one statement.
    statements, response = queries_of(lambda: select(warm, "tx-3", "25"))
    assert len(statements) == 1, statements
    assert "clients_ratebucket" in statements[0]
    assert "pivot" not in statements[0]  # a try-lock of cached candidates, not a fetch
    assert response.json()["tokens"]


def test_release_spend_and_extend_are_one_statement_each(warm):
    select(warm, "tx-r", "10")
    select(warm, "tx-s", "10")
    select(warm, "tx-e", "10")
    total = Selection.objects.get(tx_id="tx-s").total
    for call in (
        lambda: warm.post(f"{URL}tx-r/release/"),
        lambda: spend(warm, "tx-s", [output(0, "bob", str(total))]),
        lambda: warm.post(f"{URL}tx-e/extend/", {"seconds": 30}, format="json"),
    ):
        statements, response = queries_of(call)
        assert response.status_code == 200, response.json()
        assert len(statements) == 1, statements


def test_a_spends_change_serves_the_next_selection_without_a_fetch(warm):
    select(warm, "tx-0", "25")  # a cold fetch of 16 rows: 3 locked, the other 13 not kept
    select(warm, "tx-1", "25")  # a warm one reads the 37 free: 3 locked, 34 queued here
    spend(warm, "tx-1", [output(0, "bob", "25"), output(1, "alice", "5")])
    # 345 is the 34 queued tokens and the change: a try-lock of the queue and nothing else.
    statements, response = queries_of(lambda: select(warm, "tx-2", "345"))
    assert len(statements) == 1, statements
    assert "pivot" not in statements[0]
    assert {t["tx_id"] for t in response.json()["tokens"]} == {"mint", "tx-1"}


def test_repeats_answer_within_the_same_budget(warm):
    select(warm, "tx-1", "10")
    total = Selection.objects.get(tx_id="tx-1").total
    spend(warm, "tx-1", [output(0, "bob", str(total))])
    statements, response = queries_of(lambda: spend(warm, "tx-1", [output(0, "bob", str(total))]))
    assert len(statements) == 1 and response.json()["status"] == "spent"
    statements, response = queries_of(lambda: select(warm, "tx-1", "10", expect=200))
    assert len(statements) <= 2, statements  # the refused lock (with the units), then a read


def test_no_lock_outlives_its_selection_row(warm):
    # Every lock row a selection took was written with its selection row: there is no
    # moment at which a lock exists whose owner has no record.
    for i in range(10):
        select(warm, f"tx-{i}", str(5 + 3 * i))
    owners = set(Selection.objects.values_list("tx_id", "fence"))
    assert set(TokenLock.objects.values_list("spender_tx_id", "fence")) <= owners
