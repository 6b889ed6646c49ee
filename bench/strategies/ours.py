"""Ours: the shipped selector (``locks.replica.get_selector``) over the PostgreSQL store."""

from __future__ import annotations

from collections.abc import Sequence

from bench.strategies.base import Picked, Spent
from locks import replica
from locks.store import PostgresTokenStore
from sherdlock import Candidate, Claim, FetchResult, LockOutcome, Strategy, WalletKey

LISTENER_TIMEOUT = 10.0
# The terms the benchmark gives the strategies that take some: an exact selection without a
# changeless set falls back to random (counted as exact), a consolidation sweeps up to 10.
BENCH_TERMS: dict[str, dict[str, object]] = {
    "exact": {"fallback": True},
    "consolidate": {"max_tokens": 10},
}


def selection_strategy(name: str) -> Strategy:
    """Return the selection strategy ``name`` with the benchmark's terms."""
    return Strategy(name, **BENCH_TERMS.get(name, {}))  # type: ignore[arg-type]


class CountingStore(PostgresTokenStore):
    """Count the token rows offered to lock statements, as the seed-faithful baseline does.

    A fetch offers the rows of the prefix it tries to lock (granted or lost to a concurrent
    selection); a try-lock offers every submitted candidate.
    """

    latest: CountingStore | None = None

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.lock_attempts = 0
        CountingStore.latest = self

    def fetch_and_lock(self, claim: Claim, limit: int) -> FetchResult:
        result = super().fetch_and_lock(claim, limit)
        self.lock_attempts += len(result.granted) + result.conflicts
        return result

    def try_lock(self, claim: Claim, candidates: Sequence[Candidate]) -> LockOutcome:
        self.lock_attempts += len(candidates)
        return super().try_lock(claim, candidates)


class Ours:
    """Select with this process's selector, built exactly as the web replicas build it.

    Going through ``get_selector`` (not a hand-made Selector) measures what ships, including
    whatever the settings wire into it, such as the LISTEN/NOTIFY cache updater when the
    process runs with ``SHERDLOCK_LISTEN=1``.
    """

    def __init__(self, name: str = "ours") -> None:
        self.name = name
        # "ours:<strategy>": every selection names that selection strategy (with its bench terms).
        self.strategy = selection_strategy(name.partition(":")[2] or "random")
        # The replica module builds its store from this name; counting needs our subclass.
        replica.PostgresTokenStore = CountingStore
        CountingStore.latest = None
        replica.reset()
        self.selector = replica.get_selector()
        self._store = CountingStore.latest
        # Whether this replica keeps its cache current from notifications; reported per point.
        listener = getattr(replica, "get_listener", lambda: None)()
        self.listening = listener is not None
        if listener is not None and not listener.wait_connected(LISTENER_TIMEOUT):
            raise RuntimeError("the cache listener did not connect")

    @property
    def lock_attempts(self) -> int | None:
        return None if self._store is None else self._store.lock_attempts

    def select(self, tx_id: str, key: WalletKey, quantity: int) -> Picked:
        selection = self.selector.select(
            tx_id, key.wallet, key.currency, quantity, strategy=self.strategy
        )
        return Picked(tx_id, key, selection.fence, selection.tokens, selection)

    def select_waiting(self, tx_id: str, key: WalletKey, quantity: int, seconds: float) -> Picked:
        """Select, waiting up to ``seconds`` in the key's queue while others hold the funds.

        What the service does for ``Prefer: wait``: impatient attempts (no sleeping inside the
        selector), the queue of ``locks.waiting`` between them; a process with no free waiting
        slot makes one attempt, as the service answers such a request.
        """
        from locks import wait_loop

        def attempt():
            return self.selector.select(tx_id, key.wallet, key.currency, quantity, patient=False)

        try:
            selection = wait_loop.wait_for(key, seconds, attempt)
        except wait_loop.QueueFull:
            selection = attempt()
        return Picked(tx_id, key, selection.fence, selection.tokens, selection)

    def release(self, picked: Picked) -> None:
        self.selector.release(picked.handle)

    def spent(self, picked: Picked, created: Spent | None = None) -> None:
        """Forget the spent tokens and queue the created ones, as the service's spend does."""
        self.selector.forget(picked.token_ids, picked.key)
        if created is not None:
            self.selector.issued(created.outputs)

    def close(self) -> None:
        """Drop this replica's selector, stopping its listener if it runs one."""
        replica.reset()
