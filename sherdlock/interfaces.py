"""Ports the selector depends on: the token/lock store, a clock and a sleeper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .types import Candidate, Claim, FetchResult, LockOutcome, Supply, WalletKey


@runtime_checkable
class TokenStore(Protocol):
    """Read unspent tokens and keep the shared lock table, the source of truth.

    Locking calls work for a `Claim`: they lock for its transaction under its fence and, when
    its fence is None, draw a new fence in the same round trip and report it (fences are
    strictly increasing across every replica, one per selection, so a late unlock of an
    aborted selection never removes the locks of a newer one).
    """

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        """Read up to `limit` free tokens of the claim's key and lock some reaching its need.

        Free means unspent and without a live lock. Rows come in a fresh random permutation
        on every call so replicas do not all race for the same tokens, and rows another
        transaction is touching right now are skipped rather than waited for (`claim.order`
        other than random: rows in that order of quantity, ties at random). Lock the shortest
        prefix whose quantities reach `claim.need`; return the other rows unlocked as `spare`
        (a store may leave them out when `claim.spare` is False).
        If every free token of the key together cannot reach the need, lock nothing and report
        the key's totals as `shortfall`. If `limit` random rows do not reach it (more free
        tokens may), lock nothing and set `short_batch`: the caller fetches in descending order
        next. Rows in quantity order that do not reach it are all locked if more free tokens
        exist. Set `exhausted` when fewer than `limit` rows were found, and `conflicts` to the
        rows it tried to lock but lost to a concurrent selection. With `claim.yield_to_turn`
        lock nothing and set `turn_taken` while another selection holds or asks for the key's
        turn (see `await_turn`). Raise only on failures that are not contention (connection
        lost, ...).
        """
        ...

    def try_lock(self, claim: Claim, candidates: Sequence[Candidate]) -> LockOutcome:
        """Lock those candidates that are still unspent and not live-locked, in one round trip.

        Expired locks of other spenders may be taken over. A candidate locked by anyone
        (including this transaction), spent, or being touched by another transaction right
        now is simply not granted; that is never an error. Any other failure raises and is
        not contention. Granted candidates carry the store's quantities.
        """
        ...

    def candidates(
        self, key: WalletKey, smallest: int, largest: int, cap: int | None = None
    ) -> list[Candidate]:
        """Read free tokens of `key` without locking them: the window of a choosing strategy.

        Up to `smallest` of the smallest and up to `largest` of the largest whose quantity is
        at most `cap` (any, if None), each without duplicates; ties between equal quantities
        are broken at random. Order is not significant.
        """
        ...

    def unlock(
        self,
        tx_id: str,
        fence: int,
        token_ids: Sequence[int] | None = None,
        wallet: str | None = None,
    ) -> int:
        """Delete the lock rows of `tx_id` under `fence` (only `token_ids` if given); count them.

        Rows of other transactions or other fences are never touched, even for the same ids.
        `wallet`, when given, is the wallet the rows lock tokens of: a store partitioned by
        wallet then looks in that wallet's part only.
        """
        ...

    def supply(self, key: WalletKey, tx_id: str) -> Supply:
        """Return unspent totals of `key` and the part held by live locks of other spenders."""
        ...

    def take_turn(self, key: WalletKey, wait: float) -> bool:
        """Take the turn of `key` for the calling selection; return whether it was taken.

        Wait at most `wait` seconds behind the selection that holds it and those that asked
        before (sherdlock.turns). A store may decline every turn: its newcomers never wait.
        """
        ...

    def await_turn(self, key: WalletKey, wait: float) -> bool:
        """Wait at most `wait` seconds until nobody holds or waits for the turn of `key`.

        Return whether that came to pass within `wait`.
        """
        ...

    def end_turn(self, key: WalletKey) -> None:
        """Give back the turn of `key` that the calling selection took."""
        ...


@runtime_checkable
class Clock(Protocol):
    """Tell monotonic time in seconds."""

    def __call__(self) -> float:
        """Return the current monotonic time in seconds."""
        ...


@runtime_checkable
class Sleeper(Protocol):
    """Block the calling thread for a while."""

    def __call__(self, seconds: float, /) -> None:
        """Sleep for `seconds` (positional, as `time.sleep` takes it)."""
        ...
