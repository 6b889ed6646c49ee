"""A selection's life after it was made: read it, spend it (with outputs), release it, extend it.

Each is one statement (``locks.sql.lifecycle``) that checks fence and lease, idempotent on a
repeat, and raises errors of one hierarchy (``sherdlock.SherdlockError``) that the API
translates to HTTP in one place. Selections are found by (namespace, tx id) within the caller's
wallets (``wallets`` None: every wallet); the answers are built from what the statements
returned, with no second read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction

from common import db
from common.knobs import knobs
from locks.errors import (
    AlreadySpent,
    LeaseLost,
    NotLocked,
    OutputConflict,
    SelectionNotFound,
    ValueNotConserved,
)
from locks.holds import HoldTimes
from locks.models import Selection
from locks.replica import get_selector
from locks.sql import lifecycle
from sherdlock import (
    Candidate,
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


def get_selection(
    tx_id: str, *, namespace: str | None = "", wallets: Sequence[str] | None = None
) -> Selection:
    """Return the selection of ``tx_id`` with its tokens and lock state, in one statement.

    ``namespace`` None looks in every namespace (operators), the oldest match first. Raise
    SelectionNotFound if there is none the caller may see.
    """
    statement = lifecycle.READ_ANY if namespace is None else lifecycle.READ
    row = _run(statement, _params(namespace, tx_id, wallets))
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
    selection (same fence) and unexpired, checked under the token and lock rows' locks.
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
    selector = get_selector()
    selector.forget(selection.token_ids)
    # The outputs are free tokens this replica knows of already: the change of a busy wallet
    # keeps its queue from running dry.
    selector.issued(
        (WalletKey(t.wallet, t.currency), Candidate(t.id, int(t.quantity))) for t in created
    )
    _held(selection, spent_at)
    logger.debug("spent %s: %d token(s) in, %d output(s)", tx_id, len(tokens), len(created))
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
    logger.debug("released %s: %d lock(s)", tx_id, row["freed"])
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
    selection = Selection.answered(
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
