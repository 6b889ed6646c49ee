"""Shared helpers of the selector unit tests: a spying store and small factories."""

from __future__ import annotations

import random
from collections.abc import Sequence

from sherdlock import (
    Candidate,
    Claim,
    InMemoryStore,
    LockOutcome,
    Selection,
    Selector,
    SelectorConfig,
    WalletKey,
)


class SpyStore:
    """Delegate to a store, recording every id submitted to try_lock."""

    def __init__(self, inner: InMemoryStore) -> None:
        self.inner = inner
        self.submitted: list[int] = []

    def try_lock(self, claim: Claim, candidates: Sequence[Candidate]) -> LockOutcome:
        self.submitted.extend(c.token_id for c in candidates)
        return self.inner.try_lock(claim, candidates)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def hold(store: InMemoryStore, tx_id: str, fence: int, key: WalletKey, *ids: int) -> None:
    """Lock tokens for another transaction, as a competing replica would."""
    store.try_lock(Claim(tx_id, key, 1, fence), [Candidate(i, 1) for i in ids])


def make_selector(store, clock, sleeper, seed: int = 1, **config) -> Selector:
    return Selector(
        store, SelectorConfig(**config), rng=random.Random(seed), sleep=sleeper, clock=clock
    )


def issue(store: InMemoryStore, key: WalletKey, quantities: Sequence[int], first_id: int = 1):
    for offset, quantity in enumerate(quantities):
        store.add_token(first_id + offset, key.wallet, key.currency, quantity)


def locks_of(store: InMemoryStore, tx_id: str) -> set[int]:
    return {t for t, (tx, _, _) in store.locks().items() if tx == tx_id}


def assert_owns(store: InMemoryStore, selection: Selection) -> None:
    live = store.live_locks()
    for token_id in selection.token_ids:
        assert live[token_id][:2] == (selection.tx_id, selection.fence)


def warm(selector: Selector, key: WalletKey) -> None:
    """Make `key` a wallet this replica has selected from lately, as a stream of requests does.

    A replica's first fetch of a wallet (a cold one) is not answered the rest of its batch, so
    it queues nothing; tests of the queue start from a warm wallet, whose fetches fill it.
    """
    selector._demand.selected(key)
