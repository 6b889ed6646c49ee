"""Spend, release, extend and read a recorded selection: one statement each.

Each statement finds the selection by (namespace, tx id) within the caller's wallets and takes
its row FOR UPDATE first, so operations on one selection happen one after the other and a
repeated request sees what the first one did (READ COMMITTED re-reads the row it waited for).
Then, as everywhere (see ``locks.sql.locking``), token rows before lock rows, lock rows in
token-id order. Every statement decides in SQL and returns a ``verdict`` the service maps to
an answer; when the verdict is not "ok" nothing was written.

A lock row's lease is tested only once its row is found by the selection's key (wallet,
spender, fence), never through the expiry index, whose cost the statistics misjudge
(``locks.sql.batches.FREE`` says why): a reader tests ``(l.expires_at > now()) IS TRUE``, which
no index answers; a spend or an extension tests it under the lock rows' locks (``LEASE``).

Composed with ``str.format`` at import, like ``locking``.
"""

from __future__ import annotations

from common.sql import ASYNC_COMMIT, SYNC_COMMIT
from locks.sql.legs import KEYS, NOT_CONSERVED
from locks.sql.waiting import wake

# The caller's selection, row-locked. A selection outside the key's wallets is not found. Its
# wallet comes from its transaction id's claim (tokens.TxClaim), so only that wallet's
# partition is read; every later step of a statement names ``(SELECT wallet FROM sel)`` too.
SELECTION = """
sel AS MATERIALIZED (
    SELECT s.id, s.tx_id, s.wallet, s.currency, s.quantity, s.total, s.fence, s.token_ids,
           s.output_ids, s.status, s.created_at, s.expires_at, s.spent_at, s.released_at,
           s.strategy, s.legs
    FROM locks_selection s{after}
    WHERE s.wallet = ({owner})
      AND s.namespace = %(namespace)s::text AND s.tx_id = %(tx_id)s::text
      AND (%(wallets)s::text[] IS NULL OR s.wallet = ANY(%(wallets)s::text[]))
    FOR UPDATE OF s
),"""

# The wallet of the selection of (namespace, tx id), from its claim.
OWNER = """SELECT c.wallet FROM tokens_txclaim c
                      WHERE c.namespace = %(namespace)s::text AND c.tx_id = %(tx_id)s::text"""

# Read a selection with its tokens and how many of its locks are live, for readers and for
# repeated requests. The selection's wallet is its claim's ({wallet}). A NULL namespace
# (operators, READ_ANY) looks in every namespace, oldest first, and in the wallets the claims
# of the tx id in every namespace name.
READ = """
WITH sel AS MATERIALIZED (
    SELECT s.id, s.tx_id, s.wallet, s.currency, s.quantity, s.total, s.fence, s.token_ids,
           s.output_ids, s.status, s.created_at, s.expires_at, s.spent_at, s.released_at,
           s.namespace, s.strategy, s.legs
    FROM locks_selection s
    WHERE {wallet}
      AND (%(namespace)s::text IS NULL OR s.namespace = %(namespace)s::text)
      AND s.tx_id = %(tx_id)s::text
      AND (%(wallets)s::text[] IS NULL OR s.wallet = ANY(%(wallets)s::text[]))
    ORDER BY s.id
    LIMIT 1
)
SELECT CASE WHEN x.id IS NOT NULL THEN 'ok' ELSE 'not_found' END AS verdict,
       {columns},
       x.namespace AS namespace, x.status AS status,
       x.expires_at AS expires_at, x.spent_at AS spent_at,
       x.released_at AS released_at, x.output_ids AS output_ids,
       (SELECT count(*) FROM locks_tokenlock l
        WHERE l.wallet = x.wallet
          AND l.spender_tx_id = %(tx_id)s::text AND l.fence = x.fence
          AND (l.expires_at > now()) IS TRUE) AS live_locks{row}
"""

