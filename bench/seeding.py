"""What a run loads before its points: a workload's tokens, or a large one generated in the server.

``seed`` loads a workload's tokens with each wallet's spent history and keeps them as the
snapshot that ``bench.database.reset`` restores before every point. ``seed_generated`` generates
the large workload of the housekeeping points in the server, too large to copy, with no snapshot.
"""

from __future__ import annotations

import contextlib
from collections import Counter

from bench.database import (
    TABLES,
    Quiet,
    checkpoint,
    db_cursor,
    empty_reference,
    forget_changes,
    reset,
)

# Every wallet is seeded with spent tokens at the low end of its ids, one for every
# HISTORY_EVERY unspent ones (at least one), spent by HISTORY_TX: a table in use holds spent
# tokens, its wallets' oldest. Planned from statistics of a table with nothing spent, the
# skip-locked-statement baseline walks token_by_wallet (the primary key if there is one
# wallet) through every spent token at a wallet's front until autovacuum analyses spends
# mid-point: its rate, and the targets that name it, would depend on when autovacuum comes by.
# A few in every wallet suffice for the planner to see them; a tenth keeps the seed small.
HISTORY_EVERY = 10
HISTORY_TX = "bench-history"


# Tokens of a large workload generated in the server: wallet w holds tokens w*n .. w*n+n-1 of
# 1-20 (quantities from a seeded random sequence, so every run seeds the same supply).
SEED_GENERATED = """
INSERT INTO tokens_token (tx_id, "index", wallet, currency, quantity)
SELECT 'bench-seed', g, %(prefix)s || (g / %(per_wallet)s), %(currency)s,
       1 + floor(random() * 20)::int
FROM generate_series(0, %(wallets)s * %(per_wallet)s - 1) AS g
ORDER BY g
"""


def seed(rows: tuple[tuple[str, int], ...], currency: str) -> dict[str, int]:
    """Replace every token by ``rows``, remember them as the snapshot ``reset`` restores.

    Each wallet's spent history (HISTORY_EVERY) comes first, so it has the lowest ids. Return the
    unspent quantity per wallet.
    """
    from django.utils import timezone

    per_wallet = Counter(wallet for wallet, _ in rows)
    history = [wallet for wallet, count in per_wallet.items() for _ in range(history_size(count))]
    spent_at = timezone.now()
    with Quiet(), db_cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        copy_sql = (
            'COPY tokens_token (tx_id, "index", wallet, currency, quantity, spent_by, spent_at) '
            "FROM STDIN"
        )
        with cursor.cursor.copy(copy_sql) as copy:
            for index, wallet in enumerate(history):
                copy.write_row((HISTORY_TX, index, wallet, currency, 1, HISTORY_TX, spent_at))
            for index, (wallet, quantity) in enumerate(rows):
                copy.write_row(("bench-seed", index, wallet, currency, quantity, None, None))
        cursor.execute("DROP TABLE IF EXISTS bench_snapshot")
        cursor.execute("CREATE TABLE bench_snapshot AS SELECT * FROM tokens_token")
    reset()
    from bench.books import unspent_by_wallet  # the audit's, which reads through bench.database

    return unspent_by_wallet()


def history_size(unspent: int) -> int:
    """Return how many spent tokens are seeded before a wallet's ``unspent`` ones."""
    return max(1, unspent // HISTORY_EVERY)


# Secondary indexes of a table: those that back no constraint (primary key, unique, foreign
# keys stay, and so does every check).
SECONDARY_INDEXES = """
SELECT indexname, indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = %(table)s
  AND indexname NOT IN (SELECT conname FROM pg_constraint
                        WHERE conrelid = (current_schema() || '.' || %(table)s)::regclass)
ORDER BY indexname
"""


@contextlib.contextmanager
def bulk_load(*tables: str):
    """Load rows into ``tables`` fast, in one transaction: no triggers, indexes built once.

    The secondary indexes are dropped and created again after the load (a sort instead of a
    million index insertions), and triggers (change notifications, foreign-key checks: the
    rows are consistent by construction) are off where the role may turn them off. It all
    commits or rolls back together, so an interrupted load never leaves a table without its
    indexes.
    """
    from django.db import DatabaseError, transaction

    with transaction.atomic(), db_cursor() as cursor:
        try:
            with transaction.atomic():
                cursor.execute("SET LOCAL session_replication_role = replica")
        except DatabaseError:
            pass  # not a superuser: triggers run, the load is only slower
        definitions = []
        for table in tables:
            cursor.execute(SECONDARY_INDEXES, {"table": table})
            definitions += cursor.fetchall()
        for name, _ in definitions:
            cursor.execute(f'DROP INDEX "{name}"')
        yield cursor
        for _, definition in definitions:
            cursor.execute(definition)


def seed_generated(
    prefix: str, wallets: int, per_wallet: int, currency: str, seed: int
) -> dict[str, int]:
    """Replace every token by ``wallets`` x ``per_wallet`` generated ones; no snapshot is kept.

    Return the unspent quantity per wallet.
    """
    with db_cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        cursor.execute("DROP TABLE IF EXISTS bench_snapshot")
    forget_changes()  # at once, as a reset does: the load takes about a minute
    empty_reference()
    with bulk_load("tokens_token") as cursor:
        cursor.execute("SELECT setseed(%s)", [((seed * 7919) % 1000) / 1000])
        cursor.execute(
            SEED_GENERATED,
            {"prefix": prefix, "wallets": wallets, "per_wallet": per_wallet, "currency": currency},
        )
    with db_cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tokens_token")
    forget_changes()
    checkpoint()
    from bench.books import unspent_by_wallet  # the audit's, which reads through bench.database

    return unspent_by_wallet()
