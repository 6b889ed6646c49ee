"""SQL fragments several apps' statements share."""

# Make this statement's commit asynchronous: it returns before its WAL reaches the disk. Used for
# what a crash may forget without harm: lease grants and releases (their holders then see
# lease_lost, exactly as if the lease had run out) and rate-limit counters; never for spends,
# which are durable. set_config(..., true) lasts until the end of the transaction, i.e. the
# statement's. A CTE nobody reads is never run: a statement joins ``commit_mode`` into one it
# reads.
ASYNC_COMMIT = """
commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)),"""
