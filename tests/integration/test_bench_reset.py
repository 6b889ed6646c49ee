"""The benchmark's reset between points: each point starts from the seeded tokens alone."""

from __future__ import annotations

import pytest
from django.db import connection

from bench import database
from locks.models import TokenLock, Waiter
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_point_inherits_no_lock_and_no_queue():
    database.seed((("w", 5), ("w", 7)), "USD")
    try:
        token = Token.objects.order_by("id").first()
        assert token is not None
        Token.objects.filter(id=token.id).update(quantity=1)  # a change the reset must undo
        Waiter.objects.create(wallet="w", currency="USD", expires_at=token.created_at)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at,"
                " expires_at, wallet, currency, quantity)"
                " VALUES (%s, 'tx', 1, now(), now() + interval '1 minute', 'w', 'USD', 5)",
                [token.id],
            )

        database.reset()

        assert sorted(Token.objects.values_list("quantity", flat=True)) == [5, 7]
        assert not TokenLock.objects.exists()
        assert not Waiter.objects.exists()  # a left-over waiter would head the queue
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")


def test_a_second_run_on_the_same_database_refuses_to_start(db_url):
    """Two runs on one database would truncate each other's tables mid-point."""
    import psycopg

    with (
        database.exclusive(db_url),
        pytest.raises(database.RunInProgress, match="another benchmark run"),
        database.exclusive(db_url),
    ):
        pass
    # Free again once the first run ended, and held against others while this one runs.
    with database.exclusive(db_url), psycopg.connect(db_url, autocommit=True) as other:
        held = other.execute("SELECT pg_try_advisory_lock(%s, %s)", database.RUN_LOCK).fetchone()
        assert held == (False,)
