"""Issuing tokens and reading balances."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce, Now

from common.sql import DURABLE_COMMIT
from sherdlock import SherdlockError
from tokens import sql
from tokens.models import Token


class TxIdInUse(SherdlockError):
    """The transaction id names a selection: its spend's outputs will be its tokens."""

    def __init__(self, tx_ids: Sequence[str]) -> None:
        super().__init__(
            f"transaction id(s) {', '.join(sorted(tx_ids))} name selection(s); "
            "a spend creates those tokens"
        )
        self.tx_ids = list(tx_ids)


class TokenConflict(SherdlockError):
    """A token with this identity already exists with different content."""

    def __init__(self, tx_id: str, index: int) -> None:
        super().__init__(f"token {tx_id}:{index} already exists with different content")
        self.tx_id, self.index = tx_id, index


@dataclass(frozen=True)
class TokenSpec:
    """What identifies and describes a token to issue."""

    tx_id: str
    index: int
    wallet: str
    currency: str
    quantity: int

    def matches(self, token: Token) -> bool:
        return (token.wallet, token.currency, token.quantity) == (
            self.wallet,
            self.currency,
            Decimal(self.quantity),
        )


def issue_tokens(specs: Sequence[TokenSpec], namespace: str = "") -> tuple[list[Token], int]:
    """Create the tokens in one transaction; identical re-sends are no-ops.

    The value of the new tokens is added to their currencies' supply summary in the same
    statement. Return the stored tokens, in request order, and how many were new. Raise
    TokenConflict, writing nothing, when an identity is taken by a token with different
    content, and TxIdInUse when a transaction id names a selection of ``namespace`` (its
    spend creates the tokens of that id).
    """
    if not specs:
        return [], 0
    with transaction.atomic(), connection.cursor() as cursor:
        # The issue's commit is durable even where synchronous_commit is configured off.
        cursor.execute(DURABLE_COMMIT)
        tx_ids = sorted({s.tx_id for s in specs})
        claim, read_claims = sql.CLAIM_ISSUE
        cursor.execute(claim, [namespace, tx_ids])
        cursor.execute(read_claims, [namespace, tx_ids])
        if taken := [tx_id for tx_id, wallet in cursor.fetchall() if wallet is not None]:
            raise TxIdInUse(taken)
        cursor.execute(
            sql.ISSUE,
            [
                namespace,
                [s.tx_id for s in specs],
                [s.index for s in specs],
                [s.wallet for s in specs],
                [s.currency for s in specs],
                [Decimal(s.quantity) for s in specs],
                namespace,
            ],
        )
        new = len(cursor.fetchall())
        identity = Q()
        for spec in specs:
            identity |= Q(tx_id=spec.tx_id, index=spec.index)
        stored = {
            (t.tx_id, t.index): t for t in Token.objects.filter(identity, namespace=namespace)
        }
        tokens = []
        for spec in specs:
            token = stored[(spec.tx_id, spec.index)]
            if not spec.matches(token):
                raise TokenConflict(spec.tx_id, spec.index)
            tokens.append(token)
    return tokens, new


def balances(wallet: str, currency: str | None = None) -> list[dict[str, object]]:
    """Return, per currency, the wallet's unspent, live-locked and available quantities."""
    rows = Token.objects.unspent().filter(wallet=wallet)
    if currency:
        rows = rows.filter(currency=currency)
    rows = (
        rows.values("currency")
        .annotate(
            unspent=Sum("quantity"),
            locked=Coalesce(Sum("quantity", filter=Q(lock__expires_at__gt=Now())), Decimal(0)),
        )
        .order_by("currency")
    )
    return [
        {
            "currency": r["currency"],
            "unspent": r["unspent"],
            "locked": r["locked"],
            "available": r["unspent"] - r["locked"],
        }
        for r in rows
    ]
