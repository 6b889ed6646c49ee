"""The hot-path SQL of the PostgreSQL token store, one named block per statement.

Every statement runs on its own (autocommit), so each is one short transaction, and each does a
selection's work in one round trip: the locking statements draw the selection's fence when it
has none, and the recording variants write the selection row in the statement that completes
it. Two rules keep them from deadlocking with each other, with spends and with releases:
- token row before lock row: the inserts take the token rows (FOR UPDATE) before touching lock
  rows, and a spend locks its token rows before it reads the lock rows;
- lock rows in token-id order: an insert that meets an existing lock row (an expired one it may
  take over, or one committed after its snapshot) waits for that row, and an unlock or release
  deletes several rows; both go through them in ascending token id.

Statements are composed from the fragments below with ``str.format`` only, once, at import
(see ``locks.sql``). Parameters are typed in the SQL, so one prepared statement serves every
call.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from clients.sql import ADMITTED, METERED, RESULT_METERED
from common.sql import ASYNC_COMMIT
from locks.sql import batches
from sherdlock.strategies import MAX_EXAMINED

# -- fragments ----------------------------------------------------------------------------

# The selection's fence: the claim's own, or a new one from the sequence (strictly increasing
# across every replica). MATERIALIZED makes nextval run exactly once.
FENCE = """
fence AS MATERIALIZED (
    SELECT coalesce(%(fence)s::bigint, nextval('locks_fence_seq')) AS value{after}
),"""
# A CTE nobody reads is never run: the commit mode is set by joining it into one that is.
AFTER_COMMIT_MODE = " FROM commit_mode"

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

# A token is free when no live lock row names it. Evaluated against the statement's snapshot: a
# lock committed after it is caught by ON CONFLICT in the insert. The lock row is looked up by
# its key (token, wallet), once per candidate; the wallet prunes the lock table to the claim's
# partition. The check is written so that this probe is the only plan it can get:
# - OFFSET 0 keeps it a per-row subplan (the planner does not turn a NOT EXISTS with an OFFSET
#   into an anti-join, whose plan would hang on the lock table's size as last analysed);
# - the lease test is an IS TRUE, which no index can answer. As an index condition, expires_at >
#   now() is costed from statistics that never see the live rows: expires_at only grows, so
#   between two analyses almost no row looks live, and the expiry index then looks cheaper than
#   the key. Each probe would read every live lock of every wallet, a cost that grows with the
#   table: a backlog of expired rows left by crashed spenders would slow every lock statement
#   within seconds (tests/integration/test_plans.py keeps the probe on the key).
FREE = """NOT EXISTS (
          SELECT FROM locks_tokenlock l
          WHERE l.token_id = t.id AND l.wallet = %(wallet)s::text
            AND (l.expires_at > now()) IS TRUE
          OFFSET 0)"""

UNSPENT_OF_KEY = """t.wallet = %(wallet)s::text AND t.currency = %(currency)s::text
      AND t.spent_at IS NULL"""

# Take the chosen token rows FOR UPDATE SKIP LOCKED, re-checking under the row lock that they
# are still unspent (READ COMMITTED re-reads a row a spend changed meanwhile), so a spend that
# committed first is seen and one in flight is skipped: a stale choice never locks a spent
# token. Rows another selection is locking right now are skipped, never waited for.
WANTED = """
wanted AS (
    SELECT t.id, t.quantity, t.tx_id, t."index"
    FROM tokens_token t
    WHERE t.id IN (SELECT id FROM chosen) AND {unspent_of_key}
    ORDER BY t.id
    FOR UPDATE OF t SKIP LOCKED
),"""

# Insert the locks in token-id order (see the module docstring). An existing lock is taken over
# only if its lease has run out; a live one is left alone and its token is not granted.
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
            created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
        WHERE l.expires_at <= now()
    RETURNING l.token_id, l.expires_at
),
won AS MATERIALIZED (
    SELECT g.token_id AS id, w.quantity, w.tx_id, w."index", g.expires_at
    FROM granted g JOIN wanted w ON w.id = g.token_id
),"""

