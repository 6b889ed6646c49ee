"""This process's replica: one selector (with its token cache) over the PostgreSQL store, and
the listener that keeps that cache current from the database's change notifications."""

from __future__ import annotations

import atexit
import os
import threading

from common.knobs import Knobs, knobs
from locks.listener import CacheListener, django_connect
from locks.store import PostgresTokenStore
from sherdlock import Selector, SelectorConfig
from sherdlock.config import CACHE_TTL, CACHE_TTL_LISTENING

_lock = threading.Lock()
_selector: Selector | None = None
_listener: CacheListener | None = None
_pid: int | None = None
_exit_hook_registered = False


def listener_enabled(options: Knobs | None = None) -> bool:
    """Tell whether replicas run a cache listener (the ``LISTEN`` knob)."""
    return (options if options is not None else knobs()).listen


def selector_config(listening: bool = False) -> SelectorConfig:
    """Build the selector configuration: the core's tuning, the cache ttl by listener.

    With a listener the cache ttl is ``CACHE_TTL_LISTENING``: notifications keep the queues
    current, so they need not be thrown away every second.
    """
    return SelectorConfig(cache_ttl=CACHE_TTL_LISTENING if listening else CACHE_TTL)


def build_store(options: Knobs | None = None) -> PostgresTokenStore:
    """Build the PostgreSQL store from the knobs."""
    o = options if options is not None else knobs()
    return PostgresTokenStore(
        lease=o.lease_seconds, durable=o.durable_leases, prepare_threshold=o.prepare_threshold
    )


def get_selector() -> Selector:
    """Return this process's selector, creating it (and its listener) on first use.

    Creation is lazy and per process: gunicorn forks its workers before they serve anything,
    and each worker gets its own selector and listener; management commands and Celery
    workers that never select start neither.
    """
    global _selector, _listener, _pid
    with _lock:
        pid = os.getpid()
        if _selector is None or _pid != pid:
            if _pid != pid:
                # Forked: the parent's listener thread did not come along, and its socket and
                # connection belong to the parent. Drop the reference without closing them.
                _listener = None
            options = knobs()
            listen = listener_enabled(options)
            store = build_store(options)
            _selector = Selector(store, selector_config(listening=listen))
            _pid = pid
            if listen:
                _listener = CacheListener(
                    _selector.cache,
                    django_connect(),
                    fallback_ttl=CACHE_TTL,
                    # A few fetches' worth: enough to serve from news, small enough to stay
                    # a random sample of a big wallet rather than a copy of it.
                    queue_limit=4 * _selector.config.fetch_limit,
                )
                _listener.start()
                _register_exit_hook()
        return _selector


def get_listener() -> CacheListener | None:
    """Return this process's cache listener, if it runs one (connected or not)."""
    with _lock:
        return _listener if _pid == os.getpid() else None


def stop_listener(timeout: float = 5.0) -> bool:
    """Stop this process's listener; the selector goes on with its short cache ttl."""
    global _listener
    with _lock:
        listener, _listener = _listener, None
    return listener.stop(timeout) if listener is not None else True


def reset() -> None:
    """Forget this process's selector and stop its listener (tests, settings changes)."""
    global _selector
    stop_listener()
    with _lock:
        _selector = None


def _register_exit_hook() -> None:
    """Stop the listener at interpreter exit, closing its connection cleanly."""
    global _exit_hook_registered
    if not _exit_hook_registered:
        # Registered once per interpreter; forked children inherit it, and stop() leaves
        # the parent's listener alone when called from a child.
        atexit.register(stop_listener, 1.0)
        _exit_hook_registered = True
