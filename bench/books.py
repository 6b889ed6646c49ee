"""The audit of a point's books: lock rows left behind, supply per wallet, who spent what.

Read after every point from the benchmark database (``bench.database``), of ours' tables or of
the reference's (``reference``), which have the columns read here under the same names.
"""

from __future__ import annotations

from bench.database import EXPIRED_PREFIX, db_cursor

# Lock rows left on unspent tokens once every replica has spent or released what it held
# (rows planted by the housekeeping points, of spenders named EXPIRED_PREFIX..., excepted).
LEAKED_LOCKS = """
SELECT count(*) FROM {locks} l JOIN {tokens} t ON t.id = l.token_id
WHERE t.spent_at IS NULL AND l.spender_tx_id NOT LIKE %(planted)s
"""


def _books(reference: bool) -> tuple[str, str]:
    """Return the (tokens, locks) tables of ours, or of the reference."""
    return (
        ("reference_token", "reference_lock") if reference else ("tokens_token", "locks_tokenlock")
    )


def leaked_locks(reference: bool = False) -> int:
    """Count lock rows that hold unspent tokens (of the reference's tables if ``reference``)."""
    tokens, locks = _books(reference)
    with db_cursor() as cursor:
        cursor.execute(
            LEAKED_LOCKS.format(tokens=tokens, locks=locks), {"planted": EXPIRED_PREFIX + "%"}
        )
        return int(cursor.fetchone()[0])


def unspent_by_wallet(reference: bool = False) -> dict[str, int]:
    """Return the unspent quantity per wallet (of the reference's tables if ``reference``)."""
    tokens, _ = _books(reference)
    with db_cursor() as cursor:
        cursor.execute(
            f"SELECT wallet, sum(quantity) FROM {tokens} WHERE spent_at IS NULL GROUP BY wallet"
        )
        return {wallet: int(total) for wallet, total in cursor.fetchall()}


def spent_tokens(
    by_identity: bool = False, prefix: str = "", reference: bool = False
) -> dict[object, str]:
    """Map every spent token (id, or "tx_id:index") to the transaction that spent it.

    With ``prefix``, only tokens spent by transactions whose tx id starts with it; with
    ``reference``, the reference's tokens.
    """
    key = "tx_id || ':' || \"index\"" if by_identity else "id"
    tokens, _ = _books(reference)
    with db_cursor() as cursor:
        cursor.execute(
            f"SELECT {key}, spent_by FROM {tokens} WHERE spent_by IS NOT NULL AND spent_by LIKE %s",
            [prefix + "%"],
        )
        return dict(cursor.fetchall())
