"""LeaseKeeper: periodic renewal on a daemon thread."""

from __future__ import annotations

import threading
import time

import pytest

from sherdlock import LeaseKeeper

WAIT = 10.0  # generous bound; every wait returns as soon as its event fires


class Renewer:
    """Count renewals and answer from a script of results (True, False or exceptions)."""

    def __init__(self, script=(), default=True) -> None:
        self.script = list(script)
        self.default = default
        self.calls = 0
        self.reached: dict[int, threading.Event] = {}

    def wait_for(self, calls: int) -> bool:
        event = self.reached.setdefault(calls, threading.Event())
        if self.calls >= calls:
            event.set()
        return event.wait(WAIT)

    def __call__(self) -> bool:
        self.calls += 1
        event = self.reached.get(self.calls)
        if event is not None:
            event.set()
        result = self.script.pop(0) if self.script else self.default
        if isinstance(result, BaseException):
            raise result
        return result


def test_renews_every_interval_until_stopped():
    renew = Renewer()
    with LeaseKeeper(renew, interval=0.01) as keeper:
        assert renew.wait_for(3)
        assert keeper.running
    assert not keeper.running and not keeper.lost
    calls = renew.calls
    time.sleep(0.05)
    assert renew.calls == calls
    assert keeper.renewals == calls


def test_does_not_renew_before_first_interval():
    renew = Renewer()
    keeper = LeaseKeeper(renew, interval=10).start()
    time.sleep(0.02)
    started = time.monotonic()
    keeper.stop()
    assert time.monotonic() - started < 1  # stop interrupts the wait
    assert renew.calls == 0


def test_stops_and_reports_when_lease_is_lost():
    lost = threading.Event()
    renew = Renewer(script=[True, False])
    keeper = LeaseKeeper(renew, interval=0.01, on_lost=lost.set).start()

    assert lost.wait(WAIT)
    keeper.stop()
    assert keeper.lost and renew.calls == 2 and keeper.renewals == 1


def test_transient_failures_are_retried():
    renew = Renewer(script=[RuntimeError("blip"), RuntimeError("blip"), True, RuntimeError()])
    with LeaseKeeper(renew, interval=0.01, max_failures=3) as keeper:
        assert renew.wait_for(6)
    assert not keeper.lost


def test_consecutive_failures_lose_the_lease():
    lost = threading.Event()
    renew = Renewer(default=ConnectionError("down"))
    keeper = LeaseKeeper(renew, interval=0.01, on_lost=lost.set, max_failures=3).start()

    assert lost.wait(WAIT)
    keeper.stop()
    assert keeper.lost and renew.calls == 3


def test_on_lost_may_stop_the_keeper_and_may_fail():
    done = threading.Event()
    holder: list[LeaseKeeper] = []

    def on_lost() -> None:
        holder[0].stop()  # from the keeper's own thread: must not deadlock
        done.set()
        raise RuntimeError("callback bug")

    keeper = LeaseKeeper(Renewer(default=False), interval=0.01, on_lost=on_lost)
    holder.append(keeper)
    keeper.start()
    assert done.wait(WAIT)
    keeper.stop(timeout=WAIT)
    assert not keeper.running and keeper.lost


def test_stop_is_idempotent_and_start_happens_once():
    keeper = LeaseKeeper(Renewer(), interval=0.01)
    keeper.stop()  # before start
    keeper.start()
    with pytest.raises(RuntimeError):
        keeper.start()
    keeper.stop()
    keeper.stop()
    assert not keeper.running


@pytest.mark.parametrize("kwargs", [{"interval": 0}, {"interval": 1, "max_failures": 0}])
def test_arguments_are_validated(kwargs):
    with pytest.raises(ValueError):
        LeaseKeeper(Renewer(), **kwargs)
