"""Errors of the selection lifecycle beyond the selector's own (spend, release, extend)."""

from __future__ import annotations

from sherdlock import SherdlockError


class SelectionError(SherdlockError):
    """A selection cannot do what was asked."""

    code = "selection_error"


class SelectionNotFound(SelectionError):
    """No selection has this transaction id."""

    code = "not_found"


class TxIdConflict(SelectionError):
    """This transaction id already names a different selection."""

    code = "tx_id_conflict"


class SelectionInProgress(SelectionError):
    """A selection with this transaction id is being made right now; retry shortly."""

    code = "selection_in_progress"


class AlreadySpent(SelectionError):
    """The selection has been spent."""

    code = "already_spent"


class NotLocked(SelectionError):
    """The selection was released; its tokens are no longer locked for it."""

    code = "not_locked"


class LeaseLost(SelectionError):
    """The selection's locks expired or were taken over; it can no longer be spent."""

    code = "lease_lost"


class ValueNotConserved(SelectionError):
    """The outputs do not add up to the selected total in the selection's currency."""

    code = "value_not_conserved"


class OutputConflict(SelectionError):
    """An output token with this identity already exists."""

    code = "output_conflict"
