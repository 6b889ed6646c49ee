"""What every store's turns must do (sherdlock.turns), checked the same way on each store."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sherdlock import WalletKey


class Worker(threading.Thread):
    """Run ``work`` in a thread of its own, then ``after`` (e.g. close its database session).

    ``join`` re-raises what ``work`` raised, so that an assertion in it fails the test, and
    fails if ``work`` is still running when its timeout ends.
    """

    def __init__(self, work: Callable[..., object], *args: object, after=None) -> None:
        super().__init__()
        self.work, self.args, self.after, self.error = work, args, after, None
        self.start()

    def run(self) -> None:
        try:
            self.work(*self.args)
        except BaseException as exc:
            self.error = exc
        finally:
            if self.after is not None:
                self.after()

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        assert not self.is_alive(), f"{self.work} still running after {timeout} s"
        if self.error is not None:
            raise self.error


def assert_turns_go_in_the_order_asked(store, key: WalletKey, start, until_queued) -> None:
    """Hold the turn of ``key``, let two more ask for it in turn, and check who got it when.

    ``start(work, *args)`` runs ``work`` as a selection of its own (a Worker);
    ``until_queued(n)`` returns once ``n`` of them wait for the turn.
    """
    taken, done = threading.Event(), threading.Event()
    order: list[str] = []

    def hold() -> None:
        assert store.take_turn(key, 1.0)
        taken.set()
        assert done.wait(10)
        store.end_turn(key)

    def ask(name: str) -> None:
        assert store.take_turn(key, 10.0)
        order.append(name)
        store.end_turn(key)

    holder = start(hold)
    assert taken.wait(5)
    askers = []
    for name in ("second", "third"):
        askers.append(start(ask, name))
        until_queued(len(askers))  # behind the one before
    assert not store.await_turn(key, 0.01)  # held, and asked for
    done.set()
    for worker in (holder, *askers):
        worker.join(10)
    assert order == ["second", "third"] and store.await_turn(key, 0.0)
