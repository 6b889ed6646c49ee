"""The benchmark's seed: each wallet's spent history, and the plans it gives a point's start."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from bench import seeding
from bench.strategies.skiplocked import STEP
from tests.helpers.plans import explain_prepared
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_wallet_is_seeded_with_spent_tokens_below_its_unspent_ones():
    rows = (("a", 5),) * 25 + (("b", 3),) * 4
    supply = seeding.seed(rows, "USD")
    try:
        assert supply == {"a": 125, "b": 12}  # the history is spent: no part of the supply
        for wallet, unspent, spent in (("a", 25, 2), ("b", 4, 1)):
            tokens = Token.objects.filter(wallet=wallet).order_by("id")
            states = [token.spent_by for token in tokens]
            assert states == [seeding.HISTORY_TX] * spent + [None] * unspent
            assert seeding.history_size(unspent) == spent
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")


@pytest.mark.parametrize("wallets, per_wallet", [(1, 1000), (100, 50)])
def test_a_skip_locked_step_reads_the_unspent_index_from_a_points_start(wallets, per_wallet):
    # A point starts from the seed's statistics (bench.database.reset). They show each wallet's
    # spent history, so the step walks the wallet's unspent tokens, not every token of it.
    rows = tuple((f"w{w}", 1 + n % 20) for w in range(wallets) for n in range(per_wallet))
    seeding.seed(rows, "USD")
    try:
        call = {"fence": None, "wallet": "w0", "currency": "USD", "batch": 16, "need": 5}
        call |= {"tx_id": "tx-1", "lease": 60}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            scans = [
                node.get("Index Name", node["Node Type"])
                for node in explain_prepared(STEP, call)
                if node.get("Relation Name") == "tokens_token"
            ]
        assert scans == ["token_unspent_by_wallet"]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_snapshot")
