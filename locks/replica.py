"""This process's replica: one selector (with its token cache) over the PostgreSQL store."""

from __future__ import annotations

import os
import threading

from django.conf import settings

from locks.store import PostgresTokenStore
from sherdlock import BackoffPolicy, Selector, SelectorConfig

_lock = threading.Lock()
_selector: Selector | None = None
_pid: int | None = None


def selector_config(options: dict[str, object] | None = None) -> SelectorConfig:
    """Build the selector configuration from ``settings.SHERDLOCK``."""
    o = options if options is not None else settings.SHERDLOCK
    return SelectorConfig(
        max_retries=int(o["MAX_RETRIES"]),
        fetch_limit=int(o["FETCH_LIMIT"]),
        cache_ttl=float(o["CACHE_TTL"]),
        backoff=BackoffPolicy(
            attempts=int(o["BACKOFF_ATTEMPTS"]),
            min_delay=float(o["BACKOFF_MIN"]),
            max_delay=float(o["BACKOFF_MAX"]),
        ),
    )


def get_selector() -> Selector:
    """Return this process's selector, creating it on first use (and again after a fork)."""
    global _selector, _pid
    with _lock:
        if _selector is None or _pid != os.getpid():
            store = PostgresTokenStore(lease=float(settings.SHERDLOCK["LEASE_SECONDS"]))
            _selector = Selector(store, selector_config())
            _pid = os.getpid()
        return _selector


def reset() -> None:
    """Forget this process's selector (tests, settings changes)."""
    global _selector
    with _lock:
        _selector = None