# Columns every statement returns about the selection (NULLs when it was not found), then the
# tokens it holds or held as JSON [[id, tx_id, index, quantity, currency], ...] in id order
# (a selection with legs holds tokens of several currencies: see ``locks.sql.legs``).
SELECTION_COLUMNS = """x.id, x.wallet, x.currency, x.quantity, x.total, x.fence, x.created_at,
       x.strategy, x.legs::json AS legs,
       (SELECT json_agg(json_build_array(t.id, t.tx_id, t."index", t.quantity, t.currency)
                        ORDER BY t.id)
        FROM tokens_token t
        WHERE t.id = ANY(x.token_ids::bigint[]) AND t.wallet = x.wallet) AS tokens"""
# Where those columns come from: the selection's row, if any, read once (each column a scalar
# subquery of its own was one more InitPlan to set up at every execution).
SELECTION_ROW = "\nFROM (SELECT) AS one LEFT JOIN sel x ON true"

# The outputs of a spend as JSON [[id, index, wallet, currency, quantity], ...] in output order.
STORED_OUTPUTS = """(SELECT json_agg(json_build_array(t.id, t."index", t.wallet, t.currency,
                                   t.quantity) ORDER BY o.n)
        FROM unnest((SELECT output_ids FROM sel)) WITH ORDINALITY AS o(id, n)
        JOIN tokens_token t ON t.id = o.id)"""

# The selection's lock rows (tx id and fence), taken FOR UPDATE in token-id order (see
# ``locks.sql.locking``) before anything is judged. The statement's snapshot is as old as its
# start, and it may have waited since for the selection's row (another operation on it): its
# lease may have run out meanwhile, and another selection taken the tokens over and committed.
# Under the row lock READ COMMITTED re-reads a row changed since, so a row taken over (another
# tx id or fence) or deleted is not this selection's any more, and no one can take one over
# until this statement ends.
HELD = """
held AS MATERIALIZED (
    SELECT l.token_id, l.expires_at
    FROM locks_tokenlock l{inputs}
    WHERE l.wallet = (SELECT wallet FROM sel)
      AND l.spender_tx_id = %(tx_id)s::text AND l.fence = (SELECT fence FROM sel)
      AND (SELECT status FROM sel) = 'locked'
    ORDER BY l.token_id
    FOR UPDATE OF l
),"""
# When the lease is judged: by the clock, once every lock row is held (the subquery reads all
# of ``held`` first), not by now(), the statement's (or its transaction's) start. A lock row
# counts if its lease runs at that moment: ``live``.
LEASE = """
lease AS MATERIALIZED (
    SELECT h.locked, clock_timestamp() AS at FROM (SELECT count(*) AS locked FROM held) h
),
live AS MATERIALIZED (
    SELECT token_id FROM held WHERE (expires_at > (SELECT at FROM lease)) IS TRUE
),"""

