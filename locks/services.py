"""The selection lifecycle: select, spend (with outputs), release, extend the lease.

Views, tasks and commands call these. Each is one statement in the common case (select: two
when the replica's cache cannot serve it) and raises errors of one hierarchy
(``sherdlock.SherdlockError``) that the API translates to HTTP in one place. Selections are
found by (namespace, tx id) within the caller's wallets (``wallets`` None: every wallet); the
answers are built from what the statements returned, with no second read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import partial
from typing import Any

from django.db import IntegrityError, connection, transaction

from common import db
from common.knobs import knobs
from locks import metrics, waiting
from locks.errors import (
    AlreadySpent,
    LeaseLost,
    NotLocked,
    OutputConflict,
    SelectionNotFound,
    TxIdConflict,
    ValueNotConserved,
)
from locks.holds import HoldTimes
from locks.models import Selection
from locks.replica import get_selector
from locks.sql import lifecycle
from locks.store import RecordedSelection
from locks.strategies import failure_outcome, record_failure
from sherdlock import (
    Candidate,
    ClaimRefused,
    FundsLocked,
    InsufficientFunds,
    NoMatch,
    Strategy,
    WalletKey,
)
from tokens.models import Token, TokenRow
from tokens.services import TokenSpec

logger = logging.getLogger(__name__)


@dataclass
class Outcome:
    """A selection as an operation left it, with the tokens it holds and any outputs."""

    selection: Selection
    tokens: list[TokenRow]
    outputs: list[TokenRow] = field(default_factory=list)
    # False when the request repeated one already done (same spend, second release, ...).
    changed: bool = True
    locks_removed: int = 0  # by a release


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
    seconds, in which case it waits its turn for them (``locks.waiting``). ``strategy`` (default
    random) picks the tokens; a repeat answers the selection whatever strategy it names.
    Failures are recorded for the dashboard once, when answered.
    """
    started = time.monotonic()
    key = WalletKey(wallet, currency)
    once = partial(_select_once, tx_id, key, quantity, namespace, strategy)
    try:
        if wait > 0:
            try:
                result = waiting.wait_for(key, wait, once)
            except waiting.QueueFull:
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
    selection = Selection(
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
    logger.info(
        "selected %s for %s: %d token(s), total %s, %d lock attempt(s)",
        picked.key,
        tx_id,
        len(picked.tokens),
        picked.total,
        picked.stats.lock_attempts,
    )
    return selection, True, picked.stats


_hold_times: HoldTimes | None = None


def hold_times() -> HoldTimes:
    """Return this process's record of how long holds last."""
    global _hold_times
    if _hold_times is None:
        _hold_times = HoldTimes(default=get_selector().config.retry_after)
    return _hold_times


def _held(selection: Selection, until) -> None:
    """Learn how long ``selection`` was held (selection to spend or release)."""
    if selection.created_at is not None and until is not None:
        hold_times().observe(
            WalletKey(selection.wallet, selection.currency),
            (until - selection.created_at).total_seconds(),
        )


def _repeat(namespace: str, tx_id: str, wallet: str, currency: str, quantity: int) -> Selection:
    """Answer a request whose tx id is taken: the same selection again, or a conflict."""
    try:
        existing = get_selection(tx_id, namespace=namespace)
    except SelectionNotFound:
        raise TxIdConflict(f"transaction id {tx_id} names issued tokens; use another") from None
    if not _same_request(existing, wallet, currency, quantity):
        raise TxIdConflict(f"transaction {tx_id} already selected different tokens")
    return existing


def get_selection(
    tx_id: str, *, namespace: str | None = "", wallets: Sequence[str] | None = None
) -> Selection:
    """Return the selection of ``tx_id`` with its tokens and lock state, in one statement.

    ``namespace`` None looks in every namespace (operators), the oldest match first. Raise
    SelectionNotFound if there is none the caller may see.
    """
    row = _run(lifecycle.READ, _params(namespace, tx_id, wallets))
    _, selection, _ = _selection(row, row["namespace"], tx_id)
    selection.status = row["status"]
    selection.output_ids = row["output_ids"]
    selection.live_locks = row["live_locks"]
    return selection


def spend_selection(
    tx_id: str,
    outputs: Sequence[TokenSpec],
    *,
    namespace: str = "",
    wallets: Sequence[str] | None = None,
) -> Outcome:
    """Spend the selected tokens and create ``outputs``, all or nothing, in one statement.

    Repeating the same spend answers the same outputs with ``changed`` False. The outputs must
    sum exactly to the selection's total in its currency. Every lock must still be held by this
    selection (same fence) and unexpired, checked under the token rows' locks.
    """
    params = _params(namespace, tx_id, wallets)
    params.update(
        indexes=[o.index for o in outputs],
        output_wallets=[o.wallet for o in outputs],
        currencies=[o.currency for o in outputs],
        quantities=[Decimal(o.quantity) for o in outputs],
    )
    try:
        row = _run(lifecycle.SPEND, params, may_fail=True)
    except IntegrityError:
        raise OutputConflict(f"an output of transaction {tx_id} already exists") from None
    verdict, selection, tokens = _selection(row, namespace, tx_id)
    spent_at, _spent, stored = row["spent_at"], row["inputs_spent"], row["outputs"]
    created = [TokenRow(i, tx_id, n, w, c, Decimal(q), namespace) for i, n, w, c, q in stored or ()]
    if verdict == "spent":
        if _outputs_match(created, outputs):
            return Outcome(
                _spent_selection(selection, spent_at, created), tokens, created, changed=False
            )
        raise AlreadySpent(f"transaction {tx_id} was already spent with other outputs")
    if verdict == "released":
        raise NotLocked(f"selection {tx_id} was released; select again")
    if verdict == "not_conserved":
        raise ValueNotConserved(
            f"outputs must be in {selection.currency} and sum to the selected tokens' "
            f"{selection.total}"
        )
    if verdict == "lease_lost":
        raise LeaseLost(
            f"selection {tx_id} no longer holds all its locks: its lease expired "
            "or its tokens were taken over; select again"
        )
    _expect_ok(verdict)
    get_selector().forget(selection.token_ids)
    _held(selection, spent_at)
    logger.info("spent %s: %d token(s) in, %d output(s)", tx_id, len(tokens), len(created))
    return Outcome(_spent_selection(selection, spent_at, created), tokens, created)


def release_selection(
    tx_id: str, *, namespace: str = "", wallets: Sequence[str] | None = None
) -> Outcome:
    """Unlock the selection's tokens and record it released; idempotent."""
    row = _run(lifecycle.RELEASE_STATEMENTS[_durable()], _params(namespace, tx_id, wallets))
    verdict, selection, tokens = _selection(row, namespace, tx_id)
    if verdict == "spent":
        raise AlreadySpent(f"selection {tx_id} was spent; nothing to release")
    _expect_ok(verdict)
    changed = selection.status != Selection.Status.RELEASED
    selection.status, selection.released_at = Selection.Status.RELEASED, row["released_at"]
    selection.expires_at = row["expires_at"]
    if changed:
        _held(selection, selection.released_at)
    if row["freed"]:
        for currency in {t.currency for t in tokens}:  # one, or a selection's legs
            get_selector().released(
                WalletKey(selection.wallet, currency),
                [Candidate(t.id, int(t.quantity)) for t in tokens if t.currency == currency],
            )
    logger.info("released %s: %d lock(s)", tx_id, row["freed"])
    return Outcome(selection, tokens, changed=changed, locks_removed=row["freed"])


def extend_selection(
    tx_id: str,
    seconds: float | None = None,
    *,
    namespace: str = "",
    wallets: Sequence[str] | None = None,
) -> Outcome:
    """Renew the lease of every lock of the selection, capped at its maximum lifetime."""
    options = knobs()
    params = _params(namespace, tx_id, wallets)
    params.update(
        seconds=float(seconds if seconds is not None else options.lease_seconds),
        max_lease=options.max_lease_seconds,
    )
    row = _run(lifecycle.EXTEND_STATEMENTS[_durable()], params)
    verdict, selection, tokens = _selection(row, namespace, tx_id)
    if verdict == "spent":
        raise AlreadySpent(f"selection {tx_id} was spent")
    if verdict == "released":
        raise NotLocked(f"selection {tx_id} was released")
    if verdict == "lease_lost":
        raise LeaseLost(
            f"selection {tx_id} lost {row['missing']} lock(s) before renewal; select again"
        )
    _expect_ok(verdict)
    selection.expires_at = row["expires_at"]
    return Outcome(selection, tokens)


def _params(namespace: str | None, tx_id: str, wallets: Sequence[str] | None) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "tx_id": tx_id,
        "wallets": None if wallets is None else list(wallets),
    }


