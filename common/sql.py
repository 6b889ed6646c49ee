"""Statements and fragments several apps share.

Every app keeps its SQL as named, commented module-level constants in one place:
``locks/sql/<topic>.py``, ``tokens/sql.py``, ``clients/sql.py``, ``config/sql.py`` and this
module. Statements are composed from named fragments with ``str.format`` (named placeholders),
once, at import; a fragment a variant does without is filled with "". Parameters are psycopg's
(``%(name)s`` or ``%s``), never formatted in.
"""

# Make this statement's commit asynchronous: it returns before its WAL reaches the disk. Used for
# what a crash may forget without harm: lease grants and releases (their holders then see
# lease_lost, exactly as if the lease had run out) and rate-limit counters; never for spends,
# which are durable. set_config(..., true) lasts until the end of the transaction, i.e. the
# statement's. A CTE nobody reads is never run: a statement joins ``commit_mode`` into one it
# reads.
ASYNC_COMMIT = """
commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"""

# The synchronous_commit a write of money needs: at least "on", so that its commit waits for its
# WAL on disk and, where synchronous standbys are named (synchronous_standby_names), on a standby
# (docs/failover.md). A server, database or role configured "off" or "local" would otherwise let
# a spend or an issue be answered and then lost to a crash or a failover; a stronger setting
# (remote_apply) is kept.
DURABLE_SETTING = """CASE WHEN current_setting('synchronous_commit') IN ('off', 'local')
    THEN 'on' ELSE current_setting('synchronous_commit') END"""

# ASYNC_COMMIT's opposite, for spends: the statement's commit is durable (DURABLE_SETTING),
# whatever the session's configuration says. Joined the same way (``commit_mode``).
SYNC_COMMIT = """
commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', {setting}, true)),""".format(
    setting=DURABLE_SETTING
)

# The same for the rest of a transaction (an issue), as a statement of its own.
DURABLE_COMMIT = "SELECT set_config('synchronous_commit', {setting}, true)".format(
    setting=DURABLE_SETTING
)

# The planner's row estimate of a table (kept fresh by autovacuum): what an unfiltered admin list
# shows instead of counting a large table row by row. -1 when the table was never analysed.
TABLE_ESTIMATE = "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass"
