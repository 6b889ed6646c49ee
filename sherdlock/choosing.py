"""One round of a choosing strategy (exact, consolidate): read a window, choose, lock, complete.

The random and ordered strategies lock a covering prefix of what the cache or a fetch offers.
A choosing strategy needs to see its candidates together, so it reads a window of free tokens
without locking them (``TokenStore.candidates``), chooses a set from it, and locks that set
with ``try_lock``, as a cached batch is locked: tokens another selection holds meanwhile are
not granted (never waited for), and leave the round's pool. A partial grant is completed from
a fresh window on the same terms (what remains of the quantity, of the inputs allowed); when
it cannot be, the round gives its locks back and chooses again. Every choice that loses tokens
counts as a stall; past ``max_retries`` the round ends as contention (FundsLocked), which the
selector's backoff handles as for any strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import NoExactMatch, TooManyInputs
from .round import Round
from .strategies import EXACT

if TYPE_CHECKING:
    from .selector import Selector


def gather(selector: Selector, rnd: Round, patient: bool) -> None:
    """Lock a set chosen by the round's strategy, until the quantity is met; else raise."""
    store, config, stats, strategy = selector.store, selector.config, rnd.stats, rnd.strategy
    lost: set[int] = set()  # chosen, not granted: another selection holds (or spent) them
    stalled = 0
    while rnd.total < rnd.quantity:
        need = rnd.quantity - rnd.total
        smallest, largest, cap = strategy.window(need, config.fetch_limit)
        window = store.candidates(rnd.key, smallest, largest, cap)
        stats.fetches += 1
        pool = [
            c
            for c in window
            if c.token_id not in rnd.ids
            and c.token_id not in lost
            and not selector.cache.is_held(c.token_id)
        ]
        # The strategies break ties in the pool's order: shuffled, replicas that read the same
        # window of equal tokens choose different ones.
        selector._rng.shuffle(pool)
        chosen = strategy.choose(pool, need, len(rnd.locked))
        if chosen is None:
            if rnd.locked:
                # What the round holds cannot be completed on these terms: start over.
                give_back(selector, rnd)
                continue
            unmet(selector, rnd, lost)
        assert chosen is not None  # unmet() raised otherwise
        missed = selector._try_lock(rnd, chosen)
        if missed:
            lost |= missed
            stalled += 1
            if stalled > config.max_retries:
                rnd.raise_short(store.supply(rnd.key, rnd.tx_id), selector.config.retry_after)


def give_back(selector: Selector, rnd: Round) -> None:
    """Unlock what the round holds so far and forget it; the fence stays the round's."""
    ids = rnd.give_back()
    if not ids or rnd.fence is None:
        return
    rnd.pending = ids  # should the unlock fail, the abort releases them
    selector.store.unlock(rnd.tx_id, rnd.fence, ids, rnd.key.wallet)
    rnd.pending = []
    selector.cache.unhold(ids)


def unmet(selector: Selector, rnd: Round, lost: set[int]) -> None:
    """Raise why no set could be chosen: short, held by others, or the strategy's terms."""
    supply = selector.store.supply(rnd.key, rnd.tx_id)
    if supply.available < rnd.quantity or lost:
        # Short, or others hold tokens a set might need: a retry may find one.
        rnd.raise_short(supply, selector.config.retry_after)
    strategy = rnd.strategy
    if strategy.name == EXACT:
        raise NoExactMatch(
            rnd.key,
            rnd.quantity,
            strategy.name,
            f"no set of the free tokens of {rnd.key} sums to {rnd.quantity} "
            f"with change at most {strategy.change_allowed}",
            stats=rnd.stats,
        )
    raise TooManyInputs(
        rnd.key,
        rnd.quantity,
        strategy.name,
        f"covering {rnd.quantity} in {rnd.key} takes more than {strategy.inputs_allowed} tokens",
        stats=rnd.stats,
    )
