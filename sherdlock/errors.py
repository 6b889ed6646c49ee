"""Errors raised by the token selector; one hierarchy rooted at SherdlockError."""

from __future__ import annotations

from typing import Any

from .types import SelectionStats, WalletKey


class SherdlockError(Exception):
    """Token selection failed."""

    def __init__(self, message: str | None = None, *, stats: SelectionStats | None = None):
        super().__init__(message or self.__doc__)
        self.stats = stats

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments defeat the default pickling of exceptions, which
        # task queues rely on to ship failures between processes.
        return (_rebuild, (type(self), self.__dict__.copy(), self.args))


def _rebuild(cls: type[SherdlockError], state: dict[str, Any], args: tuple[Any, ...]) -> Any:
    """Recreate a pickled error without calling its constructor."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class InsufficientFunds(SherdlockError):
    """The wallet does not hold enough unspent tokens."""

    def __init__(
        self,
        key: WalletKey,
        requested: int,
        available: int | None,
        *,
        stats: SelectionStats | None = None,
    ):
        super().__init__(
            f"insufficient funds in {key}: requested {requested}, available {available}",
            stats=stats,
        )
        self.key = key
        self.requested = requested
        # Unspent quantity not held by other spenders; None when not known. The selector
        # always knows it.
        self.available = available


class FundsLocked(SherdlockError):
    """Enough unspent tokens exist but other transactions hold them."""

    def __init__(
        self,
        key: WalletKey,
        requested: int,
        available: int | None,
        retry_after: float,
        *,
        stats: SelectionStats | None = None,
    ):
        super().__init__(
            f"funds in {key} are locked by other transactions: requested {requested}, "
            f"available {available}; retry after {retry_after:.3f}s",
            stats=stats,
        )
        self.key = key
        self.requested = requested
        self.available = available  # as for InsufficientFunds
        # Seconds after which a new attempt has a fair chance: see SelectorConfig.retry_after.
        self.retry_after = retry_after


class ClaimRefused(SherdlockError):
    """The store refused to record this selection: its transaction id is already taken.

    Raised for recording claims only. `locked_nothing` tells that the refusing call locked
    nothing, so there is nothing of that call to release; otherwise `fence` names the fence
    its locks are under (the call may have drawn it).
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        locked_nothing: bool = True,
        fence: int | None = None,
        stats: SelectionStats | None = None,
    ):
        super().__init__(message, stats=stats)
        self.locked_nothing = locked_nothing
        self.fence = fence


class SelectionTooLarge(SherdlockError):
    """Covering the quantity would take more tokens than one selection may examine or lock."""

    def __init__(
        self,
        key: WalletKey,
        requested: int,
        limit: int,
        *,
        stats: SelectionStats | None = None,
    ):
        super().__init__(
            f"covering {requested} in {key} would take more than {limit} tokens (the most one "
            "selection examines), or more than the wallet holds: ask for less, or consolidate "
            "the wallet's tokens first",
            stats=stats,
        )
        self.key = key
        self.requested = requested
        self.limit = limit


class InvalidRequest(SherdlockError, ValueError):
    """The selection request is malformed."""


class NoMatch(SherdlockError):
    """The free tokens cover the quantity, but no set of them meets the strategy's terms."""

    def __init__(
        self,
        key: WalletKey,
        requested: int,
        strategy: str,
        message: str | None = None,
        *,
        stats: SelectionStats | None = None,
    ):
        super().__init__(
            message or f"no selection in {key} meets the {strategy} strategy", stats=stats
        )
        self.key = key
        self.requested = requested
        self.strategy = strategy


class NoExactMatch(NoMatch):
    """No set of the free tokens in the search window sums to the quantity within max_change."""


class TooManyInputs(NoMatch):
    """Covering the quantity needs more tokens than the request's max_tokens."""