# The selection row, written by the call that completes the selection (its earlier calls'
# tokens come in as held_*), so no lock outlives its owner's record: a process that dies after
# this statement leaves a selection its client can spend, release or retry. Stamped with the
# clock when it is written, after its locks were taken: now() is when the statement began,
# which may be before the previous holder let go (planning runs between the two).
# The transaction id's claim (tokens.TxClaim) is written first, by the same condition, and the
# row only if the claim was: a concurrent request of the same id, of this wallet or any other,
# that claimed it first (its claim waited for here, then found) leaves this one unrecorded.
RECORDED = """
claimed AS (
    INSERT INTO tokens_txclaim (namespace, tx_id, wallet)
    SELECT %(namespace)s::text, %(tx_id)s::text, %(wallet)s::text
    FROM won w
    HAVING %(held_total)s::numeric + coalesce(sum(w.quantity), 0) >= %(quantity)s::numeric
    ON CONFLICT (namespace, tx_id) DO NOTHING
    RETURNING tx_id
),
recorded AS (
    INSERT INTO locks_selection (namespace, tx_id, wallet, currency, quantity, total, fence,
                                 token_ids, output_ids, status, created_at, expires_at{named_col})
    SELECT %(namespace)s::text, %(tx_id)s::text, %(wallet)s::text, %(currency)s::text,
           %(quantity)s::numeric,
           %(held_total)s::numeric + coalesce(sum(w.quantity), 0), (SELECT value FROM fence),
           %(held_ids)s::bigint[] || coalesce(array_agg(w.id ORDER BY w.id), ARRAY[]::bigint[]),
           ARRAY[]::bigint[], 'locked', clock_timestamp(),
           least(min(w.expires_at), %(held_expiry)s::timestamptz){named_value}
    FROM won w
    HAVING %(held_total)s::numeric + coalesce(sum(w.quantity), 0) >= %(quantity)s::numeric
       AND EXISTS (SELECT FROM claimed)
    ON CONFLICT (namespace, tx_id, wallet) DO NOTHING
    RETURNING id, created_at, expires_at
),"""

# What the statement returns: one row. Granted tokens (with their identity, for responses),
# whether the gate was open and what was recorded; the fetch adds its own columns first.
RESULT = """
SELECT (SELECT value FROM fence) AS fence,
       g.ids AS granted_ids, g.quantities AS granted_quantities, g.expires_at,
       {fetched}{outcome}"""
# What the result row is read from: what was granted, in one pass (and a fetch's spare rows).
RESULT_FROM = """
FROM (SELECT array_agg(id ORDER BY id) AS ids, array_agg(quantity ORDER BY id) AS quantities,
             min(expires_at) AS expires_at
      FROM won) g{spare}"""
SPARE = """,
     (SELECT array_agg(id ORDER BY id) AS ids, array_agg(quantity ORDER BY id) AS quantities
      FROM candidates WHERE id NOT IN (SELECT id FROM {looked})) s"""
RESULT_PLAIN = "true AS open, NULL::bigint AS recorded_id, NULL AS recorded_at, NULL AS tokens"
RESULT_RECORDED = """{open} AS open,
       (SELECT id FROM recorded) AS recorded_id,
       (SELECT created_at FROM recorded) AS recorded_at,
       CASE WHEN EXISTS (SELECT FROM recorded) THEN (
           SELECT json_agg(json_build_array(x.id, x.tx_id, x."index", x.quantity) ORDER BY x.id)
           FROM (SELECT id, tx_id, "index", quantity FROM won
                 UNION ALL
                 SELECT id, tx_id, "index", quantity FROM tokens_token
                 WHERE id = ANY(%(held_ids)s::bigint[]) AND wallet = %(wallet)s::text) x)
       END AS tokens"""

# -- try-lock: the cached candidates ------------------------------------------------------

# Lock a batch of cached candidates in one round trip; grant only those still unspent, not
# live-locked and of the claim's wallet and currency (a cache can be stale, never wrong).
TRY_LOCK_CHOICE = """
chosen AS (
    SELECT t.id FROM tokens_token t
    WHERE t.id = ANY(%(token_ids)s::bigint[]) AND {unspent_of_key}
      AND {free}{gated}
),"""

# -- fetch-and-lock: a random batch of the wallet ----------------------------------------

