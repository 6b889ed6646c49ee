"""Select several currencies of one wallet for one transaction: every leg locked, or none."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import InvalidRequest, SherdlockError
from .round import validate
from .selector import Selector
from .strategies import Strategy
from .types import Selection

log = logging.getLogger(__name__)

MIN_LEGS = 2
MAX_LEGS = 8


@dataclass(frozen=True, slots=True)
class Leg:
    """One currency of a multi-currency selection and the quantity it needs."""

    currency: str
    quantity: int


def ordered_legs(legs: Iterable[Leg | tuple[str, int]]) -> tuple[Leg, ...]:
    """Check the legs of a request and return them in currency order.

    Every request locks its legs in this one order, so two requests that need the same
    currencies never each hold what the other needs next because of the order they asked in.
    """
    found = tuple(leg if isinstance(leg, Leg) else Leg(*leg) for leg in legs)
    if not MIN_LEGS <= len(found) <= MAX_LEGS:
        raise InvalidRequest(f"a selection takes {MIN_LEGS} to {MAX_LEGS} legs, got {len(found)}")
    currencies = [leg.currency for leg in found]
    if len(set(currencies)) != len(currencies):
        raise InvalidRequest(f"each currency may be one leg only, got {currencies}")
    for leg in found:
        # Checked before any leg is locked (the selector checks each leg again).
        validate("-", "-", leg.currency, leg.quantity, None)
    return tuple(sorted(found, key=lambda leg: leg.currency))


def select_legs(
    selector: Selector,
    tx_id: str,
    wallet: str,
    legs: Iterable[Leg | tuple[str, int]],
    *,
    patient: bool = True,
    strategy: Strategy | None = None,
) -> tuple[Selection, ...]:
    """Lock every leg of `wallet` for `tx_id` under one fence; return them in currency order.

    Each leg is selected as `Selector.select` selects one currency (the same `strategy` for
    each). When a leg fails, the legs locked before it are released and its error is raised
    with `leg` set to its currency: on any failure this call holds no lock.
    """
    done: list[Selection] = []
    fence: int | None = None
    current = None
    try:
        for current in ordered_legs(legs):
            picked = selector.select(
                tx_id,
                wallet,
                current.currency,
                current.quantity,
                fence,
                patient=patient,
                strategy=strategy,
            )
            done.append(picked)
            fence = picked.fence
    except BaseException as exc:
        if isinstance(exc, SherdlockError) and current is not None:
            exc.leg = current.currency  # type: ignore[attr-defined]
        release_legs(selector, done, exc)
        raise
    return tuple(done)


def release_legs(
    selector: Selector, legs: Iterable[Selection], exc: BaseException | None = None
) -> None:
    """Release the locks of `legs`, last first.

    With `exc` (the failure being answered) an unlock that fails is noted on it, and those
    locks expire with their lease; without it the unlock's error is raised.
    """
    for picked in reversed(list(legs)):
        try:
            selector.release(picked)
        except Exception as unlock_exc:
            if exc is None:
                raise
            exc.add_note(f"releasing leg {picked.key} of {picked.tx_id!r} failed: {unlock_exc!r}")
            log.warning(
                "could not release leg %s of %r; its locks expire with their lease",
                picked.key,
                picked.tx_id,
                exc_info=unlock_exc,
            )
