"""A vacuum that removes what was just released, whatever else runs on the database.

The quiet spell (``bench.quiet_spell``) and the tests of what a vacuumed lock table is planned
on need the vacuum to record the rows they released as gone.
"""

from __future__ import annotations

import time

# Other backends of this database in a transaction. One that began before the caller released
# its rows keeps them, and the pages that hold them, from a vacuum: autovacuum analysing a
# table the caller has just filled is one.
OTHERS_IN_A_TRANSACTION = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
"""


def vacuum_analyse(cursor, table: str, timeout: float = 30.0) -> None:
    """``VACUUM (ANALYZE) table`` once no other backend of the database is in a transaction.

    This backend's counts of changed rows reach the statistics first (at its next idle
    moment, not up to a second later): counted after the analysis, they would send autovacuum
    to analyse the table again.
    """
    cursor.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + timeout
    while True:
        cursor.execute(OTHERS_IN_A_TRANSACTION)
        if not cursor.fetchone()[0]:
            break
        assert time.monotonic() < deadline, "another backend stayed in a transaction"
        time.sleep(0.05)
    cursor.execute(f"VACUUM (ANALYZE) {table}")
