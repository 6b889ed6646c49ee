"""Reference: the strongest simple design, one hand-written statement per step, on its own tables.

What an engineer who knows PostgreSQL would write by hand with the same guarantees as ours,
on minimal tables of its own (``reference_token``, ``reference_lock``, ``reference_selection``,
sequence ``reference_fence_seq``) in the benchmark's database, seeded with the same tokens:

- a selection draws its fence once from the sequence; each statement of it reads the wallet's
  first k unspent tokens that carry no live lock row (k = 16, twice as many at each later
  step), in id order, ``FOR UPDATE SKIP LOCKED``, keeps the prefix whose running sum covers
  what is still needed and inserts its lock rows (lease expiry, fence), taking over a row
  whose lease has ended (``ON CONFLICT ... DO UPDATE ... WHERE expires_at <= now()``). The
  statement that covers the request also writes the selection's record (the tx id is its
  primary key). A selection runs statements while each one makes progress; a short one gives
  back what it took and backs off like every baseline (``bench.strategies.baseline``);
- a spend is one statement: every lock row must still be this tx id's, under this fence and
  live; it marks the tokens spent, creates the outputs and marks the selection spent, all or
  nothing;
- a release is one statement: it deletes this fence's lock rows and marks the selection
  released.

Its statements run prepared, as ours do (``common.db``), and grants and releases commit
asynchronously unless leases are durable, as ours do (``common.sql.ASYNC_COMMIT``): a crash
that forgets them costs their holders the lease, never a spend, which always commits durably.
It has no namespaces, rate limits, strategies, queues or caches: none of its statements pay
for them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from bench.strategies.base import Picked, Spent, spend_params, spent_outputs
from bench.strategies.baseline import Baseline, Short
from common.knobs import knobs
from common.sql import ASYNC_COMMIT
from sherdlock import Candidate, WalletKey

# Tokens a selection's first step reads. Every token read is row-locked (FOR UPDATE), and a
# row lock is a write, so a step reads about what a request of the usual kind takes, not a
# whole batch it then cuts; each later step of the same selection reads twice as many, so a
# request of many small tokens still needs only a few steps.
FIRST_BATCH = 16

# The tables (``bench.database.REFERENCE_TABLES`` empties and fills them between points).
TOKENS = "reference_token"
LOCKS = "reference_lock"
SELECTIONS = "reference_selection"

# The tables, as small as the guarantees allow. Tokens: one partial index, the wallet's unspent
# tokens in id order (the order a step reads them in), covering the quantity. Lock rows: one
# per token (the primary key is what ON CONFLICT takes over); no index on the lease, which is
# only ever tested on a row found by token. Lock rows of spent tokens stay: a step never reads
# them (it starts from unspent tokens), and deleting them would cost every spend a write.
# Outputs need no unique key of their own: they are named by the tx id of a selection, which
# its primary key makes unique, and only one spend can close a selection.
#
# The planner is told that the tokens belong to many wallets (WALLETS_PLANNED_FOR), as in
# production, whatever ANALYZE finds. A step reads its wallet's unspent tokens in id order and
# locks them as it goes, so it reads the heap, and two paths give that order: the wallet's
# unspent tokens (reference_token_unspent) and the primary key, filtered. On a table of one
# wallet (the contested workloads) ANALYZE finds a single wallet; with few spent tokens or none
# in its sample, a generic plan costs the two paths alike, and the primary key wins or loses by
# a hair, depending on when the statistics were taken. Walking the primary key reads every
# spent token of the wallet as well, and they pile up at its low end, where a step starts.
WALLETS_PLANNED_FOR = 1000
SCHEMA = f"""
CREATE SEQUENCE IF NOT EXISTS reference_fence_seq;
CREATE TABLE IF NOT EXISTS {TOKENS} (
    id bigserial PRIMARY KEY,
    tx_id text NOT NULL,
    "index" integer NOT NULL,
    wallet text NOT NULL,
    currency text NOT NULL,
    quantity numeric(20, 0) NOT NULL CHECK (quantity >= 0),
    spent_by text,
    spent_at timestamptz
);
CREATE INDEX IF NOT EXISTS reference_token_unspent
    ON {TOKENS} (wallet, currency, id) INCLUDE (quantity) WHERE spent_at IS NULL;
