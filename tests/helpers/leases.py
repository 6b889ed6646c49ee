"""Lock-table helpers shared by the housekeeping and lease tests."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from locks.models import Selection, TokenLock
from tokens.services import TokenSpec


def remaining() -> set[int]:
    """Return the ids of the tokens that still have a lock row."""
    return set(TokenLock.objects.values_list("token_id", flat=True))


def expire(tx_id: str) -> None:
    """End the lease of ``tx_id`` now, as if its owner had stopped renewing a minute ago."""
    now = timezone.now()
    TokenLock.objects.filter(spender_tx_id=tx_id).update(
        created_at=now - timedelta(minutes=2), expires_at=now - timedelta(minutes=1)
    )
    Selection.objects.filter(tx_id=tx_id).update(
        created_at=now - timedelta(minutes=2), expires_at=now - timedelta(minutes=1)
    )


def outputs_for(tx_id: str, quantity: int) -> list[TokenSpec]:
    """Return the outputs of a spend that pays ``quantity`` to bob."""
    return [TokenSpec(tx_id=tx_id, index=0, wallet="bob", currency="USD", quantity=quantity)]
