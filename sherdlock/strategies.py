"""Selection strategies: which free tokens a selection locks, and in which order it tries them.

Every strategy runs inside the same protocol (cache, lock by insert, refetch, backoff, fences):
it only decides the order of candidates, or, for the choosing strategies, the set to lock.

- ``random`` (the default): a random covering prefix; fair across replicas, makes change.
- ``smallest_first``: ascending by quantity, shuffled within runs of equal quantity, so small
  requests take small tokens while equal candidates stay spread across replicas.
- ``fewest_tokens``: largest first: the fewest inputs.
- ``exact``: Branch and Bound over a bounded window (the largest free tokens not above
  quantity + max_change) for a set whose total is the quantity, or exceeds it by at most
  ``max_change``; the smallest change found wins, and a changeless set ends the search.
- ``consolidate``: the smallest tokens, up to ``max_tokens`` of them, as long as they cover the
  quantity (sweeps dust into one change output); if the smallest cannot, the largest of the
  window replace the biggest of them until the set covers.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import InvalidRequest
from .types import MAX_QUANTITY, Candidate

RANDOM = "random"
SMALLEST_FIRST = "smallest_first"
FEWEST_TOKENS = "fewest_tokens"
EXACT = "exact"
CONSOLIDATE = "consolidate"
STRATEGIES = (RANDOM, SMALLEST_FIRST, FEWEST_TOKENS, EXACT, CONSOLIDATE)

# The order in which a fetch reads and a cache offers candidates.
ORDER_RANDOM = "random"
ASCENDING = "ascending"
DESCENDING = "descending"
ORDERS = (ORDER_RANDOM, ASCENDING, DESCENDING)

# Bounds of the choosing strategies: the candidates `exact` searches (Branch and Bound is
# exponential in the worst case, so both the window and the nodes visited are capped), and the
# inputs `consolidate` may take (a spend's lists hold at most 1000 items).
EXACT_WINDOW = 64
BNB_TRIES = 100_000
MAX_TOKENS = 1000
DEFAULT_MAX_TOKENS = 100
# The most free tokens a fetch examines to find what covers a need (the wallet's largest
# first), and the most tokens one selection locks, whatever its strategy: a selection that
# would need more is refused (SelectionTooLarge) instead of reading and probing every token of
# its wallet, a cost that grows with the wallet and holds a pooled connection all the while.
# The same as MAX_TOKENS, so that no strategy's selection may hold fewer tokens than a
# consolidation's.
MAX_EXAMINED = MAX_TOKENS


@dataclass(frozen=True, slots=True)
class Strategy:
    """How one selection picks its tokens; validated on creation (InvalidRequest)."""

    name: str = RANDOM
    # exact: how much the selected total may exceed the quantity (default 0: changeless only).
    max_change: int | None = None
    # consolidate: the most tokens the selection may lock (default DEFAULT_MAX_TOKENS).
    max_tokens: int | None = None
    # exact: select as `random` when no set is within max_change, instead of failing.
    fallback: bool = False

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise InvalidRequest(
                f"strategy must be one of {', '.join(STRATEGIES)}, got {self.name!r}"
            )
        if self.max_change is not None:
            if self.name != EXACT:
                raise InvalidRequest("max_change applies to the exact strategy only")
            if type(self.max_change) is not int or not 0 <= self.max_change <= MAX_QUANTITY:
                raise InvalidRequest(f"max_change must be in [0, 2**64-1], got {self.max_change!r}")
        if self.max_tokens is not None:
            if self.name != CONSOLIDATE:
                raise InvalidRequest("max_tokens applies to the consolidate strategy only")
            if type(self.max_tokens) is not int or not 1 <= self.max_tokens <= MAX_TOKENS:
                raise InvalidRequest(
                    f"max_tokens must be in [1, {MAX_TOKENS}], got {self.max_tokens!r}"
                )
        if type(self.fallback) is not bool:
            raise InvalidRequest(f"fallback must be a bool, got {self.fallback!r}")
        if self.fallback and self.name != EXACT:
            raise InvalidRequest("fallback applies to the exact strategy only")

    @property
    def order(self) -> str:
        """Return the order in which this strategy reads candidates."""
        if self.name in (SMALLEST_FIRST, CONSOLIDATE):
            return ASCENDING
        if self.name in (FEWEST_TOKENS, EXACT):
            return DESCENDING
        return ORDER_RANDOM

    @property
    def chooses(self) -> bool:
        """Tell whether this strategy chooses a set from a window rather than a prefix."""
        return self.name in (EXACT, CONSOLIDATE)

    @property
    def change_allowed(self) -> int:
        """Return how far the total of an exact selection may exceed its quantity."""
        return self.max_change or 0

    @property
    def inputs_allowed(self) -> int:
        """Return the most tokens a consolidating selection may lock."""
        return self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS

    def window(self, need: int, fetch_limit: int) -> tuple[int, int, int | None]:
        """Return what a choosing strategy reads: (smallest, largest, largest's cap)."""
        if self.name == EXACT:
            return 0, EXACT_WINDOW, need + self.change_allowed
        inputs = self.inputs_allowed
        return max(fetch_limit, inputs), inputs, None

    def choose(self, pool: Sequence[Candidate], need: int, held: int = 0) -> list[Candidate] | None:
        """Return the tokens of `pool` to lock for `need` (with `held` tokens locked already).

        None when no set of the pool meets this strategy's terms.
        """
        if self.name == EXACT:
            return branch_and_bound(pool, need, self.change_allowed)
        if self.name == CONSOLIDATE:
            return consolidate(pool, need, self.inputs_allowed - held)
        chosen = prefix(arrange(pool, self.order), need)
        return chosen if sum(c.quantity for c in chosen) >= need else None


DEFAULT = Strategy()


def arrange(
    candidates: Iterable[Candidate], order: str, rng: random.Random | None = None
) -> list[Candidate]:
    """Return `candidates` in `order`: shuffled, or sorted by quantity with ties shuffled.

    Shuffling within equal quantities keeps replicas that read the same tokens from all trying
    the same one first. Without `rng` the input order breaks ties (it is already shuffled).
    """
    out = list(candidates)
    if rng is not None:
        rng.shuffle(out)
    if order == ASCENDING:
        out.sort(key=lambda c: c.quantity)  # stable: ties keep their shuffled order
    elif order == DESCENDING:
        out.sort(key=lambda c: c.quantity, reverse=True)
    elif order != ORDER_RANDOM:
        raise ValueError(f"unknown order {order!r}")
    return out


def prefix(candidates: Iterable[Candidate], need: int) -> list[Candidate]:
    """Return the shortest prefix of `candidates` reaching `need` (all of them if none does)."""
    chosen: list[Candidate] = []
    reached = 0
    for candidate in candidates:
        if reached >= need:
            break
        chosen.append(candidate)
        reached += candidate.quantity
    return chosen


def branch_and_bound(
    pool: Sequence[Candidate], need: int, max_change: int = 0, tries: int = BNB_TRIES
) -> list[Candidate] | None:
    """Return a set of `pool` whose total is in [need, need + max_change], else None.

    Depth-first over the candidates, largest first: include a token, or skip it and every
    other token of the same quantity (they lead to the same sums). A branch ends when its total
    reaches `need` or can no longer: what is left of the pool cannot make up the need. The
    smallest excess found wins; a changeless set ends the search. At most `tries` branches are
    visited: past that, the best set found so far is returned, or None.
    """
    if need <= 0:
        return []
    upper = need + max_change
    values = arrange((c for c in pool if 0 < c.quantity <= upper), DESCENDING)
    n = len(values)
    suffix = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + values[i].quantity
    if suffix[0] < need:
        return None
    best: list[Candidate] | None = None
    best_excess = max_change + 1
    chosen: list[Candidate] = []
    budget = tries

    def walk(i: int, total: int) -> bool:
        """Explore from candidate `i` with `total` chosen; True ends the whole search."""
        nonlocal best, best_excess, budget
        if total >= need:
            if total - need < best_excess:
                best, best_excess = list(chosen), total - need
            return best_excess == 0
        if i == n or total + suffix[i] < need:
            return False
        budget -= 1
        if budget < 0:
            return True
        quantity = values[i].quantity
        if total + quantity <= upper:
            chosen.append(values[i])
            if walk(i + 1, total + quantity):
                return True
            chosen.pop()
        j = i + 1
        while j < n and values[j].quantity == quantity:
            j += 1
        return walk(j, total)

    walk(0, 0)
    return best


def consolidate(pool: Sequence[Candidate], need: int, max_tokens: int) -> list[Candidate] | None:
    """Return up to `max_tokens` tokens of `pool`, the smallest first, that cover `need`.

    The smallest `max_tokens` when they cover it; otherwise the most small tokens that, with
    the largest of the pool in place of the rest, do. None when even the largest cannot.
    """
    if need <= 0:
        return []
    ordered = arrange(pool, ASCENDING)
    m = min(max_tokens, len(ordered))
    if m <= 0:
        return None
    n = len(ordered)
    prefix = [0] * (n + 1)
    for i, candidate in enumerate(ordered):
        prefix[i + 1] = prefix[i] + candidate.quantity
    # Keep the j smallest and take the m - j largest: the total grows as j shrinks.
    for j in range(m, -1, -1):
        if prefix[j] + prefix[n] - prefix[n - (m - j)] >= need:
            return ordered[:j] + ordered[n - (m - j) :]
    return None
