"""Errors of the selection lifecycle beyond the selector's own (spend, release, extend).

Their HTTP status and code are in the error table, ``config.exceptions.ERRORS``.
"""

from __future__ import annotations

from sherdlock import SherdlockError


class SelectionError(SherdlockError):
    """A selection cannot do what was asked."""


class SelectionNotFound(SelectionError):
    """No selection has this transaction id."""


class TxIdConflict(SelectionError):
    """This transaction id already names a different selection."""


class AlreadySpent(SelectionError):
    """The selection has been spent."""


class NotLocked(SelectionError):
    """The selection was released; its tokens are no longer locked for it."""


class LeaseLost(SelectionError):
    """The selection's locks expired or were taken over; it can no longer be spent."""


class ValueNotConserved(SelectionError):
    """The outputs do not add up to the selected total in the selection's currency."""


class OutputConflict(SelectionError):
    """An output token with this identity already exists."""
