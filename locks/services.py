"""The selection lifecycle: select, spend (with outputs), release, extend the lease.

Views, tasks and commands call these; each is one short transaction (select: a few statements
in autocommit) and raises errors of one hierarchy (``sherdlock.SherdlockError``) that the API
translates to HTTP in one place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Min
from django.db.models.functions import Least, Now
from django.utils import timezone

from locks import metrics
from locks.errors import (
    AlreadySpent,
    LeaseLost,
    NotLocked,
    OutputConflict,
    SelectionNotFound,
    TxIdConflict,
    ValueNotConserved,
)
from locks.models import FailedSelection, Selection, TokenLock
from locks.replica import get_selector
from locks.store import RecordedSelection
from sherdlock import ClaimRefused, FundsLocked, InsufficientFunds
from tokens.models import Token
from tokens.services import TokenSpec

logger = logging.getLogger(__name__)

def _same_request(selection: Selection, wallet: str, currency: str, quantity: int) -> bool:
    return (selection.wallet, selection.currency, selection.quantity) == (
        wallet, currency, Decimal(quantity))


def select_tokens(tx_id: str, wallet: str, currency: str, quantity: int) -> tuple[Selection, bool]:
    """Lock tokens worth at least ``quantity`` for ``tx_id``; return (selection, created).

    The statement that completes the selection also writes its row, so a new selection costs
    one round trip when the replica's cache serves it and two when it must fetch. Repeating an
    identical request returns the existing selection (created False); the same ``tx_id`` with
    other terms, or one that names issued tokens, raises TxIdConflict. The selector never
    sleeps here: funds held by others are reported at once (FundsLocked). Selector errors
    propagate after being recorded for the dashboard.
    """
    selector = get_selector()
    started, outcome, stats = time.monotonic(), "error", None
    try:
        picked = selector.select(tx_id, wallet, currency, quantity, patient=False, record=True)
        outcome, stats = "success", picked.stats
    except ClaimRefused:
        outcome = "repeat"
        return _repeat(tx_id, wallet, currency, quantity), False
    except (InsufficientFunds, FundsLocked) as exc:
        outcome = "insufficient_funds" if isinstance(exc, InsufficientFunds) else "funds_locked"
        stats = exc.stats
        _record_failure(tx_id, wallet, currency, quantity, exc)
        raise
    finally:
        if outcome != "repeat":
            metrics.record_selection(time.monotonic() - started, outcome, stats)
    record = picked.record
    assert isinstance(record, RecordedSelection)
    selection = Selection(
        id=record.id, tx_id=tx_id, wallet=wallet, currency=currency,
        quantity=Decimal(quantity), total=Decimal(picked.total), fence=picked.fence,
        token_ids=[token_id for token_id, *_ in record.tokens], status=Selection.Status.LOCKED,
        created_at=record.created_at, expires_at=picked.expires_at,
    )
    # The tokens as the statement returned them: the response needs no second query.
    selection.held_tokens = [Token(id=i, tx_id=t, index=n, wallet=wallet, currency=currency,
                                   quantity=Decimal(q)) for i, t, n, q in record.tokens]
    logger.info("selected %s for %s: %d token(s), total %s, %d lock attempt(s)",
                picked.key, tx_id, len(picked.tokens), picked.total, picked.stats.lock_attempts)
    return selection, True


def _repeat(tx_id: str, wallet: str, currency: str, quantity: int) -> Selection:
    """Answer a request whose tx id is taken: the same selection again, or a conflict."""
    existing = Selection.objects.filter(tx_id=tx_id).first()
    if existing is None:
        raise TxIdConflict(f"transaction id {tx_id} names issued tokens; use another")
    if not _same_request(existing, wallet, currency, quantity):
        raise TxIdConflict(f"transaction {tx_id} already selected different tokens")
    return existing


def _record_failure(tx_id: str, wallet: str, currency: str, quantity: int,
                    exc: InsufficientFunds | FundsLocked) -> None:
    outcome = (FailedSelection.Outcome.INSUFFICIENT_FUNDS if isinstance(exc, InsufficientFunds)
               else FailedSelection.Outcome.FUNDS_LOCKED)
    FailedSelection.objects.create(
        tx_id=tx_id, wallet=wallet, currency=currency, quantity=Decimal(quantity),
        outcome=outcome, lock_conflicts=exc.stats.lock_conflicts if exc.stats else 0,
    )
    logger.info("selection %s in %s/%s failed: %s", tx_id, wallet, currency, outcome)


def get_selection(tx_id: str) -> Selection:
    """Return the selection of ``tx_id`` or raise SelectionNotFound."""
    try:
        return Selection.objects.get(tx_id=tx_id)
    except Selection.DoesNotExist:
        raise SelectionNotFound(f"no selection for transaction {tx_id}") from None


def _locked_selection(tx_id: str) -> Selection:
    try:
        return Selection.objects.select_for_update().get(tx_id=tx_id)
    except Selection.DoesNotExist:
        raise SelectionNotFound(f"no selection for transaction {tx_id}") from None


def _outputs_match(tx_id: str, outputs: Sequence[TokenSpec]) -> bool:
    stored = {(t.index, t.wallet, t.currency, t.quantity)
              for t in Token.objects.filter(tx_id=tx_id)}
    return stored == {(o.index, o.wallet, o.currency, Decimal(o.quantity)) for o in outputs}


def spend_selection(tx_id: str, outputs: Sequence[TokenSpec]) -> tuple[Selection, bool]:
    """Spend the selected tokens and create ``outputs`` in one transaction.

    Return (selection, spent_now); repeating the same spend returns spent_now False. The
    outputs must sum exactly to the selection's total in its currency. Every lock must still
    be held by this selection (same fence) and unexpired, checked inside the transaction.
    """
    with transaction.atomic():
        selection = _locked_selection(tx_id)
        if selection.status == Selection.Status.SPENT:
            if _outputs_match(tx_id, outputs):
                return selection, False
            raise AlreadySpent(f"transaction {tx_id} was already spent with other outputs")
        if selection.status == Selection.Status.RELEASED:
            raise NotLocked(f"selection {tx_id} was released; select again")
        _check_conservation(selection, outputs)
        ids = list(selection.token_ids)
        # Token rows first, then lock rows: the order every store statement uses.
        list(Token.objects.select_for_update().filter(pk__in=ids).order_by("pk")
             .values_list("pk", flat=True))
        held = TokenLock.objects.filter(
            pk__in=ids, spender_tx_id=tx_id, fence=selection.fence, expires_at__gt=Now(),
            token__spent_at__isnull=True,
        ).count()
        if held != len(ids):
            raise LeaseLost(
                f"selection {tx_id} holds {held} of its {len(ids)} locks; its lease expired "
                "or its tokens were taken over — select again")
        now = timezone.now()
        Token.objects.filter(pk__in=ids).update(spent_by=tx_id, spent_at=now)
        try:
            with transaction.atomic():
                Token.objects.bulk_create([
                    Token(tx_id=tx_id, index=o.index, wallet=o.wallet, currency=o.currency,
                          quantity=Decimal(o.quantity)) for o in outputs
                ])
        except IntegrityError:
            raise OutputConflict(f"an output of transaction {tx_id} already exists") from None
        selection.status, selection.spent_at = Selection.Status.SPENT, now
        selection.save(update_fields=["status", "spent_at"])
        # The lock rows stay until housekeeping purges them: replicas with this token in
        # their cache see it locked and move on without a refetch (the seed's design).
    get_selector().forget(ids)
    logger.info("spent %s: %d token(s) in, %d output(s)", tx_id, len(ids), len(outputs))
    return selection, True


def _check_conservation(selection: Selection, outputs: Sequence[TokenSpec]) -> None:
    wrong = sorted({o.currency for o in outputs} - {selection.currency})
    if wrong:
        raise ValueNotConserved(
            f"outputs must be in {selection.currency}, not {', '.join(wrong)}")
    out_total = sum(Decimal(o.quantity) for o in outputs)
    if out_total != selection.total:
        raise ValueNotConserved(
            f"outputs sum to {out_total} but the selected tokens hold {selection.total}")


def release_selection(tx_id: str) -> tuple[Selection, int]:
    """Unlock the selection's tokens; idempotent. Return (selection, locks removed)."""
    with transaction.atomic():
        selection = _locked_selection(tx_id)
        if selection.status == Selection.Status.SPENT:
            raise AlreadySpent(f"selection {tx_id} was spent; nothing to release")
        if selection.status == Selection.Status.RELEASED:
            return selection, 0
        # Through the store: it deletes in token-id order, the order every inserter waits in.
        removed = get_selector().release(tx_id, fence=selection.fence)
        selection.status, selection.released_at = Selection.Status.RELEASED, timezone.now()
        selection.save(update_fields=["status", "released_at"])
    logger.info("released %s: %d lock(s)", tx_id, removed)
    return selection, removed


