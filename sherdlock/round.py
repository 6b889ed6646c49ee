"""One selection round's state, and the checks a selection request passes first."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from .errors import (
    ClaimRefused,
    FundsLocked,
    InsufficientFunds,
    InvalidRequest,
    SelectionTooLarge,
)
from .strategies import DEFAULT, DESCENDING, MAX_EXAMINED, Strategy
from .turns import Turn
from .types import MAX_QUANTITY, Candidate, Claim, SelectionStats, Supply, WalletKey

if TYPE_CHECKING:
    from .cache import TokenCache
    from .interfaces import TokenStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Round:
    """Locks gathered by one selection round, and how to describe it to the store."""

    tx_id: str
    key: WalletKey
    quantity: int
    fence: int | None
    stats: SelectionStats
    locked: list[Candidate] = field(default_factory=list)
    ids: set[int] = field(default_factory=set)
    total: int = 0
    expiries: list[object] = field(default_factory=list)
    # Ids sent in a locking call whose outcome is unknown if it raised; None when the
    # call (fetch_and_lock) could have locked ids we never saw.
    pending: list[int] | None = field(default_factory=list)
    recording: bool = False
    namespace: str = ""
    record: object | None = None
    strategy: Strategy = DEFAULT
    # The selection's wait for funds and its key's turn (sherdlock.turns), kept across rounds.
    turn: Turn = field(default_factory=lambda: Turn(0.0))

    def claim(
        self, contested: bool = False, largest_first: bool = False, spare: bool = True
    ) -> Claim:
        """Describe this round to the store (``contested``, ``spare``: see Claim).

        ``largest_first``: a fetch in descending order of quantity, whatever the strategy's
        order (after a random fetch came back short, FetchResult.short_batch). A contested
        fetch of a newcomer to its key yields to the key's turn (Claim.yield_to_turn).
        """
        return Claim(
            self.tx_id,
            self.key,
            self.quantity,
            self.fence,
            tuple(self.locked),
            min(self.expiries) if self.expiries else None,  # type: ignore[type-var]
            self.recording,
            self.namespace,
            DESCENDING if largest_first else self.strategy.order,
            self.strategy.name,
            contested,
            spare,
            contested and self.turn.newcomer,
        )

    def adopt(self, fence: int | None, record: object | None) -> None:
        """Take the fence a store call drew (or confirmed) and what it recorded."""
        if fence is not None:
            if self.fence is not None and fence != self.fence:
                raise RuntimeError(f"store answered fence {fence} for fence {self.fence}")
            self.fence = fence
        if record is not None:
            self.record = record

    def fresh(self, strategy: Strategy | None = None) -> Round:
        """Return a new round of the same selection (same fence and stats), holding nothing."""
        return Round(
            self.tx_id,
            self.key,
            self.quantity,
            self.fence,
            self.stats,
            recording=self.recording,
            namespace=self.namespace,
            strategy=strategy if strategy is not None else self.strategy,
            turn=self.turn,
        )

    def abort(self, exc: BaseException, store: TokenStore, cache: TokenCache) -> None:
        """Release the locks of this aborted round, keeping `exc` as the error to report."""
        known = list(self.ids)
        if isinstance(exc, ClaimRefused):
            if exc.locked_nothing:
                self.pending = []  # the refusing call took nothing
            if self.fence is None:
                self.fence = exc.fence
        if self.pending is None:
            ids: list[int] | None = None  # a fetch failed mid-way: release the whole fence
        else:
            ids = sorted(set(known).union(self.pending))
        try:
            if self.fence is not None and (ids is None or ids):
                store.unlock(self.tx_id, self.fence, ids, self.key.wallet)
        except Exception as unlock_exc:
            # The original failure is what the caller must see; the locks expire with
            # their lease.
            exc.add_note(
                f"releasing locks of {self.tx_id!r} fence {self.fence} failed: {unlock_exc!r}"
            )
            log.warning(
                "could not release locks of %r fence %s; they expire with their lease",
                self.tx_id,
                self.fence,
                exc_info=unlock_exc,
            )
        finally:
            # Only ids we recorded were held by us; others may be held by another selection.
            cache.unhold(known)

    def bound(self, too_many: bool = False) -> None:
        """Raise SelectionTooLarge if covering the quantity takes more than MAX_EXAMINED tokens.

        ``too_many``: a fetch found that the wallet's largest free tokens cannot. Otherwise the
        round holds that many already: small tokens taken first (smallest_first) may run up to
        the bound before they cover it, since each fetch is bounded and their number is not.
        """
        if too_many or (self.total < self.quantity and len(self.locked) >= MAX_EXAMINED):
            raise SelectionTooLarge(self.key, self.quantity, MAX_EXAMINED, stats=self.stats)

    def raise_short(self, supply: Supply, retry_after: float) -> NoReturn:
        """Raise InsufficientFunds if `supply` cannot cover the quantity, else FundsLocked."""
        self.bound(not supply.complete and supply.unspent < self.quantity)
        if supply.unspent < self.quantity:
            raise InsufficientFunds(self.key, self.quantity, supply.available, stats=self.stats)
        raise FundsLocked(
            self.key, self.quantity, supply.available, retry_after=retry_after, stats=self.stats
        )

    def give_back(self) -> list[int]:
        """Forget every token this round locked (the caller unlocks them); return their ids."""
        ids = [c.token_id for c in self.locked]
        self.locked.clear()
        self.ids.clear()
        self.total = 0
        self.expiries.clear()
        return ids


def validate(
    tx_id: object, wallet: object, currency: object, quantity: object, fence: object
) -> WalletKey:
    """Check selection arguments and return the wallet key."""
    for name, value in (("tx_id", tx_id), ("wallet", wallet), ("currency", currency)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"{name} must be a non-empty string, got {value!r}")
    if type(quantity) is not int:
        raise InvalidRequest(f"quantity must be an int, got {type(quantity).__name__}")
    if not 0 < quantity <= MAX_QUANTITY:
        raise InvalidRequest(f"quantity must be in [1, 2**64-1], got {quantity}")
    if fence is not None and (type(fence) is not int or fence < 0):
        raise InvalidRequest(f"fence must be a non-negative int, got {fence!r}")
    assert isinstance(wallet, str) and isinstance(currency, str)
    return WalletKey(wallet, currency)
