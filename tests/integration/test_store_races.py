"""The PostgreSQL token store against other sessions: the races its statements must survive.

A race is forced, not hoped for: another session holds a row, or a statement is paused at a
gate after its snapshot while another commits. A replica that comes late, after a spend, finds
nothing to take over either.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone
from psycopg.rows import dict_row

from locks.models import TokenLock
from locks.sql import locking
from locks.store import PostgresTokenStore
from sherdlock import Candidate, Claim
from tests.factories import make_lock, make_token, make_tokens
from tests.helpers.blocked import seen_blocked
from tests.helpers.claims import KEY, claim
from tokens.models import Token


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


FETCH = locking.LOCK_STATEMENTS[locking.LockStatement("random")]
FRONT_FETCH = locking.LOCK_STATEMENTS[locking.LockStatement("random", front=True, contested=True)]
TRY_LOCK = locking.LOCK_STATEMENTS[locking.LockStatement("given")]

# A stand-in for random() that waits at a gate: a fetch calls random() while executing, i.e.
# after the statement's snapshot is taken: FETCH for its pivot, before the candidate scan;
# FRONT_FETCH (a contested key's, from the wallet's front) to shuffle its batch, once the scan
# has read the first candidate (and judged it free in that snapshot) and before the others.
GATE_SQL = """
CREATE OR REPLACE FUNCTION public.random() RETURNS double precision
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(4242);
    RETURN pg_catalog.random();
END $$
"""


def gated_fetch(db_url, statement: str, locked_meanwhile: int, need: int = 10) -> dict:
    """Run ``statement`` for ``need`` of alice's USD, paused after its snapshot was taken.

    While it waits, another replica locks ``locked_meanwhile`` with the real TRY_LOCK statement
    and commits; then the fetch goes on and its row is returned, by column name.
    """
    admin, replica, other, observer = (_connect(db_url) for _ in range(4))
    try:
        admin.execute(GATE_SQL)
        admin.execute("BEGIN")
        admin.execute("SELECT pg_advisory_xact_lock(4242)")  # close the gate
        # Only the replica resolves random() to the gated stand-in.
        replica.execute("SET search_path = public, pg_catalog")
        replica.row_factory = dict_row  # rows by column name
        result: dict[str, object] = {}

        def run_fetch() -> None:
            try:
                result["row"] = replica.execute(
                    statement,
                    {
                        "wallet": "alice",
                        "currency": "USD",
                        "tx_id": "tx-replica",
                        "fence": 2,
                        "need": need,
                        "limit": 8,
                        "lease": 30.0,
                        "synchronous_commit": None,
                        "spare": True,
                        "yield_to_turn": True,
                    },
                ).fetchone()
            except Exception as exc:  # surfaced by the assertion below
                result["error"] = exc

        worker = threading.Thread(target=run_fetch)
        worker.start()
        seen_blocked(observer, replica.info.backend_pid)
        granted = other.execute(
            TRY_LOCK,
            {
                "token_ids": [locked_meanwhile],
                "tx_id": "tx-other",
                "fence": 1,
                "lease": 30.0,
                "wallet": "alice",
                "currency": "USD",
                "synchronous_commit": None,
            },
        ).fetchone()
        assert granted[1] == [locked_meanwhile]
        admin.execute("COMMIT")  # open the gate
        worker.join(10)
        assert not worker.is_alive()
        assert "error" not in result, result.get("error")
        return result["row"]
    finally:
        admin.execute("ROLLBACK") if admin.info.transaction_status else None
        admin.execute("DROP FUNCTION IF EXISTS public.random()")
        for conn in (admin, replica, other, observer):
            conn.close()


@pytest.mark.parametrize("statement", [FETCH, FRONT_FETCH], ids=["warm", "contested"])
def test_lock_committed_after_the_candidate_snapshot_is_reported_not_locked(db_url, statement):
    """Race 1: the candidate read names a token whose lock row commits after its snapshot.

    The replica's fetch is paused after its snapshot is taken; meanwhile another replica locks
    the token with the real TRY_LOCK statement and commits. The replica's anti-join (old
    snapshot) then passes the token as a candidate, and its insert finds the live lock.
    """
    token = make_token(quantity=10)
    row = gated_fetch(db_url, statement, token.pk)
    assert (row["granted_ids"], row["attempted"]) == (None, 1)  # chosen, then lost to the other
    lock = TokenLock.objects.get(pk=token.pk)
    assert (lock.spender_tx_id, lock.fence) == ("tx-other", 1)


def test_stale_cache_cannot_lock_a_token_whose_spend_is_in_flight_or_committed(db_url):
    """Race 2: a spend commits between a replica's read (its cache) and its lock insert."""
    token = make_token(quantity=10)
    store = PostgresTokenStore(lease=30)
    cached = [Candidate(token.pk, 10)]  # what the replica read before the spend
    spender = _connect(db_url)
    try:
        spender.execute("BEGIN")
        spender.execute("SELECT id FROM tokens_token WHERE id = %s FOR UPDATE", (token.pk,))
        spender.execute(
            "UPDATE tokens_token SET spent_by = 'tx-spend', spent_at = now() WHERE id = %s",
            (token.pk,),
        )
        # A spend that also removes the lock row: the insert must still refuse the token.
        spender.execute("DELETE FROM locks_tokenlock WHERE token_id = %s", (token.pk,))
        started = time.monotonic()
        in_flight = store.try_lock(claim("tx-stale", 5), cached)
        assert in_flight.granted == []
        assert time.monotonic() - started < 2  # skipped, not waited for
        spender.execute("COMMIT")
        assert store.try_lock(claim("tx-stale", 5), cached).granted == []
        assert not TokenLock.objects.filter(pk=token.pk).exists()
    finally:
        spender.close()


def test_expired_lease_of_a_spent_token_is_never_taken_over(db_url):
    token = make_token(quantity=10)
    make_lock(token, "tx-spend", ttl=-5)
    Token.objects.filter(pk=token.pk).update(
        spent_by="tx-spend", spent_at=timezone.now() - timedelta(seconds=1)
    )
    store = PostgresTokenStore(lease=30)
    assert store.try_lock(claim("tx-late", 8), [Candidate(token.pk, 10)]).granted == []
    assert store.fetch_and_lock(claim("tx-late", 8, 10), 4).granted == []
    assert TokenLock.objects.get(pk=token.pk).spender_tx_id == "tx-spend"


@pytest.mark.parametrize("contested", [False, True])
def test_concurrent_fetches_skip_each_others_rows_instead_of_waiting(db_url, contested):
    make_tokens(6, quantity=1)
    holder = _connect(db_url)
    try:
        holder.execute("BEGIN")
        held = [
            row[0]
            for row in holder.execute(
                "SELECT id FROM tokens_token ORDER BY id LIMIT 3 FOR UPDATE"
            ).fetchall()
        ]
        asked = Claim("tx", KEY, 6, 1, contested=contested, spare=not contested)
        result = PostgresTokenStore(lease=30).fetch_and_lock(asked, 10)
        assert {c.token_id for c in result.granted}.isdisjoint(held)
        assert len(result.granted) == 3 and result.conflicts == 3
    finally:
        holder.execute("ROLLBACK")
        holder.close()