# Read up to %(limit)s free tokens of one wallet/currency and lock a random prefix of them that
# covers %(need)s, in one round trip.
# - A random pivot in the wallet's id range, then a walk of the partial index from there (and a
#   wrap-around walk below it, evaluated only if the first did not fill the batch), gives every
#   replica a different starting point without sorting the whole wallet.
# - The batch is read without row locks: only the prefix that will be inserted is row-locked
#   (WANTED), so a fetch writes no more tuples than it locks.
# - If the batch cannot cover the need, nothing is locked. A batch that held every free token
#   of the wallet (fewer rows than the limit) means the free tokens are short: the wallet's
#   unspent total is returned so the caller can tell insufficient funds from funds held by
#   others (read only then: a CASE evaluates its subqueries lazily). Otherwise the batch is
#   short, not the wallet (`free` NULL, `short_batch`): the caller fetches the wallet's largest
#   free tokens next (a fetch in descending order), so it locks a few large tokens rather than
#   a batch of small ones and then another.
# - A fetch in quantity order reads at most MAX_EXAMINED of the largest free tokens to tell
#   whether they cover the need (locks.sql.batches, FREE_UP_TO_NEED); when they cannot and the
#   wallet has more, `free` is TOO_MANY and nothing else is read (no unspent total either).
FETCH_CHOICE = """
pivot AS MATERIALIZED (
    SELECT lo + floor(random() * (hi - lo + 1))::bigint AS p
    FROM (SELECT min(t.id) AS lo, max(t.id) AS hi FROM tokens_token t
          WHERE {unspent_of_key}) bounds
),
upper_part AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE {unspent_of_key} AND t.id >= (SELECT p FROM pivot) AND {free}
    ORDER BY t.id
    LIMIT %(limit)s::int
),
lower_part AS (
    SELECT t.id, t.quantity FROM tokens_token t
    WHERE {unspent_of_key} AND t.id < (SELECT p FROM pivot) AND {free}
    ORDER BY t.id
    LIMIT %(limit)s::int
),
candidates AS MATERIALIZED (
    SELECT id, quantity, random() AS rnd
    FROM ((SELECT id, quantity FROM upper_part) UNION ALL (SELECT id, quantity FROM lower_part)
          LIMIT %(limit)s::int) batch
),
seen AS MATERIALIZED (
    SELECT count(*) AS rows, coalesce(sum(quantity), 0) AS total FROM candidates
),
reach AS MATERIALIZED (
    SELECT CASE
        WHEN s.total >= %(need)s::numeric OR s.rows < %(limit)s::int THEN s.total
        ELSE {beyond_batch}
    END AS free
    FROM seen s
),
chosen AS MATERIALIZED (
    SELECT c.id
    FROM (SELECT id, quantity,
                 sum(quantity) OVER (ORDER BY rnd, id ROWS UNBOUNDED PRECEDING) AS running
          FROM candidates) c
    WHERE c.running - c.quantity < %(need)s::numeric
      AND (SELECT free FROM reach) >= %(need)s::numeric{gated}
),"""

FETCH_EXTRA = """(SELECT count(*) FROM chosen) AS attempted,
       (SELECT free FROM reach) IS NULL AS short_batch,
       (SELECT rows FROM seen) < %(limit)s::int AS exhausted,
       (SELECT free FROM reach) AS free,
       CASE WHEN (SELECT free FROM reach) >= 0
                 AND (SELECT free FROM reach) < %(need)s::numeric THEN (
           SELECT ARRAY[coalesce(sum(x.quantity), 0), count(*)]
           FROM (SELECT t.quantity FROM tokens_token t WHERE {unspent_of_key}
                 ORDER BY t.quantity DESC, t.id DESC
                 LIMIT {examined} + 1) x)
       END AS unspent,
       {spare_columns},
       """
SPARE_COLUMNS = "s.ids AS spare_ids, s.quantities AS spare_quantities"
# The unspent total a shortfall reports, as SUPPLY reads it: [sum, count] of the wallet's largest
# MAX_EXAMINED + 1 unspent tokens (a count past MAX_EXAMINED: Supply.complete is false).
# A fetch whose caller keeps no queue of the wallet (Claim.spare) reads no spare.
NO_SPARE_COLUMNS = "NULL::bigint[] AS spare_ids, NULL::numeric[] AS spare_quantities"


# -- strategies: fetches in quantity order, windows, the strategy on the selection row -------

# A fetch in quantity order (locks.sql.batches), then the random fetch's later parts as they are.
FETCH_ORDERED_CHOICE = batches.ORDERED_BATCH + FETCH_CHOICE[FETCH_CHOICE.index("\nseen AS") :]

# A contested wallet's fetch: its batch taken as of now, a covering run at a time
# (locks.sql.batches).
FRESH_CHOICES = {
    ordered: choice[: choice.index("\nchosen AS")] + batches.FRESH_CHOSEN
    for ordered, choice in ((False, FETCH_CHOICE), (True, FETCH_ORDERED_CHOICE))
}

# The window of a choosing strategy (exact, consolidate): locks.sql.batches, WINDOW.
CANDIDATES = batches.WINDOW.format(unspent_of_key=UNSPENT_OF_KEY, free=FREE)

# The selection row of a selection made by a strategy other than the default names it (the
# default's leaves the column to its default, 'random').
RECORDED_STRATEGY = {"named_col": ", strategy", "named_value": ", %(strategy)s::text"}
RECORDED_DEFAULT = {"named_col": "", "named_value": ""}


@dataclass(frozen=True)
class LockStatement:
    """Which variant of a locking statement: its source, and what else it does."""

    fetch: bool  # fetch-and-lock (a random batch of the wallet) or try-lock (given ids)
    record: bool  # gate on the tx id and write the selection row when complete
    durable: bool  # commit synchronously
    order: str = "random"  # fetch: random, or by quantity (ascending, descending)
    strategy: bool = False  # record: name the strategy on the selection row
    metered: bool = False  # take the request's rate-limit units, lock nothing if refused
    fresh: bool = False  # fetch: take tokens as of now, a covering run at a time (contested)
    spare: bool = True  # fetch: answer the rows it read and did not lock (off: fresh only)


