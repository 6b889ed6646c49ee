"""A quiet spell after a burst, played after a point's reset (``--quiet-spell``)."""

from __future__ import annotations

from bench.database import checkpoint, db_cursor
from bench.vacuum import vacuum_analyse

# Locks of a burst of selections that has ended.
QUIET_SPELL = """
INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                             currency, quantity)
SELECT id, 'quiet-' || id, 1, now(), now() + interval '1 minute', wallet, currency, quantity
FROM tokens_token WHERE spent_at IS NULL ORDER BY id LIMIT %s
"""


def quiet_spell(rows: int) -> None:
    """Lock ``rows`` unspent tokens, release them all, vacuum the lock table, then housekeep.

    What a service in use goes through in a quiet spell after a burst: every lock released or
    spent, then the autovacuum of the dead rows, which records an empty table, then (the spell
    outlasting the beat's interval) a housekeeping pass. The next point's statements are
    planned on what those leave, as the next burst's are.
    """
    from locks.housekeeping import run_housekeeping

    with db_cursor() as cursor:
        cursor.execute(QUIET_SPELL, [rows])
        cursor.execute("DELETE FROM locks_tokenlock")
        vacuum_analyse(cursor, "locks_tokenlock")
    run_housekeeping()
    checkpoint()
