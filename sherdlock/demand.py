"""What a replica remembers of the keys it selects from, and how many rows a fetch reads."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict

from .cache import TokenCache
from .config import BATCH_MARGIN, SelectorConfig
from .interfaces import Clock
from .types import WalletKey


class Demand:
    """Per wallet/currency: when this replica last selected from it, and its tokens' size.

    A key selected from at a pace that its queue would serve (warm) is worth a full batch and a
    queue of what it leaves; any other is cold. A warm batch reads fetch_limit / cold_fetch_limit
    times the rows of a cold one, and its queue lives a cache ttl: at the key's latest pace (the
    time since its previous selection) that queue serves ttl / gap selections, and the batch
    pays for its rows only if that is at least as many times. So a key is warm when its gap is
    under ttl * cold_fetch_limit / fetch_limit. What its latest random batch held per token
    sizes a contested key's fetches. Both are kept for the latest `cache_max_wallets` keys;
    thread-safe.
    """

    def __init__(self, config: SelectorConfig, ttl: float, clock: Clock) -> None:
        self._config = config
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._last_selected: OrderedDict[WalletKey, float] = OrderedDict()
        self._per_token: OrderedDict[WalletKey, float] = OrderedDict()

    def selected(self, key: WalletKey) -> float | None:
        """Stamp `key` as selected from now; return when it was last."""
        with self._lock:
            last = self._last_selected.pop(key, None)
            self._last_selected[key] = self._clock()
            self._bound(self._last_selected)
        return last

    def measured(self, key: WalletKey, rows: int, total: int) -> None:
        """Remember that a random batch of `key` held `rows` free tokens worth `total`."""
        if rows > 0:
            with self._lock:
                self._per_token.pop(key, None)
                self._per_token[key] = total / rows
                self._bound(self._per_token)

    def fetch_limit(self, key: WalletKey, cache: TokenCache, need: int = 0) -> tuple[int, bool]:
        """Stamp `key`; return the rows to fetch (more where demand repeats) and whether warm.

        A `need` is given for a random fetch of a contested key, which queues none of what it
        reads: it reads what the need takes at the key's tokens as its latest random batch held
        them (BATCH_MARGIN), between the cold and the warm limit.
        """
        config, last = self._config, self.selected(key)
        cold = min(config.cold_fetch_limit, config.fetch_limit)
        if last is None or (self._clock() - last) * config.fetch_limit >= self._ttl * cold:
            return cold, False
        per_token = self._per_token.get(key) if need else None
        if per_token:
            wanted = math.ceil(BATCH_MARGIN * need / per_token)
            return min(config.fetch_limit, max(config.cold_fetch_limit, wanted)), True
        return max(config.fetch_limit, config.calm_fetch_limit if cache.calm(key) else 0), True

    def _bound(self, kept: OrderedDict[WalletKey, float]) -> None:
        if len(kept) > self._config.cache_max_wallets:
            kept.popitem(last=False)
