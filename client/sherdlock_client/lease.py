"""Keep a selection's lease alive while its owner works: a thread, or an asyncio task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType

from .errors import ApiError

log = logging.getLogger("sherdlock_client")

# Answers to a renewal that mean the lease is over for good: renewing again cannot help.
LEASE_OVER = frozenset({"lease_lost", "not_locked", "already_spent", "not_found"})


class Keepers:
    """The keepers of one client by tx id, so that its spend and release stop them."""

    def __init__(self) -> None:
        self._keepers: dict[str, list[_Keeper]] = {}
        self._spending: set[str] = set()
        self._lock = threading.Lock()

    def add(self, tx_id: str, keeper: _Keeper) -> None:
        with self._lock:
            self._keepers.setdefault(tx_id, []).append(keeper)

    def forget(self, tx_id: str, keeper: _Keeper) -> None:
        with self._lock:
            keepers = self._keepers.get(tx_id, [])
            if keeper in keepers:
                keepers.remove(keeper)
            if not keepers:
                self._keepers.pop(tx_id, None)

    def take(self, tx_id: str) -> list[_Keeper]:
        """Return the keepers of ``tx_id``, forgetting them (to stop them)."""
        with self._lock:
            return self._keepers.pop(tx_id, [])

    def spending(self, tx_id: str, now: bool) -> None:
        with self._lock:
            if now:
                self._spending.add(tx_id)
            else:
                self._spending.discard(tx_id)

    def alive_after(self, tx_id: str, error: ApiError) -> bool:
        """Tell whether the lease may still be alive after a renewal refused with ``error``."""
        if error.code not in LEASE_OVER:
            raise error  # transient (throttled, database away): the next tick retries
        with self._lock:
            # A renewal that lands just after our own spend is answered already_spent: that
            # is the spend succeeding, not the lease being lost. Should the spend fail, the
            # next renewal tells.
            return tx_id in self._spending


class _Keeper:
    """What both keepers share: counting renewals and failures, and losing the lease."""

    def __init__(
        self,
        interval: float,
        on_lost: Callable[[], None] | None,
        max_failures: int,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        if max_failures < 1:
            raise ValueError(f"max_failures must be positive, got {max_failures!r}")
        self.interval = interval
        self._on_lost = on_lost
        self._max_failures = max_failures
        self._failures = 0
        self.renewals = 0
        self.lost = False

    def _renewed(self, alive: bool) -> bool:
        """Count a renewal's outcome; return whether to go on."""
        self._failures = 0
        if not alive:
            self._lose()
            return False
        self.renewals += 1
        return True

    def _failed(self) -> bool:
        """Count a failed renewal; return whether to go on."""
        self._failures += 1
        log.warning(
            "lease renewal failed (%d/%d)", self._failures, self._max_failures, exc_info=True
        )
        if self._failures >= self._max_failures:
            # The lease may expire before the server is reachable again.
            self._lose()
            return False
        return True

    def _lose(self) -> None:
        self.lost = True
        log.warning("lease lost")
        if self._on_lost is not None:
            try:
                self._on_lost()
            except Exception:
                log.exception("on_lost callback failed")

    def stop(self) -> None:
        raise NotImplementedError


class LeaseKeeper(_Keeper):
    """Renew a lease every ``interval`` seconds from a daemon thread until stopped or lost.

    Use it as a context manager (or ``start()`` and ``stop()``).
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
        super().__init__(interval, on_lost, max_failures)
        self._renew = renew
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def running(self) -> bool:
        """Tell whether the renewing thread is alive."""
        return self._thread.is_alive()

    def start(self) -> LeaseKeeper:
        """Start renewing; a keeper starts once."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing and wait for the thread; safe to repeat and to call from on_lost."""
        self._stopping.set()
        # Joining our own thread (stop() called from on_lost) would deadlock.
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

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
        # Event.wait returns as soon as stop() is called, so stopping never waits a tick.
        while not self._stopping.wait(self.interval):
            try:
                alive = self._renew()
            except Exception:
                if not self._failed():
                    return
                continue
            if not self._renewed(alive):
                return


class AsyncLeaseKeeper(_Keeper):
    """Renew a lease every ``interval`` seconds from an asyncio task until stopped or lost.

    Use it as an async context manager (or ``start()`` and ``await stop()``).
    """

    def __init__(
        self,
        renew: Callable[[], Awaitable[bool]],
        interval: float,
        on_lost: Callable[[], None] | None = None,
        *,
        max_failures: int = 3,
        name: str = "sherdlock-lease",
    ) -> None:
        super().__init__(interval, on_lost, max_failures)
        self._renew = renew
        self._name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Tell whether the renewing task is alive."""
        return self._task is not None and not self._task.done()

    def start(self) -> AsyncLeaseKeeper:
        """Start renewing (in the running event loop); a keeper starts once."""
        if self._task is not None:
            raise RuntimeError("the keeper was started already")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
        return self

    def stop(self) -> None:
        """Stop renewing (the task is cancelled)."""
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def wait_stopped(self) -> None:
        """Stop renewing and wait until the task has ended."""
        self.stop()
        if self._task is not None and self._task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> AsyncLeaseKeeper:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.wait_stopped()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                alive = await self._renew()
            except Exception:
                if not self._failed():
                    return
                continue
            if not self._renewed(alive):
                return