def extend_selection(tx_id: str, seconds: float | None = None) -> Selection:
    """Renew the lease of every lock of the selection, capped at its maximum lifetime."""
    options = settings.SHERDLOCK
    lease = float(seconds if seconds is not None else options["LEASE_SECONDS"])
    with transaction.atomic():
        selection = _locked_selection(tx_id)
        if selection.status == Selection.Status.SPENT:
            raise AlreadySpent(f"selection {tx_id} was spent")
        if selection.status == Selection.Status.RELEASED:
            raise NotLocked(f"selection {tx_id} was released")
        cap = selection.created_at + timedelta(seconds=float(options["MAX_LEASE_SECONDS"]))
        renewed = TokenLock.objects.filter(
            spender_tx_id=tx_id, fence=selection.fence, expires_at__gt=Now(),
        ).update(expires_at=Least(Now() + timedelta(seconds=lease), cap))
        if renewed != len(selection.token_ids):
            raise LeaseLost(f"selection {tx_id} lost {len(selection.token_ids) - renewed} "
                            "lock(s) before renewal; select again")
        selection.expires_at = TokenLock.objects.filter(
            spender_tx_id=tx_id, fence=selection.fence).aggregate(e=Min("expires_at"))["e"]
        selection.save(update_fields=["expires_at"])
    return selection


def selection_tokens(selection: Selection) -> list[Token]:
    """Return the selection's tokens in selection order."""
    by_id = Token.objects.in_bulk(selection.token_ids)
    return [by_id[pk] for pk in selection.token_ids if pk in by_id]

