"""Ports the selector depends on: the token/lock store, a clock and a sleeper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .types import Candidate, FetchResult, LockOutcome, Supply, WalletKey


@runtime_checkable
class TokenStore(Protocol):
    """Read unspent tokens and keep the shared lock table, the source of truth."""

    def next_fence(self) -> int:
        """Return a fencing token strictly greater than any returned before; one per selection.

        The fence lets the store tell apart two selections of the same transaction, so a
        late unlock of an aborted selection never removes the locks of a newer one.
        """
        ...

    def fetch_and_lock(
        self, key: WalletKey, tx_id: str, fence: int, need: int, limit: int
    ) -> FetchResult:
        """Read up to `limit` free tokens of `key` and lock a prefix of them reaching `need`.

        Free means unspent and without a live lock. Rows come in a fresh random permutation
        on every call so replicas do not all race for the same tokens, and rows another
        transaction is touching right now are skipped rather than waited for. Lock, for
        `tx_id` under `fence`, the shortest prefix whose quantities sum to at least `need`
        (all rows if they do not reach it); return the remaining rows unlocked as `spare`.
        Set `exhausted` when fewer than `limit` rows were found, and `conflicts` to the rows
        it tried to lock but lost to a concurrent selection. Raise only on failures that are
        not contention (connection lost, ...).
        """
        ...

    def try_lock(self, tx_id: str, fence: int, candidates: Sequence[Candidate]) -> LockOutcome:
        """Lock those candidates that are still unspent and not live-locked, in one round trip.

        Expired locks of other spenders may be taken over. A candidate locked by anyone
        (including this transaction), spent, or being touched by another transaction right
        now is simply not granted; that is never an error. Any other failure raises and is
        not contention. Granted candidates carry the store's quantities.
        """
        ...

    def unlock(self, tx_id: str, fence: int, token_ids: Sequence[int] | None = None) -> int:
        """Delete the lock rows of `tx_id` under `fence` (only `token_ids` if given); count them.

        Rows of other transactions or other fences are never touched, even for the same ids.
        """
        ...

    def supply(self, key: WalletKey, tx_id: str) -> Supply:
        """Return unspent totals of `key` and the part held by live locks of other spenders."""
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

    def __call__(self, seconds: float) -> None:
        """Sleep for `seconds`."""
        ...
