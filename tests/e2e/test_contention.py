"""Many replica processes select from the same wallets at once: never a double spend.

Each replica is a separate OS process with its own selector and cache, talking to the real
PostgreSQL test database. The default run is short; `-m slow` runs the long variants. Every
strategy at once, and selections with legs, are in ``tests/e2e/test_contention_strategies.py``.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from tests.factories import make_tokens
from tests.helpers.replicas import (
    SHORT_AND_LONG,
    assert_books_balance,
    assert_never_held_twice,
    outcomes,
    run_replicas,
)


@SHORT_AND_LONG
def test_hot_wallet(tmp_path, subprocess_env, replicas, selections):
    make_tokens(200, wallet="hot", quantity=10)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=["hot"],
        selections=selections,
        min_quantity=1,
        max_quantity=40,
    )
    counts = outcomes(records)
    assert len(records) == replicas * selections
    assert counts.get("insufficient_funds", 0) == 0, counts  # supply (2000) always sufficed
    assert counts.get("funds_locked", 0) == 0, counts
    # Never more than 8 x 40 held at once: "funds locked" was never even answered.
    assert sum(r.get("retries", 0) for r in records) == 0
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(2000))


@SHORT_AND_LONG
def test_many_wallets(tmp_path, subprocess_env, replicas, selections):
    wallets = [f"w{i}" for i in range(20)]
    for wallet in wallets:
        make_tokens(20, wallet=wallet, quantity=5)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=wallets,
        selections=selections,
        min_quantity=1,
        max_quantity=20,
    )
    counts = outcomes(records)
    assert counts.get("insufficient_funds", 0) == 0, counts
    assert counts.get("funds_locked", 0) == 0, counts
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(20 * 20 * 5))


@SHORT_AND_LONG
def test_hot_tokens(tmp_path, subprocess_env, replicas, selections):
    """Requests that a batch of small tokens cannot cover: short batches, then largest first.

    Most random batches hold no free token of 100, so the replicas keep falling back to the
    wallet's largest tokens, all at once, through the contested walk.
    """
    make_tokens(200, wallet="hot-tokens", quantity=1)
    make_tokens(8, wallet="hot-tokens", quantity=100)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        replicas,
        wallets=["hot-tokens"],
        selections=selections,
        min_quantity=80,
        max_quantity=150,
    )
    counts = outcomes(records)
    assert len(records) == replicas * selections
    assert counts.get("insufficient_funds", 0) == 0, counts  # the supply (1000) always sufficed
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(1000))


# A lease short enough that a selection held past it is taken over during the test, long
# enough that one held as the others are (milliseconds) is spent well within it.
SHORT_LEASE = 0.4
TAKEN_OVER = """
SELECT count(*) FROM locks_selection a
JOIN locks_selection b ON b.token_ids && a.token_ids AND b.id <> a.id
WHERE b.created_at >= a.expires_at AND b.created_at < a.released_at
"""


@pytest.mark.parametrize(
    "replicas,selections",
    [
        pytest.param(6, 10, id="short"),
        pytest.param(10, 60, id="long", marks=pytest.mark.slow),
    ],
)
def test_leases_that_run_out_are_taken_over_and_their_holders_refused(
    tmp_path, subprocess_env, replicas, selections
):
    """Some replicas hold a selection past a short lease: the others take its tokens over while
    it still holds on, and its spend is refused. No token is held twice all the same."""
    make_tokens(30, wallet="short-lease", quantity=10)
    env = dict(subprocess_env, SHERDLOCK_LEASE_SECONDS=str(SHORT_LEASE))
    records = run_replicas(
        tmp_path,
        env,
        replicas,
        wallets=["short-lease"],
        selections=selections,
        min_quantity=10,
        max_quantity=60,
        overstay_ratio=0.3,
        overstay=3 * SHORT_LEASE,
    )
    overstayed = [r for r in records if r.get("overstayed")]
    assert overstayed
    # Each overstayed selection that tried to spend was refused, and let go.
    assert {r["action"] for r in overstayed} <= {"lease_lost", "released"}
    assert any(r["action"] == "lease_lost" for r in overstayed)
    # Others took tokens over while their holders still held on (released them later).
    with connection.cursor() as cursor:
        cursor.execute(TAKEN_OVER)
        assert cursor.fetchone()[0] > 0, "no lease was taken over during the run"
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(300))


@pytest.mark.parametrize(
    "selections",
    [
        pytest.param(10, id="short"),
        pytest.param(60, id="long", marks=pytest.mark.slow),
    ],
)
def test_livelock_of_the_seed_resolves(tmp_path, subprocess_env, selections):
    """Two tokens of 3, two replicas each asking 4, over and over: backoff breaks the tie."""
    make_tokens(2, wallet="pair", quantity=3)
    records = run_replicas(
        tmp_path,
        subprocess_env,
        2,
        wallets=["pair"],
        selections=selections,
        min_quantity=4,
        max_quantity=4,
        hold=0.003,
        spend_ratio=0,
        # Enough rounds that every selection ends holding both tokens, not funds_locked.
        backoff_attempts=30,
        backoff_max=0.03,
    )
    counts = outcomes(records)
    assert counts == {"selected": 2 * selections}, counts
    for record in records:
        assert len(record["tokens"]) == 2  # one replica took both tokens each time
    assert_never_held_twice(records)
    assert_books_balance(records, Decimal(6))