# Mark the inputs spent and create the outputs, all or nothing, durably (a spend is never
# committed asynchronously). The token rows are taken FOR UPDATE and re-checked unspent, then
# every one must still be locked by this selection (tx id and fence) with its lease running,
# judged under the lock rows' locks (HELD, LEASE); the outputs must conserve its value: in its
# currency, summing to its total (per leg, for a selection with legs:
# ``locks.sql.legs.NOT_CONSERVED``). An output identity that exists already makes the INSERT,
# hence the whole statement, fail (output_conflict). The spent tokens' lock rows go with the
# spend: a lock row always means a live hold on an unspent token, so the lock table alone tells
# what is held. (Another replica's stale cache cannot lock a spent token: the locking statements
# re-check it under its row lock.) Stamped with the moment its lease was judged.
SPEND = """
WITH{commit}{selection}
inputs AS MATERIALIZED (
    SELECT t.id, t.quantity
    FROM tokens_token t
    WHERE t.id = ANY((SELECT token_ids FROM sel)::bigint[]) AND t.spent_at IS NULL
      AND t.wallet = (SELECT wallet FROM sel) AND (SELECT status FROM sel) = 'locked'
    ORDER BY t.id
    FOR UPDATE OF t
),
{held}
asked AS MATERIALIZED (
    SELECT o.n AS position, o.idx, o.wallet, o.currency, o.quantity
    FROM unnest(%(indexes)s::int[], %(output_wallets)s::text[], %(currencies)s::text[],
                %(quantities)s::numeric[]) WITH ORDINALITY AS o(idx, wallet, currency, quantity, n)
),
verdict AS MATERIALIZED (
    SELECT CASE
        WHEN NOT EXISTS (SELECT FROM sel) THEN 'not_found'
        WHEN (SELECT status FROM sel) = 'spent' THEN 'spent'
        WHEN (SELECT status FROM sel) = 'released' THEN 'released'
        WHEN {not_conserved} THEN 'not_conserved'
        WHEN (SELECT status FROM sel) <> 'locked'
             OR (SELECT count(*) FROM live) <> cardinality((SELECT token_ids FROM sel))
            THEN 'lease_lost'
        ELSE 'ok'
    END AS value
),
spent AS (
    UPDATE tokens_token t SET spent_by = %(tx_id)s::text, spent_at = (SELECT at FROM lease)
    FROM inputs i
    WHERE t.id = i.id AND t.wallet = (SELECT wallet FROM sel)
      AND (SELECT value FROM verdict) = 'ok'
    RETURNING t.id
),
created AS (
    INSERT INTO tokens_token (namespace, tx_id, "index", wallet, currency, quantity)
    SELECT %(namespace)s::text, %(tx_id)s::text, a.idx, a.wallet, a.currency, a.quantity
    FROM asked a
    WHERE (SELECT value FROM verdict) = 'ok'
    ORDER BY a.position
    RETURNING id, "index", wallet, currency, quantity
),
unlocked AS (
    DELETE FROM locks_tokenlock
    WHERE wallet = (SELECT wallet FROM sel) AND token_id = ANY(ARRAY(SELECT token_id FROM held))
      AND (SELECT value FROM verdict) = 'ok'
    RETURNING token_id
),
done AS (
    UPDATE locks_selection s
    SET status = 'spent', spent_at = (SELECT at FROM lease),
        output_ids = (SELECT array_agg(c.id ORDER BY a.position)
                      FROM created c JOIN asked a ON a.idx = c."index")
    WHERE s.id = (SELECT id FROM sel) AND s.wallet = (SELECT wallet FROM sel)
      AND (SELECT value FROM verdict) = 'ok'
    RETURNING s.spent_at
),{wake}
SELECT (SELECT value FROM verdict) AS verdict,
       {columns},
       coalesce((SELECT spent_at FROM done), x.spent_at) AS spent_at,
       (SELECT count(*) FROM spent) AS inputs_spent,
       (SELECT count(*) FROM unlocked) AS unlocked,
       (SELECT count(*) FROM woken) AS woken,
       CASE WHEN (SELECT value FROM verdict) = 'ok' THEN (
           SELECT json_agg(json_build_array(c.id, c."index", c.wallet, c.currency, c.quantity)
                           ORDER BY a.position)
           FROM created c JOIN asked a ON a.idx = c."index")
       ELSE {stored_outputs} END AS outputs{row}
""".format(
    # Its commit is durable even where synchronous_commit is configured off (common.sql).
    commit=SYNC_COMMIT,
    selection=SELECTION.format(after=", commit_mode", owner=OWNER),
    held=HELD.format(inputs="\n    JOIN inputs i ON i.id = l.token_id") + LEASE,
    columns=SELECTION_COLUMNS,
    row=SELECTION_ROW,
    stored_outputs=STORED_OUTPUTS,
    not_conserved=NOT_CONSERVED,
    # The outputs may free funds where requests wait: wake those queues' heads.
    wake=wake(keys="SELECT wallet, currency FROM asked", when="(SELECT value FROM verdict) = 'ok'"),
)

