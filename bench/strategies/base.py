"""What every strategy offers the replica loop, and the spend they all share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from common import db
from locks.sql import waiting as waiting_sql
from sherdlock import Candidate, WalletKey

# Spend a selection in one statement: row-lock its tokens, check that every one is unspent and
# still locked by this selection (tx id and fence, unexpired), mark them spent and create the
# outputs (wallet, quantity) as new tokens. All or nothing: if one check fails, nothing is
# written and the statement reports 0 spent. Strategies differ in how they select; spending is
# the same for all, so it does not tilt the comparison. The lock rows stay, as the seed design
# has it: the baselines rely on them to see spent tokens as taken. (The service's spend removes
# them; its lock statements re-check a token's spent mark under the token's row lock instead.)
# Like the service's spend, it wakes requests waiting for the wallets it pays into (the chain
# waits so); with nobody waiting that is one probe of an empty index. The lease is tested where
# no index can answer it (``IS TRUE``), so the lock rows are probed by token, as the service's
# statements do (``locks.sql.batches.FREE`` says why).
SPEND = """
WITH held AS (
    SELECT t.id
    FROM tokens_token t JOIN locks_tokenlock l ON l.token_id = t.id
    WHERE t.id = ANY(%(ids)s::bigint[]) AND t.spent_at IS NULL
      AND l.spender_tx_id = %(tx_id)s::text AND l.fence = %(fence)s::bigint
      AND (l.expires_at > now()) IS TRUE
    ORDER BY t.id
    FOR UPDATE OF t
),
spent AS (
    UPDATE tokens_token t SET spent_by = %(tx_id)s::text, spent_at = now()
    FROM held
    WHERE t.id = held.id AND (SELECT count(*) FROM held) = %(count)s::bigint
    RETURNING t.id
),
outputs AS (
    INSERT INTO tokens_token (tx_id, "index", wallet, currency, quantity)
    SELECT %(tx_id)s::text, o.n - 1, o.wallet, %(currency)s::text, o.quantity
    FROM unnest(%(wallets)s::text[], %(quantities)s::numeric[])
         WITH ORDINALITY AS o(wallet, quantity, n)
    WHERE (SELECT count(*) FROM spent) = %(count)s::bigint
    RETURNING id, wallet, quantity
),{wake}
SELECT (SELECT count(*) FROM spent), o.ids, o.wallets, o.quantities, (SELECT count(*) FROM woken)
FROM (
    SELECT array_agg(id) AS ids, array_agg(wallet) AS wallets, array_agg(quantity) AS quantities
    FROM outputs
) o
""".format(
    wake=waiting_sql.wake(keys="SELECT wallet, %(currency)s::text FROM outputs", when="true")
)


@dataclass(frozen=True)
class Picked:
    """Tokens a strategy locked for one transaction under one fence."""

    tx_id: str
    key: WalletKey
    fence: int
    tokens: tuple[Candidate, ...]
    handle: object = None  # the strategy's own record of the selection, if it keeps one

    @property
    def token_ids(self) -> list[int]:
        """Return the ids of the locked tokens."""
        return [c.token_id for c in self.tokens]

    @property
    def total(self) -> int:
        """Return the sum of the locked tokens."""
        return sum(c.quantity for c in self.tokens)


class Strategy(Protocol):
    """A way to select and lock tokens, as one replica process runs it."""

    name: str
    # Token rows offered to a lock statement so far (None when not measurable).
    lock_attempts: int | None

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        """Lock tokens worth at least ``quantity``; raise InsufficientFunds or FundsLocked."""
        ...

    def release(self, picked: Picked) -> None:
        """Unlock what ``picked`` holds."""
        ...

    def spent(self, picked: Picked, created: Spent | None = None) -> None:
        """Learn that ``picked`` was spent, into the tokens ``created`` (if known)."""
        ...


def payment(
    total: int, quantity: int, wallet: str, payee: str | None = None
) -> list[tuple[str, int]]:
    """Return the outputs of paying ``quantity`` out of ``total``: payment, then any change.

    The payment goes to ``payee`` (default: back to ``wallet``, so the wallet's supply stays
    what it was); the change ``total - quantity`` always goes back to ``wallet``.
    """
    if not 0 < quantity <= total:
        raise ValueError(f"cannot pay {quantity} out of {total}")
    outputs = [(payee or wallet, quantity)]
    if total > quantity:
        outputs.append((wallet, total - quantity))
    return outputs


@dataclass(frozen=True)
class Spent:
    """A committed spend: the tokens it created, each with its wallet and currency."""

    outputs: list[tuple[WalletKey, Candidate]]


def spend_params(picked: Picked, outputs: Sequence[tuple[str, int]]) -> dict[str, object]:
    """Return the parameters of a one-statement spend of ``picked`` into ``outputs``."""
    return {
        "ids": picked.token_ids,
        "tx_id": picked.tx_id,
        "fence": picked.fence,
        "count": len(picked.tokens),
        "currency": picked.key.currency,
        "wallets": [wallet for wallet, _ in outputs],
        "quantities": [quantity for _, quantity in outputs],
    }


def spent_outputs(
    picked: Picked, spent: int, ids: list, wallets: list, quantities: list
) -> Spent | None:
    """Return what a spend statement created, or None if it spent nothing (a lock was lost)."""
    if spent != len(picked.tokens):
        return None
    return Spent(
        [
            (WalletKey(wallet, picked.key.currency), Candidate(int(token_id), int(quantity)))
            for token_id, wallet, quantity in zip(ids, wallets, quantities, strict=True)
        ]
    )


def spend(picked: Picked, outputs: Sequence[tuple[str, int]]) -> Spent | None:
    """Spend ``picked`` into ``outputs`` (wallet, quantity); None if a lock was lost.

    Prepared and typed (``common.db``), as the service runs its own statements: through a
    Django cursor it would be parsed and planned afresh at every spend.
    """
    spent, ids, wallets, quantities, _ = db.one(db.execute(SPEND, spend_params(picked, outputs)))
    return spent_outputs(picked, spent, ids, wallets, quantities)