# A locking statement: its CTEs in this order (a variant leaves out the ones it does without),
# the last one's comma dropped, then the result row.
LOCK = "WITH{ctes}\n{result}"
LOCK_CTES = "{commit_mode}{fence}{meter}{gate}{choice}{wanted}{granted}{recorded}"


def _choice(variant: LockStatement) -> str:
    if not variant.fetch:
        return TRY_LOCK_CHOICE
    ordered = variant.order != "random"
    if variant.fresh:
        return FRESH_CHOICES[ordered]
    return FETCH_ORDERED_CHOICE if ordered else FETCH_CHOICE


def _compose(variant: LockStatement) -> str:
    """Assemble one locking statement from the fragments."""
    gates = ([OPEN] if variant.record else []) + ([ADMITTED] if variant.metered else [])
    gated = "".join(f"\n      AND {gate}" for gate in gates)
    fill = {"unspent_of_key": UNSPENT_OF_KEY, "free": FREE, "gated": gated, "open": OPEN}
    ctes = LOCK_CTES.format(
        commit_mode="" if variant.durable else ASYNC_COMMIT,
        fence=FENCE.format(after="" if variant.durable else AFTER_COMMIT_MODE),
        meter=METERED if variant.metered else "",
        gate=GATE if variant.record else "",
        choice=_choice(variant).format(
            **fill,
            direction=batches.DIRECTIONS.get(variant.order, ""),
            beyond_batch=batches.SHORT_BATCH
            if variant.order == "random"
            else batches.FREE_UP_TO_NEED.format(**fill),
        ),
        wanted=(batches.FRESH_WANTED if variant.fresh else WANTED).format(**fill),
        granted=GRANTED,
        recorded=RECORDED.format(**(RECORDED_STRATEGY if variant.strategy else RECORDED_DEFAULT))
        if variant.record
        else "",
    )
    result = RESULT.format(
        fetched=FETCH_EXTRA.format(
            **fill,
            examined=MAX_EXAMINED,
            spare_columns=SPARE_COLUMNS if variant.spare else NO_SPARE_COLUMNS,
        )
        if variant.fetch
        else "",
        outcome=RESULT_RECORDED.format(**fill) if variant.record else RESULT_PLAIN,
    ) + (RESULT_METERED if variant.metered else "")
    spare = SPARE.format(looked="looked" if variant.fresh else "chosen")
    result += RESULT_FROM.format(spare=spare if variant.fetch and variant.spare else "")
    return LOCK.format(ctes=ctes.rstrip(","), result=result)


def _variants() -> Iterator[LockStatement]:
    for fetch in (False, True):
        for record in (False, True):
            for durable in (False, True):
                # Metered: the first statement of a rate-limited request (clients.throttling).
                for metered in (False, True):
                    # The strategies' variants: fetches in quantity order, rows naming them.
                    for order in ("random", "ascending", "descending") if fetch else ("random",):
                        for strategy in (False, True) if record else (False,):
                            variant = LockStatement(
                                fetch, record, durable, order, strategy, metered
                            )
                            yield variant
                            if fetch:
                                # A contested wallet's fetch, and the same without the spare
                                # rows its replica would not keep.
                                contested = replace(variant, fresh=True)
                                yield contested
                                yield replace(contested, spare=False)


LOCK_STATEMENTS: dict[LockStatement, str] = {v: _compose(v) for v in _variants()}

# Remove this selection's lock rows (all, or the given tokens). The fence keeps a stale holder
# from deleting locks that were re-granted to a newer selection under the same tx id. The rows
# are row-locked in token-id order first (see the module docstring): a plain DELETE would take
# them in physical order and could deadlock with an insert waiting on one of them. Given the
# selection's wallet (the selector always knows it), only its partition is read.
UNLOCK = """
WITH{commit}
doomed AS (
    SELECT token_id FROM locks_tokenlock{after}
    WHERE spender_tx_id = %(tx_id)s::text AND fence = %(fence)s::bigint{only}{of_wallet}
    ORDER BY token_id
    FOR UPDATE OF locks_tokenlock
)
DELETE FROM locks_tokenlock WHERE token_id IN (SELECT token_id FROM doomed){of_wallet}
"""
ONLY = "\n      AND token_id = ANY(%(token_ids)s::bigint[])"
OF_WALLET = " AND wallet = %(wallet)s::text"
UNLOCK_STATEMENTS: dict[tuple[bool, bool, bool], str] = {
    (some, durable, by_wallet): UNLOCK.format(
        commit="" if durable else ASYNC_COMMIT,
        after="" if durable else ", commit_mode",
        only=ONLY if some else "",
        of_wallet=OF_WALLET if by_wallet else "",
    )
    for some in (False, True)
    for durable in (False, True)
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