# Unlock the selection's tokens and record it released; repeating it changes nothing. Only
# this selection's rows (tx id and fence) are deleted, in token-id order. A lease operation:
# committed asynchronously like the grants. Stamped with the clock (before the commit that lets
# anyone else take the tokens), so that a release is always stamped before the next grant.
RELEASE = """
WITH{commit}{selection}
doomed AS (
    SELECT l.token_id FROM locks_tokenlock l
    WHERE l.wallet = (SELECT wallet FROM sel)
      AND l.spender_tx_id = %(tx_id)s::text AND l.fence = (SELECT fence FROM sel)
      AND (SELECT status FROM sel) IN ('locked', 'expired', 'lost')
    ORDER BY l.token_id
    FOR UPDATE OF l
),
freed AS (
    DELETE FROM locks_tokenlock
    WHERE wallet = (SELECT wallet FROM sel) AND token_id = ANY(ARRAY(SELECT token_id FROM doomed))
    RETURNING token_id
),
done AS (
    UPDATE locks_selection s SET status = 'released', released_at = clock_timestamp()
    WHERE s.id = (SELECT id FROM sel) AND s.wallet = (SELECT wallet FROM sel)
      AND s.status IN ('locked', 'expired', 'lost')
    RETURNING s.released_at
),{wake}
SELECT CASE WHEN x.id IS NULL THEN 'not_found'
            WHEN x.status = 'spent' THEN 'spent'
            ELSE 'ok' END AS verdict,
       {columns},
       coalesce((SELECT released_at FROM done), x.released_at) AS released_at,
       x.expires_at AS expires_at,
       (SELECT count(*) FROM freed) AS freed,
       (SELECT count(*) FROM woken) AS woken{row}
"""

# Renew every lock of the selection, all or none: each must still be held (tx id, fence, lease
# running), judged under the lock rows' locks (HELD, LEASE). Lock rows are taken in token-id
# order, like a takeover takes them, so a renewal racing a takeover cannot deadlock. Renewed
# from the moment the lease was judged, capped at the selection's maximum lifetime.
EXTEND = """
WITH{commit}{selection}{held}
renewed AS (
    UPDATE locks_tokenlock l
    SET expires_at = least(
        (SELECT at FROM lease) + %(seconds)s::float8 * interval '1 second',
        (SELECT created_at FROM sel) + %(max_lease)s::float8 * interval '1 second')
    WHERE l.wallet = (SELECT wallet FROM sel) AND l.token_id = ANY(ARRAY(SELECT token_id FROM live))
      AND (SELECT count(*) FROM live) = cardinality((SELECT token_ids FROM sel))
    RETURNING l.expires_at
),
done AS (
    UPDATE locks_selection s SET expires_at = (SELECT min(expires_at) FROM renewed)
    WHERE s.id = (SELECT id FROM sel) AND s.wallet = (SELECT wallet FROM sel)
      AND EXISTS (SELECT FROM renewed)
    RETURNING s.expires_at
)
SELECT CASE WHEN x.id IS NULL THEN 'not_found'
            WHEN x.status = 'spent' THEN 'spent'
            WHEN x.status = 'released' THEN 'released'
            WHEN NOT EXISTS (SELECT FROM done) THEN 'lease_lost'
            ELSE 'ok' END AS verdict,
       {columns},
       coalesce((SELECT expires_at FROM done), x.expires_at) AS expires_at,
       cardinality(x.token_ids) - (SELECT count(*) FROM live) AS missing{row}
"""


def _lease_statement(template: str, durable: bool) -> str:
    return template.format(
        commit="" if durable else ASYNC_COMMIT,
        selection=SELECTION.format(after="" if durable else ", commit_mode", owner=OWNER),
        held=HELD.format(inputs="") + LEASE,
        columns=SELECTION_COLUMNS,
        row=SELECTION_ROW,
        # Released funds may be what requests of its keys wait for: wake those queues' heads.
        wake=wake(keys=KEYS, when="EXISTS (SELECT FROM freed)"),
    )


ANY_OWNER = """s.wallet IN (SELECT c.wallet FROM tokens_txclaim c
                       WHERE (%(namespace)s::text IS NULL OR c.namespace = %(namespace)s::text)
                         AND c.tx_id = %(tx_id)s::text)"""
READ_ANY = READ.format(columns=SELECTION_COLUMNS, row=SELECTION_ROW, wallet=ANY_OWNER)
READ = READ.format(
    columns=SELECTION_COLUMNS, row=SELECTION_ROW, wallet="s.wallet = ({owner})".format(owner=OWNER)
)
RELEASE_STATEMENTS = {durable: _lease_statement(RELEASE, durable) for durable in (False, True)}
EXTEND_STATEMENTS = {durable: _lease_statement(EXTEND, durable) for durable in (False, True)}
