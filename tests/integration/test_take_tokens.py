"""locks_take_tokens: how a contested wallet's fetch takes its batch, a covering run at a time."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import make_lock, make_token


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


TAKE = """SELECT token, took FROM locks_take_tokens(%s::bigint[], %s::numeric[], %s::numeric,
                                                  'alice', 'USD')"""


@pytest.mark.parametrize(
    ("held", "need", "looked"),
    [
        # Nothing held: one run, the shortest that covers 12 (10 + 5), taken whole.
        (None, 12, [(0, True), (1, True)]),
        # The second token's row is being taken elsewhere: the run of two brings 10, and the
        # next run, the 20, covers the rest; the 1 after it is never looked at.
        (1, 12, [(0, True), (1, False), (2, True)]),
        # The batch ends before the need is covered: every token looked at, the free ones taken.
        (2, 40, [(0, True), (1, True), (2, False), (3, True)]),
    ],
)
def test_the_contested_take_goes_a_covering_run_at_a_time(db_url, held, need, looked):
    tokens = [make_token(quantity=q) for q in (10, 5, 20, 1)]
    ids, amounts = [t.pk for t in tokens], [10, 5, 20, 1]
    holder, taker = _connect(db_url), _connect(db_url)
    try:
        holder.execute("BEGIN")
        if held is not None:
            holder.execute("SELECT FROM tokens_token WHERE id = %s FOR UPDATE", [ids[held]])
        taker.execute("BEGIN")
        rows = taker.execute(TAKE, [ids, amounts, need]).fetchall()
        assert rows == [(ids[i], took) for i, took in looked]
        # What it took, it holds: another transaction cannot row-lock it now.
        taken = [ids[i] for i, took in looked if took]
        free = holder.execute(
            "SELECT id FROM tokens_token WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED", [taken]
        ).fetchall()
        assert free == []
    finally:
        taker.execute("ROLLBACK")
        holder.execute("ROLLBACK")
        holder.close()
        taker.close()


def test_the_contested_take_passes_over_a_token_a_live_lock_names(db_url):
    tokens = [make_token(quantity=10) for _ in range(3)]
    make_lock(tokens[0], "tx-other", ttl=30)
    make_lock(tokens[1], "tx-gone", ttl=-5)  # expired: free to take over
    ids = [t.pk for t in tokens]
    with _connect(db_url) as taker:
        rows = taker.execute(TAKE, [ids, [10, 10, 10], 20]).fetchall()
    assert rows == [(ids[0], False), (ids[1], True), (ids[2], True)]