def _durable() -> bool:
    # Inside a caller's transaction the statement's commit is the caller's: leave it alone.
    return knobs().durable_leases or connection.in_atomic_block


_COLUMNS: dict[str, list[str]] = {}


def _run(statement: str, params: dict[str, Any], may_fail: bool = False) -> dict[str, Any]:
    """Run one lifecycle statement; return its row by column name.

    On its own it is its own transaction. Inside a caller's transaction, a statement that
    may fail runs in a savepoint, so that its failure does not abort the caller's work.
    """
    if may_fail and connection.in_atomic_block:
        with transaction.atomic():
            cursor = db.execute(statement, params)
    else:
        cursor = db.execute(statement, params)
    row = db.one(cursor)
    names = _COLUMNS.get(statement)
    if names is None:  # a statement's columns never change; psycopg rebuilds them per access
        names = _COLUMNS[statement] = [column.name for column in cursor.description or ()]
    return dict(zip(names, row, strict=True))


def _selection(
    row: dict[str, Any], namespace: str, tx_id: str
) -> tuple[str, Selection, list[TokenRow]]:
    """Build the selection and its tokens from a lifecycle statement's row."""
    verdict = row["verdict"]
    if verdict == "not_found":
        raise SelectionNotFound(f"no selection for transaction {tx_id}")
    wallet = row["wallet"]
    tokens = [
        TokenRow(i, t, n, wallet, c, Decimal(q), namespace) for i, t, n, q, c in row["tokens"] or ()
    ]
    status = {
        "ok": Selection.Status.LOCKED,
        "spent": Selection.Status.SPENT,
        "released": Selection.Status.RELEASED,
    }.get(verdict, Selection.Status.LOCKED)
    selection = Selection(
        id=row["id"],
        namespace=namespace,
        tx_id=tx_id,
        wallet=row["wallet"],
        currency=row["currency"],
        quantity=row["quantity"],
        total=row["total"],
        fence=row["fence"],
        token_ids=[t.id for t in tokens],
        status=status,
        created_at=row["created_at"],
        expires_at=row.get("expires_at"),
        spent_at=row.get("spent_at"),
        released_at=row.get("released_at"),
        strategy=row.get("strategy") or "random",
        legs=row.get("legs"),
    )
    selection.held_tokens = tokens
    return verdict, selection, tokens


def _spent_selection(selection: Selection, spent_at, outputs: list[TokenRow]) -> Selection:
    selection.status, selection.spent_at = Selection.Status.SPENT, spent_at
    selection.created_outputs = outputs
    return selection


def _expect_ok(verdict: str) -> None:
    if verdict != "ok":
        raise RuntimeError(f"unexpected verdict {verdict!r}")


def _outputs_match(stored: list[TokenRow], outputs: Sequence[TokenSpec]) -> bool:
    return {(t.index, t.wallet, t.currency, t.quantity) for t in stored} == {
        (o.index, o.wallet, o.currency, Decimal(o.quantity)) for o in outputs
    }


def selection_tokens(selection: Selection) -> list[Token]:
    """Return the selection's tokens in selection order."""
    by_id = Token.objects.in_bulk(selection.token_ids)
    return [by_id[pk] for pk in selection.token_ids if pk in by_id]
