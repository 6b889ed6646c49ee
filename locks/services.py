"""Selecting: lock tokens for a transaction, once or waiting its turn for held funds.

Views, tasks and commands call these and the lifecycle of ``locks.selections`` (read, spend,
release, extend), re-exported here. A selection is one statement in the common case (two when
the replica's cache cannot serve it); errors are of one hierarchy (``sherdlock.SherdlockError``)
that the API translates to HTTP in one place.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from decimal import Decimal
from functools import partial

from clients.throttling import RateLimited
from locks import metrics, wait_loop
from locks.errors import (
    SelectionNotFound,
    TxIdConflict,
)
from locks.models import Selection
from locks.replica import get_selector
from locks.selections import (
    Outcome,
    extend_selection,
    get_selection,
    hold_times,
    release_selection,
    selection_tokens,
    spend_selection,
)
from locks.store import RecordedSelection
from locks.strategies import failure_outcome, record_failure
from sherdlock import (
    ClaimRefused,
    FundsLocked,
    InsufficientFunds,
    NoMatch,
    Strategy,
    WalletKey,
)
from tokens.models import TokenRow

__all__ = [
    "Outcome",
    "extend_selection",
    "get_selection",
    "hold_times",
    "release_selection",
    "select_tokens",
    "selection_tokens",
    "spend_selection",
]

logger = logging.getLogger(__name__)


def _same_request(selection: Selection, wallet: str, currency: str, quantity: int) -> bool:
    # A selection with legs is never a repeat of one currency, though its first leg may match.
    return selection.legs is None and (
        selection.wallet,
        selection.currency,
        selection.quantity,
    ) == (wallet, currency, Decimal(quantity))


def select_tokens(
    tx_id: str,
    wallet: str,
    currency: str,
    quantity: int,
    *,
    namespace: str = "",
    wait: float = 0.0,
    strategy: Strategy | None = None,
) -> tuple[Selection, bool]:
    """Lock tokens worth at least ``quantity`` for ``tx_id``; return (selection, created).

    The statement that completes the selection also writes its row, so a new selection costs
    one round trip when the replica's cache serves it and two when it must fetch. Repeating an
    identical request returns the existing selection (created False); the same ``tx_id`` with
    other terms, or one that names issued tokens, raises TxIdConflict. The selector never
    sleeps: funds held by others are reported at once (FundsLocked, with the advice to retry
    after about as long as the key's holds last), unless the caller may ``wait`` that many
    seconds, in which case it waits its turn for them (``locks.wait_loop``). ``strategy`` (default
    random) picks the tokens; a repeat answers the selection whatever strategy it names.
    Failures are recorded for the dashboard once, when answered.
    """
    started = time.monotonic()
    key = WalletKey(wallet, currency)
    once = partial(_select_once, tx_id, key, quantity, namespace, strategy)
    try:
        if wait > 0:
            try:
                result = wait_loop.wait_for(key, wait, once, client=namespace)
            except wait_loop.QueueFull:
                # No room to wait here: answer as an impatient request would.
                result = once()
        else:
            result = once()
    except (InsufficientFunds, FundsLocked, NoMatch) as exc:
        if isinstance(exc, FundsLocked):
            exc.retry_after = hold_times().estimate(key)
        outcome = failure_outcome(exc)
        metrics.record_selection(
            time.monotonic() - started, outcome, exc.stats, strategy=_name(strategy)
        )
        record_failure(namespace, tx_id, wallet, currency, quantity, exc, _name(strategy))
        raise
    except RateLimited:
        raise  # refused before it locked anything: not a selection
    except Exception:
        metrics.record_selection(time.monotonic() - started, "error", None)
        raise
    selection, created, stats = result
    if created:
        metrics.record_selection(time.monotonic() - started, "success", stats, selection=selection)
    return selection, created


def _name(strategy: Strategy | None) -> str:
    return "random" if strategy is None else strategy.name


def _select_once(
    tx_id: str, key: WalletKey, quantity: int, namespace: str, strategy: Strategy | None = None
) -> tuple[Selection, bool, object]:
    """One attempt: (selection, created, selector stats); raise like the selector does."""
    try:
        picked = get_selector().select(
            tx_id,
            key.wallet,
            key.currency,
            quantity,
            patient=False,
            record=True,
            namespace=namespace,
            strategy=strategy,
        )
    except ClaimRefused:
        return _repeat(namespace, tx_id, key.wallet, key.currency, quantity), False, None
    record = picked.record
    assert isinstance(record, RecordedSelection)
    # The PostgreSQL store stamps leases with the database clock.
    assert isinstance(picked.expires_at, datetime)
    wallet, currency = key.wallet, key.currency
    selection = Selection.answered(
        id=record.id,
        namespace=namespace,
        tx_id=tx_id,
        wallet=wallet,
        currency=currency,
        quantity=Decimal(quantity),
        total=Decimal(picked.total),
        fence=picked.fence,
        token_ids=[token_id for token_id, *_ in record.tokens],
        status=Selection.Status.LOCKED,
        strategy=picked.strategy,
        created_at=record.created_at,
        expires_at=picked.expires_at,
    )
    # The tokens as the statement returned them: the response needs no second query.
    selection.held_tokens = [
        TokenRow(i, t, n, wallet, currency, Decimal(q), namespace) for i, t, n, q in record.tokens
    ]
    logger.debug(
        "selected %s for %s: %d token(s), total %s, %d lock attempt(s)",
        picked.key,
        tx_id,
        len(picked.tokens),
        picked.total,
        picked.stats.lock_attempts,
    )
    return selection, True, picked.stats


def _repeat(namespace: str, tx_id: str, wallet: str, currency: str, quantity: int) -> Selection:
    """Answer a request whose tx id is taken: the same selection again, or a conflict."""
    try:
        existing = get_selection(tx_id, namespace=namespace)
    except SelectionNotFound:
        raise TxIdConflict(f"transaction id {tx_id} names issued tokens; use another") from None
    if not _same_request(existing, wallet, currency, quantity):
        raise TxIdConflict(f"transaction {tx_id} already selected different tokens")
    return existing
