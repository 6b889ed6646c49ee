"""The hot-path SQL of the PostgreSQL token store: lock, unlock, read supply.

Every statement runs on its own (autocommit), so each is one short transaction, and each does a
selection's work in one round trip: the locking statements draw the selection's fence when it
has none, and the recording variants write the selection row in the statement that completes
it. Two rules keep them from deadlocking with each other, with spends and with releases:
- token row before lock row: the inserts take the token rows (FOR UPDATE) before touching lock
  rows, and a spend locks its token rows before it reads the lock rows;
- lock rows in token-id order: an insert that meets an existing lock row (an expired one it may
  take over, or one committed after its snapshot) waits for that row, and an unlock or release
  deletes several rows; both go through them in ascending token id.

A locking statement reads top to bottom as the CTEs ``LockStatement.fragments`` lists: its
commit mode and fence, the rate limits it takes (metered), the tx id's gate (recording), which
tokens it tries (``locks.sql.batches``: given ids, or a fetch's batch and its covering prefix),
the token rows it row-locks (``wanted``), the lock rows it inserts (``granted``), the selection
row it writes (recording), then one result row. What a call varies within a statement is a
parameter (the commit mode, the strategy named on the row, whether the fetch answers its spare
rows); what changes the plan is a variant. Parameters are typed in the SQL, so one prepared
statement serves every call.
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.sql import ADMITTED, METERED, RESULT_METERED
from locks.sql import batches
from locks.sql.batches import UNSPENT_OF_KEY
from locks.sql.turns import TURN_KEY
from sherdlock.strategies import MAX_EXAMINED

# -- the start of every statement: commit mode and fence -------------------------------------

# The statement's commit: %(synchronous_commit)s 'off' makes it return before its WAL reaches
# the disk, for lease grants and releases that a crash may forget without harm (their holders
# then see lease_lost, as if the lease had run out; see common.sql.ASYNC_COMMIT); NULL leaves
# the session's mode alone (durable leases, or a caller's transaction that may hold a spend).
# set_config(..., true) lasts until the end of the transaction. A CTE nobody reads is never run:
# the fence reads it.
COMMIT_MODE = """
commit_mode AS MATERIALIZED (
    SELECT set_config('synchronous_commit',
                      coalesce(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
                      true) AS mode
),"""

# The selection's fence: the claim's own, or a new one from the sequence (strictly increasing
# across every replica). MATERIALIZED makes nextval run exactly once.
FENCE = """
fence AS MATERIALIZED (
    SELECT coalesce(%(fence)s::bigint, nextval('locks_fence_seq')) AS value FROM commit_mode
),"""

# Recording statements lock nothing for a transaction id that is already in use in the
# client's namespace: one that has a selection or names tokens (a spend's outputs are tokens
# named by its tx id), see docs/api.md's transaction-id rules. Both claim the id
# (tokens.TxClaim): one primary-key probe of the claim table answers, whichever wallet's
# partition the selection or tokens live in.
GATE = """
gate AS MATERIALIZED (
    SELECT NOT EXISTS (SELECT FROM tokens_txclaim c
                       WHERE c.namespace = %(namespace)s::text AND c.tx_id = %(tx_id)s::text)
       AS open
),"""
OPEN = "(SELECT open FROM gate)"

# A newcomer to a contested key yields to the key's turn (sherdlock.turns): with
# %(yield_to_turn)s a contested fetch locks nothing while another session holds or asks for the
# turn, and says so (turn_taken). A shared try on the turn's advisory lock answers: PostgreSQL
# refuses it while the lock is held or a session waits for it, and grants it at once otherwise.
# Taken for the transaction, it ends with the statement: the store yields only in a statement
# of its own, never in a caller's transaction.
TURN = """
turn AS MATERIALIZED (
    SELECT CASE WHEN %(yield_to_turn)s::boolean
                THEN pg_try_advisory_xact_lock_shared(
                         {turn_key})
                ELSE true
           END AS free
),""".format(turn_key=TURN_KEY)
TURN_FREE = "(SELECT free FROM turn)"

# -- locking what was chosen: wanted, granted ---------------------------------------------------

# Take the chosen token rows FOR UPDATE SKIP LOCKED, re-checking under the row lock that they
# are still unspent (READ COMMITTED re-reads a row a spend changed meanwhile), so a spend that
# committed first is seen and one in flight is skipped: a stale choice never locks a spent
# token. Rows another selection is locking right now are skipped, never waited for.
# MATERIALIZED keeps this read a step of its own, whoever reads it, so it is planned alike in
# every variant (not folded into the insert where only the insert reads it).
# Rows a statement found once are found again by key: `= ANY(ARRAY(SELECT ...))` makes the ids
# a condition of the primary key's scan, which any plan keeps. Written `IN (SELECT ...)`, a join,
# a plan made on statistics of a near-empty table reads the primary key (id, wallet) by wallet
# alone, every entry of the table, and costs more with every row (here and in UNLOCK, and in
# the lifecycle statements' deletes and renewals).
WANTED = """
wanted AS MATERIALIZED (
    SELECT t.id, t.quantity, t.tx_id, t."index"
    FROM tokens_token t
    WHERE t.id = ANY(ARRAY(SELECT id FROM chosen)) AND {unspent_of_key}
    ORDER BY t.id
    FOR UPDATE OF t SKIP LOCKED
),""".format(unspent_of_key=UNSPENT_OF_KEY)

# Insert the locks in token-id order (see the module docstring). An existing lock is taken over
# only if its lease has run out; a live one is left alone and its token is not granted. What was
# granted is read from the rows written: a lock row carries its token's quantity (set again on a
# takeover, so it is the token's as read under the row lock).
GRANTED = """
granted AS (
    INSERT INTO locks_tokenlock AS l (token_id, spender_tx_id, fence, created_at, expires_at,
                                      wallet, currency, quantity)
    SELECT w.id, %(tx_id)s::text, (SELECT value FROM fence), now(),
           now() + %(lease)s::float8 * interval '1 second',
           %(wallet)s::text, %(currency)s::text, w.quantity
    FROM wanted w
    ORDER BY w.id
    ON CONFLICT (wallet, token_id) DO UPDATE
        SET spender_tx_id = EXCLUDED.spender_tx_id, fence = EXCLUDED.fence,
            created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
            quantity = EXCLUDED.quantity
        WHERE l.expires_at <= now()
    RETURNING l.token_id AS id, l.quantity, l.expires_at
),"""

# -- recording: the tx id's claim and the selection row --------------------------------------

# The selection row, written by the call that completes the selection (its earlier calls'
# tokens come in as held_*), so no lock outlives its owner's record: a process that dies after
# this statement leaves a selection its client can spend, release or retry. Stamped with the
# clock when it is written, after its locks were taken: now() is when the statement began,
# which may be before the previous holder let go (planning runs between the two). It names the
# selection's strategy (%(strategy)s, 'random' by default).
# The transaction id's claim (tokens.TxClaim) is written first, by the same condition, and the
# row only if the claim was: a concurrent request of the same id, of this wallet or any other,
# that claimed it first (its claim waited for here, then found) leaves this one unrecorded.
RECORDED = """
claimed AS (
    INSERT INTO tokens_txclaim (namespace, tx_id, wallet)
    SELECT %(namespace)s::text, %(tx_id)s::text, %(wallet)s::text
    FROM granted w
    HAVING %(held_total)s::numeric + coalesce(sum(w.quantity), 0) >= %(quantity)s::numeric
    ON CONFLICT (namespace, tx_id) DO NOTHING
    RETURNING tx_id
),
recorded AS (
    INSERT INTO locks_selection (namespace, tx_id, wallet, currency, quantity, total, fence,
                                 token_ids, output_ids, status, created_at, expires_at, strategy)
    SELECT %(namespace)s::text, %(tx_id)s::text, %(wallet)s::text, %(currency)s::text,
           %(quantity)s::numeric,
           %(held_total)s::numeric + coalesce(sum(w.quantity), 0), (SELECT value FROM fence),
           %(held_ids)s::bigint[] || coalesce(array_agg(w.id ORDER BY w.id), ARRAY[]::bigint[]),
           ARRAY[]::bigint[], 'locked', clock_timestamp(),
           least(min(w.expires_at), %(held_expiry)s::timestamptz), %(strategy)s::text
    FROM granted w
    HAVING %(held_total)s::numeric + coalesce(sum(w.quantity), 0) >= %(quantity)s::numeric
       AND EXISTS (SELECT FROM claimed)
    ON CONFLICT (namespace, tx_id, wallet) DO NOTHING
    RETURNING id, created_at, expires_at
),"""

# -- the result row ---------------------------------------------------------------------------

# One row: the fence and what was granted, then what a fetch adds, then what a recording
# statement adds (or its defaults), then the rate limits' verdict (metered). A fetch's columns
# read its batch's `reach` once, joined in the FROM list.
RESULT = """
SELECT (SELECT value FROM fence) AS fence,
       g.ids AS granted_ids, g.quantities AS granted_quantities, g.expires_at"""
# What a fetch adds: what it tried, what its batch says of the wallet (short batch, exhausted,
# free, its rows and their total), the shortfall's unspent total, then its spare rows (none
# for a cold key's fetch, whose caller keeps none).
# The unspent total a shortfall reports, as SUPPLY reads it: [sum, count] of the wallet's largest
# MAX_EXAMINED + 1 unspent tokens (a count past MAX_EXAMINED: Supply.complete is false), read
# only when the free tokens are short (a CASE evaluates its subqueries lazily).
FETCHED = """,
       k.attempted,
       r.free IS NULL AS short_batch,
       r.rows < %(limit)s::int AS exhausted,
       r.free,
       r.rows AS batch_rows,
       r.total AS batch_total,
       CASE WHEN r.free >= 0 AND r.free < %(need)s::numeric THEN (
           SELECT ARRAY[coalesce(sum(x.quantity), 0), count(*)]
           FROM (SELECT t.quantity FROM tokens_token t WHERE {unspent_of_key}
                 ORDER BY t.quantity DESC, t.id DESC
                 LIMIT {examined} + 1) x)
       END AS unspent""".format(unspent_of_key=UNSPENT_OF_KEY, examined=MAX_EXAMINED)
SPARE = """,
       s.ids AS spare_ids, s.quantities AS spare_quantities"""
NO_SPARE = """,
       NULL::bigint[] AS spare_ids, NULL::numeric[] AS spare_quantities"""
# Whether a contested fetch yielded to the key's turn (TURN); other fetches never do.
TURN_TAKEN = f""",
       NOT {TURN_FREE} AS turn_taken"""
TURN_NOT_ASKED = """,
       false AS turn_taken"""
NOT_RECORDED = """,
       true AS open, NULL::bigint AS recorded_id, NULL AS recorded_at, NULL AS tokens"""
RECORDED_RESULT = """,
       {open} AS open,
       (SELECT id FROM recorded) AS recorded_id,
       (SELECT created_at FROM recorded) AS recorded_at,
       CASE WHEN EXISTS (SELECT FROM recorded) THEN (
           SELECT json_agg(json_build_array(x.id, x.tx_id, x."index", x.quantity) ORDER BY x.id)
           FROM (SELECT w.id, w.tx_id, w."index", w.quantity
                 FROM granted g JOIN wanted w ON w.id = g.id
                 UNION ALL
                 SELECT id, tx_id, "index", quantity FROM tokens_token
                 WHERE id = ANY(%(held_ids)s::bigint[]) AND wallet = %(wallet)s::text) x)
       END AS tokens""".format(open=OPEN)
# What the row is read from: what was granted, in one pass, and for a fetch its `reach`, how
# many tokens it tried (`k`, counted once: its covering prefix) and, but for a cold key's fetch,
# the rest of its batch in the batch's order, when its caller keeps it (%(spare)s,
# sherdlock.types.Claim.spare).
FROM_GRANTED = """
FROM (SELECT array_agg(id ORDER BY id) AS ids, array_agg(quantity ORDER BY id) AS quantities,
             min(expires_at) AS expires_at
      FROM granted) g"""
FROM_FETCH = """,
     reach r,
     (SELECT count(*) AS attempted FROM chosen) k"""
FROM_SPARE = """,
     LATERAL (
         SELECT (array_agg(id ORDER BY rnd, id) FILTER (WHERE %(spare)s::boolean))
                    [k.attempted + 1:] AS ids,
                (array_agg(quantity ORDER BY rnd, id) FILTER (WHERE %(spare)s::boolean))
                    [k.attempted + 1:] AS quantities
         FROM candidates) s"""

# -- the variants -----------------------------------------------------------------------------

# Each choice's kinds of statement, (front, contested): a try-lock is neither; a random fetch is
# a warm key's (from a pivot), a cold key's or a contested key's (both from the front); a fetch
# in quantity order is plain or contested.
KINDS = {
    "given": ((False, False),),
    "random": ((False, False), (True, False), (True, True)),
    "ascending": ((False, False), (False, True)),
    "descending": ((False, False), (False, True)),
}


@dataclass(frozen=True)
class LockStatement:
    """Which locking statement: the tokens it tries, how it takes them, what else it does."""

    choice: str  # given (try-lock of named ids), or a fetch: random, ascending, descending
    # random fetch of a cold or a contested key: from the wallet's first free token (a cold
    # key's answers no spare rows, its caller keeps none)
    front: bool = False
    contested: bool = False  # fetch of a contested key: a newcomer may yield to its turn
    record: bool = False  # gate on the tx id and write the selection row when complete
    metered: bool = False  # take the request's rate-limit units, lock nothing if refused

    def __post_init__(self) -> None:
        kinds = KINDS.get(self.choice)
        if kinds is None:
            raise ValueError(f"unknown choice {self.choice!r}")
        if (self.front, self.contested) not in kinds:
            raise ValueError(
                f"a {self.choice} statement has no kind front={self.front}, "
                f"contested={self.contested} (KINDS)"
            )

    @property
    def fetch(self) -> bool:
        return self.choice != "given"

    @property
    def spare(self) -> bool:
        """Whether it answers the rest of its batch when asked: every fetch but a cold key's."""
        return self.fetch and not (self.front and not self.contested)

    def __str__(self) -> str:
        flags = ("front", "contested", "record", "metered")
        return "-".join([self.choice, *(flag for flag in flags if getattr(self, flag))])

    def fragments(self) -> list[str]:
        """Return the statement's CTEs, in order, each ending in a comma."""
        gates = ([OPEN] if self.record else []) + ([ADMITTED] if self.metered else [])
        gates += [TURN_FREE] if self.contested else []
        gated = "".join(f"\n      AND {gate}" for gate in gates)
        ctes = [COMMIT_MODE, FENCE]
        ctes += [METERED] if self.metered else []
        ctes += [GATE] if self.record else []
        ctes += [TURN] if self.contested else []
        if self.choice == "given":
            ctes += [batches.GIVEN.format(gated=gated)]
        elif self.choice == "random":
            batch = batches.FRONT_BATCH if self.front else batches.RANDOM_BATCH
            ctes += [batch, batches.RANDOM_REACH]
        else:
            ctes += [batches.ORDERED_BATCH[self.choice], batches.ORDERED_REACH]
        if self.fetch:
            ctes += [batches.PREFIX.format(gated=gated)]
        ctes += [WANTED, GRANTED]
        ctes += [RECORDED] if self.record else []
        return ctes

    def result(self) -> str:
        """Return the statement's result row and what it is read from."""
        columns, source = RESULT, FROM_GRANTED
        if self.fetch:
            columns += FETCHED + (SPARE if self.spare else NO_SPARE)
            columns += TURN_TAKEN if self.contested else TURN_NOT_ASKED
            source += FROM_FETCH
            source += FROM_SPARE if self.spare else ""
        columns += RECORDED_RESULT if self.record else NOT_RECORDED
        columns += RESULT_METERED if self.metered else ""
        return columns + source

    def sql(self) -> str:
        """Return the statement: its CTEs, the last one's comma dropped, then its result row."""
        return "WITH" + "".join(self.fragments()).rstrip(",") + "\n" + self.result()


VARIANTS = tuple(
    LockStatement(choice, front, contested, record, metered)
    for choice, kinds in KINDS.items()
    for front, contested in kinds
    for record in (False, True)
    for metered in (False, True)
)
LOCK_STATEMENTS: dict[LockStatement, str] = {variant: variant.sql() for variant in VARIANTS}

# The window of a choosing strategy (exact, consolidate): batches.WINDOW.
CANDIDATES = batches.WINDOW

# Remove this selection's lock rows: all of them, or those of %(token_ids)s when not NULL. The
# fence keeps a stale holder from deleting locks that were re-granted to a newer selection under
# the same tx id. The rows are row-locked in token-id order first (see the module docstring): a
# plain DELETE would take them in physical order and could deadlock with an insert waiting on
# one of them. Given the selection's wallet (the selector always knows it), only its partition
# is read. Its commit is a lease grant's (COMMIT_MODE).
UNLOCK = """
WITH{commit_mode}
doomed AS (
    SELECT token_id FROM locks_tokenlock, commit_mode
    WHERE spender_tx_id = %(tx_id)s::text AND fence = %(fence)s::bigint
      AND (%(token_ids)s::bigint[] IS NULL OR token_id = ANY(%(token_ids)s::bigint[])){of_wallet}
    ORDER BY token_id
    FOR UPDATE OF locks_tokenlock
)
DELETE FROM locks_tokenlock WHERE token_id = ANY(ARRAY(SELECT token_id FROM doomed)){of_wallet}
"""
OF_WALLET = "\n      AND wallet = %(wallet)s::text"
# By whether the wallet is given.
UNLOCK_STATEMENTS: dict[bool, str] = {
    by_wallet: UNLOCK.format(commit_mode=COMMIT_MODE, of_wallet=OF_WALLET if by_wallet else "")
    for by_wallet in (False, True)
}

# Authoritative totals for one wallet/currency: all unspent value, and the part held by live
# locks of other spenders. Read only when a selection comes up short without a fetch saying why.
# Like a fetch, it reads no more than MAX_EXAMINED + 1 tokens, the largest (and probes the lock
# of each): a wallet with more counts those only (`complete` false), which still tells whether
# others hold what a selection could take, or covering it would take too many tokens.
SUPPLY = """
SELECT coalesce(sum(x.quantity), 0) AS unspent,
       coalesce(sum(x.quantity) FILTER (WHERE x.held), 0) AS locked,
       count(*) <= {examined} AS complete
FROM (SELECT t.quantity,
             EXISTS (SELECT FROM locks_tokenlock l
                     WHERE l.token_id = t.id AND l.wallet = %(wallet)s::text
                       AND (l.expires_at > now()) IS TRUE
                       AND l.spender_tx_id <> %(tx_id)s::text
                     OFFSET 0) AS held
      FROM tokens_token t
      WHERE {unspent_of_key}
      ORDER BY t.quantity DESC, t.id DESC
      LIMIT {examined} + 1) x
""".format(examined=MAX_EXAMINED, unspent_of_key=UNSPENT_OF_KEY)