ALTER TABLE {TOKENS} ALTER COLUMN wallet SET (n_distinct = {WALLETS_PLANNED_FOR});
CREATE TABLE IF NOT EXISTS {LOCKS} (
    token_id bigint PRIMARY KEY,
    spender_tx_id text NOT NULL,
    fence bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {SELECTIONS} (
    tx_id text PRIMARY KEY,
    fence bigint NOT NULL,
    wallet text NOT NULL,
    currency text NOT NULL,
    quantity numeric(20, 0) NOT NULL,
    state text NOT NULL DEFAULT 'selected' CHECK (state IN ('selected', 'spent', 'released')),
    created_at timestamptz NOT NULL DEFAULT now()
)
"""

# The seeded tokens (the snapshot ``bench.seeding.seed`` keeps) with the same ids as ours.
RESTORE = f"""
INSERT INTO {TOKENS} (id, tx_id, "index", wallet, currency, quantity, spent_by, spent_at)
SELECT id, tx_id, "index", wallet, currency, quantity, spent_by, spent_at
FROM bench_snapshot ORDER BY id
"""
RESTORE_IDS = (
    f"SELECT setval(pg_get_serial_sequence('{TOKENS}', 'id'), (SELECT max(id) FROM {TOKENS}))"
)

# One step of a selection. The first draws the fence (COALESCE evaluates nextval only when no
# fence is passed in); the later ones pass it in. A token can meet a lock row the step's
# snapshot did not show (granted by a statement that committed since): ON CONFLICT then sees
# it, and takes it over only if its lease has ended, so such a token is simply not granted.
# The covering step writes the selection's record; a tx id used before fails the statement,
# which then grants nothing. The lock row of each candidate is probed by its key (OFFSET 0 keeps
# the NOT EXISTS a per-row probe): planned as an anti-join on the lock table's statistics when a
# run starts, it hashed the whole lock table at every step, a cost that grew with every lock row
# and made the reference's throughput depend on when its plan was made.
STEP = """
WITH {commit}fence AS (
    SELECT coalesce(%(fence)s::bigint, nextval('reference_fence_seq')) AS value{after}
),
candidates AS (
    SELECT t.id, t.quantity
    FROM reference_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND NOT EXISTS (
          SELECT FROM reference_lock l WHERE l.token_id = t.id AND l.expires_at > now() OFFSET 0
      )
    ORDER BY t.id
    LIMIT %(batch)s
    FOR UPDATE OF t SKIP LOCKED
),
chosen AS (
    SELECT id, quantity FROM (
        SELECT id, quantity,
               sum(quantity) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS running
        FROM candidates
    ) ranked
    WHERE running - quantity < %(need)s
),
granted AS (
    INSERT INTO reference_lock AS l (token_id, spender_tx_id, fence, expires_at)
    SELECT c.id, %(tx_id)s, f.value, now() + %(lease)s * interval '1 second'
    FROM chosen c CROSS JOIN fence f
    ORDER BY c.id
    ON CONFLICT (token_id) DO UPDATE
        SET spender_tx_id = excluded.spender_tx_id, fence = excluded.fence,
            expires_at = excluded.expires_at
        WHERE l.expires_at <= now()
    RETURNING l.token_id
),
got AS (
    SELECT c.id, c.quantity FROM chosen c JOIN granted g ON g.token_id = c.id
),
recorded AS (
    INSERT INTO reference_selection (tx_id, fence, wallet, currency, quantity)
    SELECT %(tx_id)s, f.value, %(wallet)s, %(currency)s, %(quantity)s
    FROM fence f
    WHERE (SELECT coalesce(sum(quantity), 0) FROM got) >= %(need)s
    RETURNING tx_id
)
SELECT (SELECT value FROM fence),
       (SELECT count(*) FROM candidates),
       (SELECT count(*) FROM chosen),
       array(SELECT id FROM got ORDER BY id),
       array(SELECT quantity FROM got ORDER BY id),
       (SELECT count(*) FROM recorded)
"""

# Spend a selection. The tokens are row-locked in id order first: no step can grant or take
# over one of them until this commits (a step locks the token row before it writes its lock
# row), and a step that did so since this statement's snapshot has committed by the time the
# lock is granted. The lock rows are then read FOR UPDATE, which checks each against its latest
# version, not the snapshot's: a lease taken over meanwhile fails the check. All counts must
# match for anything to be written.
SPEND = """
WITH held AS (
    SELECT id FROM reference_token
    WHERE id = ANY(%(ids)s) AND spent_at IS NULL
    ORDER BY id
    FOR UPDATE
),
live AS (
    SELECT token_id FROM reference_lock
    WHERE (SELECT count(*) FROM held) = %(count)s
      AND token_id = ANY(%(ids)s) AND spender_tx_id = %(tx_id)s AND fence = %(fence)s
      AND expires_at > now()
    ORDER BY token_id
    FOR UPDATE
),
closed AS (
    UPDATE reference_selection SET state = 'spent'
    WHERE tx_id = %(tx_id)s AND fence = %(fence)s AND state = 'selected'
      AND (SELECT count(*) FROM live) = %(count)s
    RETURNING tx_id
),
spent AS (
    UPDATE reference_token t SET spent_by = %(tx_id)s, spent_at = now()
    FROM held
    WHERE t.id = held.id AND EXISTS (SELECT FROM closed)
    RETURNING t.id
),
outputs AS (
    INSERT INTO reference_token (tx_id, "index", wallet, currency, quantity)
    SELECT %(tx_id)s, o.n - 1, o.wallet, %(currency)s, o.quantity
    FROM unnest(%(wallets)s::text[], %(quantities)s::numeric[])
         WITH ORDINALITY AS o(wallet, quantity, n)
    WHERE EXISTS (SELECT FROM closed)
    RETURNING id, wallet, quantity
)
SELECT (SELECT count(*) FROM spent),
       array(SELECT id FROM outputs ORDER BY id),
       array(SELECT wallet FROM outputs ORDER BY id),
       array(SELECT quantity FROM outputs ORDER BY id)
"""

# Release a selection, or what a short one took: its fence's lock rows (a row taken over since
# carries another fence and stays) and its record, if it has one. The rows are deleted in
# token-id order (the index scan of the sorted array), the order steps insert them in.
RELEASE = """
WITH {commit}freed AS (
    DELETE FROM reference_lock
    WHERE token_id = ANY(%(ids)s) AND fence = %(fence)s
    RETURNING token_id
),
closed AS (
    UPDATE reference_selection SET state = 'released'
    WHERE tx_id = %(tx_id)s AND fence = %(fence)s AND state = 'selected'
    RETURNING tx_id
)
SELECT (SELECT count(*) FROM freed), (SELECT count(*) FROM closed){after}
"""

# The wallet's unspent value, and the part under live leases of other transactions: read only
# when a selection comes up short, to tell insufficient funds from funds locked.
SUPPLY = """
SELECT coalesce(sum(t.quantity), 0),
       coalesce(sum(t.quantity) FILTER (
           WHERE l.expires_at > now() AND l.spender_tx_id <> %(tx_id)s), 0)
FROM reference_token t
LEFT JOIN reference_lock l ON l.token_id = t.id
WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
"""


def _leases(template: str, durable: bool, after: str) -> str:
    """Return ``template`` committing synchronously if ``durable``, else asynchronously."""
    return template.format(
        commit="" if durable else ASYNC_COMMIT + "\n", after="" if durable else after
    )


STEPS = {durable: _leases(STEP, durable, " FROM commit_mode") for durable in (False, True)}
RELEASES = {durable: _leases(RELEASE, durable, " FROM commit_mode") for durable in (False, True)}


def install() -> None:
    """Create the reference's tables and sequence in the current database, if missing."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(SCHEMA)


class Reference(Baseline):
    """One replica selecting with the reference's statements on the reference's tables."""

    name = "reference"

    def __init__(self, rng: random.Random | None = None) -> None:
        super().__init__(rng)
        durable = knobs().durable_leases
        self.step, self.free = STEPS[durable], RELEASES[durable]

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        held: list[Candidate] = []
        total, fence, batch = 0, None, FIRST_BATCH
        try:
            while True:
                fence, seen, offered, ids, quantities, recorded = self.execute(
                    self.step,
                    {
                        "fence": fence,
                        "wallet": key.wallet,
                        "currency": key.currency,
                        "batch": batch,
                        "need": quantity - total,
                        "tx_id": tx_id,
                        "lease": self.knobs.lease,
                        "quantity": quantity,
                    },
                )[0]
                self.lock_attempts += int(offered)
                for token_id, token_quantity in zip(ids, quantities, strict=True):
                    held.append(Candidate(int(token_id), int(token_quantity)))
                    total += int(token_quantity)
                if recorded:
                    return Picked(tx_id, key, int(fence), tuple(held))
                # Short: every free token in sight was tried (a batch not full, all of it
                # needed), or this step lost every token it tried to concurrent ones.
                if (seen < batch and offered == seen) or not ids:
                    raise Short()
                batch *= 2
        except BaseException:
            if held:
                self._free(tx_id, fence, [c.token_id for c in held])
            raise

    def supply(self, tx_id: str, key: WalletKey) -> tuple[int, int]:
        """Return (unspent, under others' live leases) of ``key``."""
        rows = self.execute(
            SUPPLY, {"tx_id": tx_id, "wallet": key.wallet, "currency": key.currency}
        )
        return int(rows[0][0]), int(rows[0][1])

    def _free(self, tx_id: str, fence: int | None, ids: list[int]) -> None:
        self.execute(self.free, {"tx_id": tx_id, "fence": fence, "ids": ids})

    def release(self, picked: Picked) -> None:
        """Delete the lock rows of ``picked`` and mark its selection released."""
        self._free(picked.tx_id, picked.fence, picked.token_ids)

    def spend(self, picked: Picked, outputs: Sequence[tuple[str, int]]) -> Spent | None:
        """Spend ``picked`` into ``outputs`` (wallet, quantity); None if its lease was lost."""
        row = self.execute(SPEND, spend_params(picked, outputs))[0]
        return spent_outputs(picked, *row)
