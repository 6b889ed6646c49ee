"""Operators' changes to one selection's hold (release, extend), each recorded in the lock audit.

A selection is addressed by its identity: the row an operator picked, whose (namespace, tx id)
the statements look up. A tx id alone may name selections of several clients in one wallet.
"""

from __future__ import annotations

from django.db import transaction

from locks.models import LockAudit, Selection
from locks.selections import Outcome, extend_selection, release_selection


def release_audited(user, selection: Selection, where: str) -> int:
    """Release ``selection`` and audit it as done by ``user`` from ``where``; return the locks
    removed."""
    # The audit row commits with the release it describes, or not at all.
    with transaction.atomic():
        outcome = release_selection(
            selection.tx_id, namespace=selection.namespace, wallets=[selection.wallet]
        )
        audit(user, "release_selection", outcome, outcome.locks_removed, f"released {where}")
    return outcome.locks_removed


def extend_audited(user, selection: Selection, seconds: float, where: str) -> Outcome:
    """Renew ``selection``'s lease by ``seconds`` and audit it as done by ``user`` from
    ``where``."""
    with transaction.atomic():
        outcome = extend_selection(
            selection.tx_id, seconds, namespace=selection.namespace, wallets=[selection.wallet]
        )
        audit(
            user,
            "extend_selection",
            outcome,
            len(outcome.selection.token_ids),
            f"extended by {seconds:g} s {where}",
        )
    return outcome


def audit(user, action: str, outcome: Outcome, count: int, reason: str) -> LockAudit:
    selection = outcome.selection
    return LockAudit.objects.create(
        user=user,
        action=action,
        # The tx id alone does not name the selection: other clients may use the same one.
        reason=f"{reason} (selection {selection.pk}, namespace {selection.namespace!r})",
        count=count,
        spender_tx_ids=[selection.tx_id],
        token_ids=list(selection.token_ids),
    )
