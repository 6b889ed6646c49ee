"""The workloads: which tokens each wallet holds and what the replicas ask for."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

CURRENCY = "USD"


@dataclass(frozen=True)
class Workload:
    """Tokens to seed and the selection requests replicas make against them.

    Spends pay the requested quantity and give the change back, both to the selection's own
    wallet, so every wallet's supply stays what it was seeded with, and since each wallet always
    holds at least ``max_quantity``, every insufficient-funds answer is spurious.
    """

    name: str
    title: str
    wallets: tuple[str, ...]
    min_quantity: int
    max_quantity: int
    spend_ratio: float = 0.5
    hold: float = 0.0  # mean seconds a replica holds a selection before spending or releasing
    currency: str = CURRENCY
    # (wallet, quantity) of every token to seed, in id order.
    tokens: tuple[tuple[str, int], ...] = field(default=(), repr=False)

    def pick_wallet(self, rng: random.Random) -> str:
        """Return the wallet of the next request."""
        return self.wallets[0] if len(self.wallets) == 1 else rng.choice(self.wallets)

    def supply(self) -> dict[str, int]:
        """Return the seeded quantity per wallet."""
        totals: dict[str, int] = defaultdict(int)
        for wallet, quantity in self.tokens:
            totals[wallet] += quantity
        return dict(totals)

    def check(self, supply: dict[str, int] | None = None) -> None:
        """Refuse a workload in which a request could exceed its wallet's whole supply."""
        supply = self.supply() if supply is None else supply
        short = {w: supply.get(w, 0) for w in self.wallets if supply.get(w, 0) < self.max_quantity}
        if short:
            raise ValueError(f"{self.name}: wallets hold less than a request may ask: {short}")


def spread(wallets: int, tokens_per_wallet: int, seed: int, **options: object) -> Workload:
    """Many wallets of many small tokens; replicas pick wallets at random: little contention."""
    rng = random.Random(seed)
    names = tuple(f"spread-{w}" for w in range(wallets))
    rows = tuple((name, rng.randint(1, 20)) for name in names for _ in range(tokens_per_wallet))
    return Workload(
        "spread",
        f"spread: {wallets} wallets x {tokens_per_wallet} tokens",
        names,
        1,
        50,
        tokens=rows,
        **options,
    )


def hot_wallet(tokens: int, seed: int, **options: object) -> Workload:
    """One wallet that every replica selects from at once."""
    rng = random.Random(seed)
    rows = tuple(("hot", rng.randint(1, 20)) for _ in range(tokens))
    return Workload(
        "hot-wallet",
        f"hot wallet: 1 wallet x {tokens} tokens",
        ("hot",),
        1,
        40,
        tokens=rows,
        **options,
    )


def hot_tokens(big: int, big_quantity: int, small: int, seed: int, **options: object) -> Workload:
    """A few large tokens that most requests need, among many small ones.

    Requests of 0.9 to 1.5 large tokens cannot be met from small tokens alone without many of
    them, so replicas fight over the large ones: the pattern where a selector that does not
    tell "short" from "held by others" answers insufficient funds.
    """
    rng = random.Random(seed)
    rows = [("hot-tokens", big_quantity)] * big
    rows += [("hot-tokens", rng.randint(1, 10)) for _ in range(small)]
    rng.shuffle(rows)  # spread the large tokens over the id range
    low, high = int(big_quantity * 0.9), int(big_quantity * 1.5)
    return Workload(
        "hot-tokens",
        f"hot tokens: {big} x {big_quantity} + {small} small",
        ("hot-tokens",),
        low,
        high,
        tokens=tuple(rows),
        **options,
    )


def large(wallets: int, tokens_per_wallet: int, **options: object) -> Workload:
    """Many wallets of many tokens of 1-20, generated in the server (``seeding.seed_generated``).

    Requests of 1-50 from a random wallet, as on the spread workload.
    """
    names = tuple(f"large-{w}" for w in range(wallets))
    return Workload(
        "large", f"large: {wallets} wallets x {tokens_per_wallet} tokens", names, 1, 50, **options
    )
