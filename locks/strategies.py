"""Selection strategies at the service's edge: a request's terms, and how a failure is told.

The strategies themselves live in the core (``sherdlock.strategies``); the service turns a
request's ``strategy``, ``max_change``, ``max_tokens`` and ``fallback`` into a
``sherdlock.Strategy`` and names the outcome of a selection that failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal

from locks.models import FailedSelection
from sherdlock import FundsLocked, InsufficientFunds, NoMatch, Strategy

logger = logging.getLogger(__name__)
TERMS = ("max_change", "max_tokens", "fallback")


def strategy_of(data: Mapping[str, object]) -> Strategy:
    """Return the strategy a validated request names (default: random)."""
    terms = {name: data[name] for name in TERMS if data.get(name) is not None}
    return Strategy(str(data.get("strategy") or "random"), **terms)  # type: ignore[arg-type]


def failure_outcome(exc: InsufficientFunds | FundsLocked | NoMatch) -> str:
    """Return the recorded outcome of a selection that failed with ``exc``."""
    if isinstance(exc, InsufficientFunds):
        return FailedSelection.Outcome.INSUFFICIENT_FUNDS
    if isinstance(exc, FundsLocked):
        return FailedSelection.Outcome.FUNDS_LOCKED
    return FailedSelection.Outcome.NO_MATCH


def record_failure(
    namespace: str,
    tx_id: str,
    wallet: str,
    currency: str,
    quantity: int,
    exc: InsufficientFunds | FundsLocked | NoMatch,
    strategy: str = "random",
) -> None:
    """Record a selection that failed, for the dashboard."""
    outcome = failure_outcome(exc)
    FailedSelection.objects.create(
        namespace=namespace,
        tx_id=tx_id,
        wallet=wallet,
        currency=currency,
        quantity=Decimal(quantity),
        outcome=outcome,
        strategy=strategy,
        lock_conflicts=exc.stats.lock_conflicts if exc.stats else 0,
    )
    logger.info("selection %s in %s/%s failed: %s", tx_id, wallet, currency, outcome)
