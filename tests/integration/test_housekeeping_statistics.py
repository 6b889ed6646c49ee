"""Housekeeping forgets statistics that say the lock table is too small to plan on.

How plans fare on them: ``test_plans.py``. Every test commits (VACUUM runs outside a
transaction).
"""

from __future__ import annotations

import logging

import psycopg
import pytest
from django.db import connection
from prometheus_client import REGISTRY

from bench.vacuum import vacuum_analyse
from locks import housekeeping
from locks.housekeeping import run_housekeeping
from locks.models import TokenLock
from tests.factories import make_tokens

pytestmark = pytest.mark.django_db(transaction=True)

# Live locks on the first n tokens, each of its own spender.
LOCK = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at,
                             wallet, currency, quantity)
SELECT id, 'tx-' || id, 1, now(), now() + interval '1 minute', wallet, currency, quantity
FROM tokens_token ORDER BY id LIMIT %s
"""


def statistics() -> tuple[int, float]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relpages, reltuples FROM pg_class WHERE oid = 'locks_tokenlock'::regclass"
        )
        return cursor.fetchone()


def cleared() -> float:
    return REGISTRY.get_sample_value("sherdlock_housekeeping_statistics_cleared_total")


def vacuumed_with(locked: int, kept: int) -> None:
    """Lock ``locked`` tokens, release all but ``kept``, then vacuum and analyse."""
    make_tokens(locked, wallet="alice", quantity=1)
    with connection.cursor() as cursor:
        cursor.execute(LOCK, [locked])
        cursor.execute(
            "DELETE FROM locks_tokenlock WHERE token_id NOT IN "
            "(SELECT token_id FROM locks_tokenlock ORDER BY token_id LIMIT %s)",
            [kept],
        )
        vacuum_analyse(cursor, "locks_tokenlock")


@pytest.fixture(params=["clear", "truncate"])
def mechanism(request, monkeypatch):
    """How the pass forgets: PostgreSQL 18's clearing, or the TRUNCATE older servers get."""
    if request.param == "clear" and not housekeeping.clears_statistics(connection):
        pytest.skip("pg_clear_relation_stats needs PostgreSQL 18")
    if request.param == "truncate":
        monkeypatch.setattr(housekeeping, "clears_statistics", lambda connection: False)
    return request.param


@pytest.mark.parametrize("kept", [0, 5], ids=["empty", "a-few-rows"])
def test_statistics_of_a_lock_table_a_quiet_spell_emptied_are_forgotten(kept, mechanism, caplog):
    caplog.set_level(logging.INFO, logger="locks.housekeeping")
    vacuumed_with(3000, kept)
    recorded = statistics()
    assert recorded[0] < 10 and recorded[1] == kept  # what the vacuum recorded
    before = cleared()

    run_housekeeping()

    assert TokenLock.objects.count() == kept
    if mechanism == "truncate" and kept:  # a TRUNCATE would remove live locks: left as it is
        assert statistics() == recorded and cleared() == before
        return
    assert statistics() == (0, -1)  # unknown, as after a TRUNCATE
    assert cleared() == before + 1
    assert "cleared the statistics of locks_tokenlock" in caplog.text
    run_housekeeping()  # unknown is not small: nothing more to clear
    assert cleared() == before + 1


def test_statistics_of_a_lock_table_in_use_are_kept(mechanism):
    vacuumed_with(3000, 3000)
    recorded = statistics()
    assert recorded[0] >= 10
    before = cleared()

    run_housekeeping()

    assert statistics() == recorded
    assert cleared() == before
    assert TokenLock.objects.count() == 3000


def test_a_lock_being_written_is_never_truncated(db_url, monkeypatch):
    # Another session inserts a lock and has not committed when the pass looks: the table is
    # empty to the pass, but the insert holds the table, so the pass's lock fails at once (had
    # it waited, it would wait for this test, which commits only after the pass returns).
    monkeypatch.setattr(housekeeping, "clears_statistics", lambda connection: False)
    vacuumed_with(3000, 0)
    before = cleared()
    with psycopg.connect(db_url) as writer:
        writer.execute(LOCK, [1])
        run_housekeeping()
        assert statistics() == (0, 0) and cleared() == before
        writer.commit()
    assert TokenLock.objects.count() == 1
