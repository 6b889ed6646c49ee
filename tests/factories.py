"""Small factories for tests: tokens and locks with sensible defaults."""

from __future__ import annotations

import itertools
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

_counter = itertools.count()


def make_token(wallet: str = "alice", currency: str = "USD", quantity: int | Decimal = 10,
               tx_id: str | None = None, index: int = 0, **extra):
    """Create and return an unspent token."""
    from tokens.models import Token

    return Token.objects.create(
        tx_id=tx_id or f"issue-{next(_counter)}", index=index, wallet=wallet, currency=currency,
        quantity=Decimal(quantity), **extra,
    )


def make_tokens(count: int, wallet: str = "alice", currency: str = "USD", quantity: int = 10):
    """Create ``count`` unspent tokens in one statement and return them."""
    from tokens.models import Token

    tx_id = f"batch-{next(_counter)}"
    return Token.objects.bulk_create(
        Token(tx_id=tx_id, index=i, wallet=wallet, currency=currency, quantity=Decimal(quantity))
        for i in range(count)
    )


def make_lock(token, spender_tx_id: str = "spender", fence: int = 1, ttl: float = 60.0):
    """Lock ``token`` for ``spender_tx_id`` for ``ttl`` seconds (negative: already expired)."""
    from locks.models import TokenLock

    now = timezone.now()
    created = now if ttl >= 0 else now + timedelta(seconds=ttl) - timedelta(seconds=1)
    return TokenLock.objects.create(
        token=token, spender_tx_id=spender_tx_id, fence=fence, created_at=created,
        expires_at=now + timedelta(seconds=ttl),
    )
