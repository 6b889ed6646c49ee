"""Small factories for tests: tokens and locks with sensible defaults."""

from __future__ import annotations

import itertools
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

_counter = itertools.count()


def make_token(
    wallet: str = "alice",
    currency: str = "USD",
    quantity: int | Decimal = 10,
    tx_id: str | None = None,
    index: int = 0,
    **extra,
):
    """Create and return a token (unspent unless ``extra`` says otherwise), as issued."""
    from tokens import supply
    from tokens.models import Token

    token = Token.objects.create(
        tx_id=tx_id or f"issue-{next(_counter)}",
        index=index,
        wallet=wallet,
        currency=currency,
        quantity=Decimal(quantity),
        **extra,
    )
    supply.add(supply.unspent_by_currency([token]))
    return token


def make_tokens(count: int, wallet: str = "alice", currency: str = "USD", quantity: int = 10):
    """Create ``count`` unspent tokens in one statement and return them, as issued."""
    from tokens import supply
    from tokens.models import Token

    tx_id = f"batch-{next(_counter)}"
    tokens = Token.objects.bulk_create(
        Token(tx_id=tx_id, index=i, wallet=wallet, currency=currency, quantity=Decimal(quantity))
        for i in range(count)
    )
    supply.add({currency: Decimal(quantity) * count})
    return tokens


def make_lock(token, spender_tx_id: str = "spender", fence: int = 1, ttl: float = 60.0):
    """Lock ``token`` for ``spender_tx_id`` for ``ttl`` seconds (negative: already expired)."""
    from locks.models import TokenLock

    now = timezone.now()
    created = now if ttl >= 0 else now + timedelta(seconds=ttl) - timedelta(seconds=1)
    lock = TokenLock.of(
        token,
        spender_tx_id=spender_tx_id,
        fence=fence,
        created_at=created,
        expires_at=now + timedelta(seconds=ttl),
    )
    lock.save(force_insert=True)
    return lock


def lock_tokens(tokens, spender="spender", ttl=60.0, fence=1):
    """Lock ``tokens`` for ``spender`` (a negative ``ttl``: expired that long ago)."""
    from locks.models import TokenLock

    now = timezone.now()
    created = now if ttl >= 0 else now + timedelta(seconds=ttl - 1)
    return TokenLock.objects.bulk_create(
        TokenLock.of(
            t,
            spender_tx_id=spender,
            fence=fence,
            created_at=created,
            expires_at=now + timedelta(seconds=ttl),
        )
        for t in tokens
    )


def make_selection(tokens, tx_id, status="locked", ttl=60.0, lock=True, namespace=""):
    """Create a selection of ``tokens`` (and their locks unless ``lock`` is false)."""
    from locks.models import Selection

    total = sum(t.quantity for t in tokens)
    selection = Selection.objects.create(
        namespace=namespace,
        tx_id=tx_id,
        wallet=tokens[0].wallet,
        currency=tokens[0].currency,
        quantity=total,
        total=total,
        token_ids=[t.pk for t in tokens],
        status=status,
        expires_at=timezone.now() + timedelta(seconds=ttl),
    )
    if lock:
        lock_tokens(tokens, spender=tx_id, ttl=ttl, fence=selection.fence)
    return selection
