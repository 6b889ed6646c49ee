"""Multi-currency selections: several legs (currency, quantity) of one wallet, all or none.

The legs are locked by the core (``sherdlock.legs``) in currency order under one fence, with
the ordinary locking statements, inside one transaction that ends by writing the selection's
row (``locks.sql.legs.RECORD``): a leg that fails releases the legs before it and rolls the
transaction back, so no lock and no row is left, and a process that dies half-way leaves
nothing either. Spend, release, extend and reads are the one-currency statements, which know
a selection's legs (``locks.services``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import fields
from decimal import Decimal

from django.db import transaction
from psycopg.types.json import Jsonb

from clients.throttling import RateLimited, charge_now
from common import db
from locks import metrics
from locks.errors import SelectionNotFound, TxIdConflict
from locks.models import Selection
from locks.replica import get_selector
from locks.selections import get_selection, hold_times
from locks.sql import legs as sql
from locks.strategies import failure_outcome, record_failure
from sherdlock import FundsLocked, InsufficientFunds, NoMatch, SelectionStats, Strategy
from sherdlock import Selection as Picked
from sherdlock.legs import Leg, ordered_legs, release_legs, select_legs
from tokens.models import TokenRow

logger = logging.getLogger(__name__)


def select_tokens_legs(
    tx_id: str,
    wallet: str,
    legs: Sequence[tuple[str, int]],
    *,
    namespace: str = "",
    strategy: Strategy | None = None,
) -> tuple[Selection, bool]:
    """Lock tokens of ``wallet`` for every leg of ``tx_id``; return (selection, created).

    As ``locks.services.select_tokens`` for one currency: an identical repeat returns the
    selection (created False), other terms under the same ``tx_id`` raise TxIdConflict, funds
    held by others are reported at once. A leg that fails raises its error with ``leg`` set to
    its currency, and nothing stays locked. Multi-currency requests do not wait for funds.
    """
    started = time.monotonic()
    name = "random" if strategy is None else strategy.name
    try:
        selection, created, stats = _select_once(tx_id, wallet, legs, namespace, strategy)
    except (InsufficientFunds, FundsLocked, NoMatch) as exc:
        if isinstance(exc, FundsLocked):
            exc.retry_after = hold_times().estimate(exc.key)
        metrics.record_selection(
            time.monotonic() - started, failure_outcome(exc), exc.stats, strategy=name
        )
        key = exc.key
        record_failure(namespace, tx_id, wallet, key.currency, exc.requested, exc, name)
        raise
    except RateLimited:
        raise  # refused before it locked anything: not a selection
    except Exception:
        metrics.record_selection(time.monotonic() - started, "error", None)
        raise
    if created:
        metrics.record_selection(time.monotonic() - started, "success", stats, selection=selection)
    return selection, created


def _select_once(
    tx_id: str,
    wallet: str,
    legs: Sequence[tuple[str, int]],
    namespace: str,
    strategy: Strategy | None,
) -> tuple[Selection, bool, SelectionStats | None]:
    wanted = ordered_legs(legs)
    selector = get_selector()
    # A failing leg rolls the legs' transaction back, and with it the rate-limit units a locking
    # statement in it would take (clients.throttling.charging): take them first, in a statement
    # of their own, so that every request is charged whatever its outcome.
    charge_now()
    try:
        with transaction.atomic():
            picked = select_legs(selector, tx_id, wallet, wanted, patient=False, strategy=strategy)
            row = _record(namespace, tx_id, wallet, picked)
            if row["id"] is None:
                # Taken: roll every lock back (release_legs tells this replica's cache).
                release_legs(selector, picked)
                transaction.set_rollback(True)
    except (InsufficientFunds, FundsLocked, NoMatch):
        if _taken(namespace, tx_id):
            return _repeat(namespace, tx_id, wallet, wanted), False, None
        raise
    if row["id"] is None:
        return _repeat(namespace, tx_id, wallet, wanted), False, None
    first = picked[0]
    selection = Selection(
        id=row["id"],
        namespace=namespace,
        tx_id=tx_id,
        wallet=wallet,
        currency=first.key.currency,
        quantity=Decimal(first.quantity),
        total=Decimal(first.total),
        fence=first.fence,
        token_ids=[token_id for token_id, *_ in row["tokens"]],
        status=Selection.Status.LOCKED,
        strategy=_strategy(picked),
        legs=_legs(picked),
        created_at=row["created_at"],
        expires_at=_expiry(picked),
    )
    selection.held_tokens = [
        TokenRow(i, t, n, wallet, c, Decimal(q), namespace) for i, t, n, q, c in row["tokens"]
    ]
    logger.debug(
        "selected %s legs of %s for %s: %d token(s)",
        len(picked),
        wallet,
        tx_id,
        len(selection.token_ids),
    )
    return selection, True, _stats(picked)


def _record(namespace: str, tx_id: str, wallet: str, picked: tuple[Picked, ...]) -> dict:
    """Write the selection's row (in the caller's transaction); its id is None if taken."""
    first = picked[0]
    params = {
        "namespace": namespace,
        "tx_id": tx_id,
        "wallet": wallet,
        "currency": first.key.currency,
        "quantity": Decimal(first.quantity),
        "total": Decimal(first.total),
        "fence": first.fence,
        "token_ids": sorted(i for leg in picked for i in leg.token_ids),
        "strategy": _strategy(picked),
        "legs": Jsonb(_legs(picked)),
        "expires_at": _expiry(picked),
    }
    cursor = db.execute(sql.RECORD, params)
    row = db.one(cursor)
    names = [column.name for column in cursor.description or ()]  # set: a row came back
    return dict(zip(names, row, strict=True))


def _taken(namespace: str, tx_id: str) -> bool:
    cursor = db.execute(sql.TAKEN, {"namespace": namespace, "tx_id": tx_id})
    return bool(db.one(cursor)[0])


def _legs(picked: tuple[Picked, ...]) -> list[dict[str, str]]:
    return [
        {"currency": leg.key.currency, "quantity": str(leg.quantity), "total": str(leg.total)}
        for leg in picked
    ]


def _strategy(picked: tuple[Picked, ...]) -> str:
    # An exact selection that fell back in some legs only is recorded as exact.
    names = {leg.strategy for leg in picked}
    return names.pop() if len(names) == 1 else "exact"


def _expiry(picked: tuple[Picked, ...]):
    return min(leg.expires_at for leg in picked)  # type: ignore[type-var]


def _stats(picked: tuple[Picked, ...]) -> SelectionStats:
    total = SelectionStats()
    for leg in picked:
        for f in fields(SelectionStats):
            setattr(total, f.name, getattr(total, f.name) + getattr(leg.stats, f.name))
    return total


def _repeat(namespace: str, tx_id: str, wallet: str, legs: tuple[Leg, ...]) -> Selection:
    """Answer a request whose tx id is taken: the same selection again, or a conflict."""
    try:
        existing = get_selection(tx_id, namespace=namespace)
    except SelectionNotFound:
        raise TxIdConflict(f"transaction id {tx_id} names issued tokens; use another") from None
    asked = [{"currency": leg.currency, "quantity": str(leg.quantity)} for leg in legs]
    had = [{"currency": x["currency"], "quantity": x["quantity"]} for x in existing.legs or ()]
    if existing.wallet != wallet or had != asked:
        raise TxIdConflict(f"transaction {tx_id} already selected different tokens")
    return existing
