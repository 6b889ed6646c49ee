"""Keep a lease alive from a background thread while its owner works."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Call `renew` every `interval` seconds from a daemon thread until stopped or lost.

    `renew` returns False when the lease is gone (e.g. its lock rows expired and were taken
    over); the keeper then stops and calls `on_lost`. An exception from `renew` is logged
    and retried on the next tick; after `max_failures` consecutive ones the lease is
    presumed lost, since it may expire before the store is reachable again.
    """

    def __init__(
        self,
        renew: Callable[[], bool],
        interval: float,
        on_lost: Callable[[], None] | None = None,
        *,
        max_failures: int = 3,
        name: str = "sherdlock-lease",
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        if max_failures < 1:
            raise ValueError(f"max_failures must be positive, got {max_failures!r}")
        self._renew = renew
        self._interval = interval
        self._on_lost = on_lost
        self._max_failures = max_failures
        self._stopping = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._start_lock = threading.Lock()
        self.renewals = 0

    @property
    def lost(self) -> bool:
        """Tell whether the lease was lost."""
        return self._lost.is_set()

    @property
    def running(self) -> bool:
        """Tell whether the renewing thread is alive."""
        return self._thread.is_alive()

    def start(self) -> LeaseKeeper:
        """Start renewing; a keeper can be started once."""
        with self._start_lock:
            if self._started:
                raise RuntimeError("LeaseKeeper already started")
            self._started = True
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop renewing and wait for the thread; safe to call repeatedly and from on_lost."""
        self._stopping.set()
        # Joining our own thread (stop() called from on_lost or renew) would deadlock.
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        """Renew on every tick until stopped, lost or failing too often."""
        failures = 0
        # Event.wait returns True as soon as stop() is called, so stopping never waits a tick.
        while not self._stopping.wait(self._interval):
            try:
                alive = self._renew()
            except Exception:
                failures += 1
                log.warning(
                    "lease renewal failed (%d/%d)", failures, self._max_failures, exc_info=True
                )
                if failures >= self._max_failures:
                    self._lose()
                    return
                continue
            failures = 0
            if not alive:
                self._lose()
                return
            self.renewals += 1

    def _lose(self) -> None:
        """Record the loss and tell the owner."""
        self._lost.set()
        self._stopping.set()
        log.warning("lease lost")
        if self._on_lost is not None:
            try:
                self._on_lost()
            except Exception:
                log.exception("on_lost callback failed")
