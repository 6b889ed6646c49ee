"""How long selections of each wallet/currency are held, as this process has seen them.

A request refused with "funds locked" is told to retry after about as long as the key's holds
have been lasting (from selection to spend or release), rather than after a constant: a wallet
whose holders spend within milliseconds is worth retrying at once, one whose holders take
seconds is not. An exponentially weighted mean per key (most recent keys kept), else over all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from sherdlock import WalletKey

WEIGHT = 0.2  # of each new observation in the mean
MAX_KEYS = 10_000
FLOOR, CEILING = 0.005, 30.0  # seconds: sane bounds for the advice


class HoldTimes:
    """Mean hold durations per key and overall; thread-safe."""

    def __init__(self, default: float) -> None:
        self._default = default
        self._overall: float | None = None
        self._by_key: OrderedDict[WalletKey, float] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, key: WalletKey, seconds: float) -> None:
        """Record that a selection of ``key`` was held ``seconds``."""
        seconds = min(max(seconds, 0.0), CEILING)
        with self._lock:
            mean = self._by_key.pop(key, None)
            self._by_key[key] = seconds if mean is None else mean + WEIGHT * (seconds - mean)
            if len(self._by_key) > MAX_KEYS:
                self._by_key.popitem(last=False)
            overall = self._overall
            self._overall = seconds if overall is None else overall + WEIGHT * (seconds - overall)

    def estimate(self, key: WalletKey) -> float:
        """Return how long a hold of ``key`` typically lasts (the default before any is seen)."""
        with self._lock:
            mean = self._by_key.get(key, self._overall)
        return min(max(mean if mean is not None else self._default, FLOOR), CEILING)
