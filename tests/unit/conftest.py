"""Fixtures shared by the unit tests of the framework-free core."""

from __future__ import annotations

import random

import pytest

from sherdlock import InMemoryStore, WalletKey


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        assert seconds >= 0
        self.now += seconds


class FakeSleeper:
    """Record sleeps and advance a fake clock instead of blocking."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        assert seconds >= 0
        self.calls.append(seconds)
        self.clock.advance(seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeper(clock: FakeClock) -> FakeSleeper:
    return FakeSleeper(clock)


@pytest.fixture
def store(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock, lease=60.0, rng=random.Random(7))


@pytest.fixture
def key() -> WalletKey:
    return WalletKey("alice", "USD")


@pytest.fixture
def make_clock() -> type[FakeClock]:
    """Return the fake clock class, for tests that build many worlds (property tests)."""
    return FakeClock


@pytest.fixture
def make_sleeper() -> type[FakeSleeper]:
    """Return the fake sleeper class."""
    return FakeSleeper
