"""Skip-locked-statement: the selection is one autocommit statement, repeated until covered.

Each statement reads the first 16 unspent tokens of the wallet that carry no lock row, in id
order, ``FOR UPDATE SKIP LOCKED`` (rows another statement is locking or spending right now are
passed over, never waited for), keeps the prefix whose running sum covers what is still needed
and inserts its locks ``ON CONFLICT DO NOTHING``. A selection runs at most 6 such statements;
then it releases what it got and backs off like every strategy.

Its plan depends on the statistics of ``tokens_token``. Planned from statistics that show
nothing spent, the statement walks ``token_by_wallet`` (wallet, id), or the primary key on a
table of one wallet, and filters spent tokens out in the heap: it reads every spent token at the
wallet's front. From statistics that show spent tokens, it walks ``token_unspent_by_wallet``,
which holds unspent tokens only. The seed gives every wallet a spent history
(``bench.seeding.HISTORY_EVERY``), so every point plans it the second way from its start, as on
a table in use, not only once autovacuum has analysed the point's spends.
"""

from __future__ import annotations

from bench.strategies.base import Picked
from bench.strategies.baseline import Baseline, Short
from sherdlock import Candidate, WalletKey

BATCH = 16
STATEMENTS = 6

# The first statement of a selection draws its fence (COALESCE evaluates nextval only when no
# fence is passed in); the later ones reuse it.
STEP = """
WITH fence AS (
    SELECT coalesce(%(fence)s::bigint, nextval('locks_fence_seq')) AS value
),
candidates AS (
    SELECT t.id, t.quantity
    FROM tokens_token t
    WHERE t.wallet = %(wallet)s AND t.currency = %(currency)s AND t.spent_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM locks_tokenlock l WHERE l.token_id = t.id)
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
    INSERT INTO locks_tokenlock (token_id, spender_tx_id, fence, created_at, expires_at, wallet,
                                 currency, quantity)
    SELECT c.id, %(tx_id)s, f.value, now(), now() + %(lease)s * interval '1 second',
           %(wallet)s, %(currency)s, c.quantity
    FROM chosen c CROSS JOIN fence f
    ORDER BY c.id
    ON CONFLICT (wallet, token_id) DO NOTHING
    RETURNING token_id
)
SELECT (SELECT value FROM fence),
       (SELECT count(*) FROM chosen),
       array(SELECT c.id FROM chosen c JOIN granted g ON g.token_id = c.id ORDER BY c.id),
       array(SELECT c.quantity FROM chosen c JOIN granted g ON g.token_id = c.id ORDER BY c.id)
"""


class SkipLockedStatement(Baseline):
    """One replica selecting with repeated SKIP LOCKED statements."""

    name = "skip-locked-statement"

    def _round(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        held: list[Candidate] = []
        total, fence = 0, None
        try:
            for _ in range(STATEMENTS):
                fence, offered, ids, quantities = self.execute(
                    STEP,
                    {
                        "fence": fence,
                        "wallet": key.wallet,
                        "currency": key.currency,
                        "batch": BATCH,
                        "need": quantity - total,
                        "tx_id": tx_id,
                        "lease": self.knobs.lease,
                    },
                )[0]
                self.lock_attempts += int(offered)
                for token_id, token_quantity in zip(ids, quantities, strict=True):
                    held.append(Candidate(int(token_id), int(token_quantity)))
                    total += int(token_quantity)
                if total >= quantity:
                    return Picked(tx_id, key, int(fence), tuple(held))
                if not offered:
                    break  # nothing free in sight: repeating at once cannot help
            raise Short()
        except BaseException:
            if held:
                self.unlock(tx_id, fence)
            raise
