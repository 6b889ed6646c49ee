"""A key's turn: a selection that has waited long for held funds goes before newcomers.

Selections that find a key's free tokens short of what they need poll for them
(`SelectorConfig.refetch_delay`), and whoever calls first after a spend or a release takes
what came free: on a wallet whose value is short of its demand a newcomer often does, and an
unlucky poller waits round after round. So a selection that has waited `turn_after` seconds
queues for its key's turn (`TokenStore.take_turn`: one holder at a time, in the order asked)
and, holding it, polls every `turn_poll` seconds. A newcomer to a key this replica sees
contested (`TokenCache.contested`) lets whoever holds or asks for the turn go first, so what
comes free goes to the one that waited, or to selections already under way, not to it: its
first fetch locks nothing while the turn is held or asked for and says so
(`Claim.yield_to_turn`, `FetchResult.turn_taken`), and it then waits for nobody to hold or
ask for the turn (`TokenStore.await_turn`) before it fetches again. Nobody usually does, and
the fetch alone answers; a newcomer whose first call is another (a try-lock of cached
tokens, a choosing strategy's window) waits first. The holder gives the turn back as soon as
one of its calls locks something (a selection gathering many tokens then goes on beside the
others) and when its selection ends. No selection waits for a turn longer than `yield_limit`
seconds at a time: a holder that stalled (its process paused) holds nobody up for longer.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import SelectorConfig
from .types import WalletKey

if TYPE_CHECKING:
    from .interfaces import TokenStore
    from .round import Round

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Turn:
    """One selection's wait for funds: since when, and whether it holds its key's turn."""

    since: float  # when the selection started
    held: bool = False
    refused: bool = False  # its wait for the turn timed out: it asks no more
    newcomer: bool = False  # to a contested key, and has not yet let its turn's holder go first

    def stall(self, config: SelectorConfig) -> float:
        """Return how much one refetch without progress counts towards `max_retries`.

        The holder polls faster than the refetch delay; its stalls weigh in proportion, so it
        gives up after as long a wait as any other selection.
        """
        if not self.held:
            return 1.0
        low, high = config.refetch_delay
        return min(1.0, config.turn_poll / max((low + high) / 2, 1e-9))


def enter(store: TokenStore, rnd: Round, config: SelectorConfig) -> None:
    """Let a newcomer to a contested key wait for another selection's turn of it to end, once."""
    if rnd.turn.newcomer:
        rnd.turn.newcomer = False
        store.await_turn(rnd.key, config.yield_limit)


def wait_for_funds(
    store: TokenStore, rnd: Round, config: SelectorConfig, now: float, rng: random.Random
) -> float:
    """Return how long a round waiting for funds sleeps before its next refetch.

    A selection that has waited `turn_after` queues for its key's turn first; the holder
    refetches at once after taking it, then every `turn_poll`.
    """
    turn = rnd.turn
    aged = config.turn_after and now - turn.since >= config.turn_after
    if aged and not turn.held and not turn.refused:
        turn.held = store.take_turn(rnd.key, config.yield_limit)
        turn.refused = not turn.held
        if turn.held:
            rnd.stats.turns += 1
            return 0.0
    return config.turn_poll if turn.held else rng.uniform(*config.refetch_delay)


def give_back(store: TokenStore, rnd: Round) -> None:
    """Give the key's turn back if the selection of `rnd` holds it.

    A failure to say so is logged, not raised: it must not replace the selection's outcome,
    and a session that cannot give its lock back has lost it (a store's turns end with them).
    """
    if not rnd.turn.held:
        return
    rnd.turn.held = False
    try:
        store.end_turn(rnd.key)
    except Exception:
        log.warning("could not give back the turn of %s", rnd.key, exc_info=True)


class Turns:
    """The turns of an in-memory store: a holder per key (its thread), granted in the order
    asked. `held` maps each held key to its holder."""

    def __init__(self, mutex: threading.RLock, calls: Counter[str]) -> None:
        self._changed = threading.Condition(mutex)
        self._calls = calls
        self.held: dict[WalletKey, int] = {}
        self.asking: defaultdict[WalletKey, list[int]] = defaultdict(list)

    def take(self, key: WalletKey, wait: float) -> bool:
        """Take the turn of `key` for this thread behind those who asked first, within `wait`."""
        me = threading.get_ident()
        with self._changed:
            self._calls["take_turn"] += 1
            queue = self.asking[key]
            queue.append(me)
            try:
                ready = self._changed.wait_for(
                    lambda: self.held.get(key, me) == me and queue[0] == me, wait
                )
                if ready:
                    self.held[key] = me
                return ready
            finally:
                queue.remove(me)
                self._changed.notify_all()

    def wait(self, key: WalletKey, wait: float) -> bool:
        """Wait up to `wait` for nobody (but this thread) to hold or ask for the turn of `key`."""
        with self._changed:
            self._calls["await_turn"] += 1
            return self._changed.wait_for(lambda: self.free(key), wait)

    def free(self, key: WalletKey) -> bool:
        """Tell whether nobody (but this thread) holds or asks for the turn of `key` now."""
        me = threading.get_ident()
        with self._changed:
            return not self.asking[key] and self.held.get(key, me) == me

    def end(self, key: WalletKey) -> None:
        """Give back this thread's turn of `key`."""
        with self._changed:
            self._calls["end_turn"] += 1
            if self.held.get(key) == threading.get_ident():
                del self.held[key]
                self._changed.notify_all()
