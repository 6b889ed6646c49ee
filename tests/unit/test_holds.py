"""The advice given with "funds locked": about as long as the wallet's holds last."""

from __future__ import annotations

from locks.holds import CEILING, FLOOR, HoldTimes
from sherdlock import WalletKey

HOT, COLD, NEW = WalletKey("hot", "USD"), WalletKey("cold", "USD"), WalletKey("new", "EUR")


def test_before_any_hold_is_seen_the_default_applies():
    assert HoldTimes(default=0.2).estimate(HOT) == 0.2


def test_each_key_gets_the_mean_of_its_own_recent_holds():
    holds = HoldTimes(default=1.0)
    for _ in range(30):
        holds.observe(HOT, 0.02)
        holds.observe(COLD, 4.0)
    assert abs(holds.estimate(HOT) - 0.02) < 1e-3
    assert abs(holds.estimate(COLD) - 4.0) < 1e-2
    # A key never seen here gets what holds last overall, not the default.
    assert 0.02 < holds.estimate(NEW) < 4.0


def test_the_mean_follows_a_change_and_stays_within_bounds():
    holds = HoldTimes(default=1.0)
    holds.observe(HOT, 10.0)
    for _ in range(30):
        holds.observe(HOT, 0.1)
    assert holds.estimate(HOT) < 0.2
    holds.observe(COLD, 0.0)
    holds.observe(NEW, 10**6)
    assert holds.estimate(COLD) == FLOOR and holds.estimate(NEW) == CEILING
