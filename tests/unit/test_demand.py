"""Demand: which keys are warm, and how many rows a fetch of each reads."""

from __future__ import annotations

import pytest

from sherdlock import SelectorConfig, WalletKey
from sherdlock.cache import TokenCache
from sherdlock.demand import Demand

KEY = WalletKey("alice", "USD")
CONFIG = SelectorConfig(fetch_limit=64, cold_fetch_limit=16, calm_fetch_limit=256)


@pytest.fixture
def demand(clock) -> Demand:
    return Demand(CONFIG, 1.0, clock)


def test_a_key_is_warm_while_selected_from_at_a_pace_its_queue_would_serve(demand, clock):
    # A warm batch reads 64 / 16 = 4 times a cold one's rows; its queue lives the ttl (1 s):
    # it pays only if the key's pace gives the queue 4 selections in that time, a gap under
    # 0.25 s since the previous one.
    cache = TokenCache(1.0, clock=clock)
    assert demand.fetch_limit(KEY, cache) == (16, False)  # never selected from: cold
    clock.advance(0.2)
    assert demand.fetch_limit(KEY, cache) == (64, True)
    clock.advance(0.25)  # a slower pace: the queue would serve fewer than 4 in its life
    assert demand.fetch_limit(KEY, cache) == (16, False)
    clock.advance(0.01)
    assert demand.fetch_limit(KEY, cache) == (64, True)
    clock.advance(1.5)
    assert demand.fetch_limit(KEY, cache) == (16, False)


def test_a_key_is_warm_within_the_ttl_when_a_warm_batch_is_no_larger_than_a_cold_one(clock):
    same = Demand(SelectorConfig(fetch_limit=16, cold_fetch_limit=16), 1.0, clock)
    cache = TokenCache(1.0, clock=clock)
    assert same.fetch_limit(KEY, cache) == (16, False)
    clock.advance(0.9)
    assert same.fetch_limit(KEY, cache) == (16, True)


@pytest.mark.parametrize(
    ("need", "rows", "total", "limit"),
    [
        (40, 16, 168, 16),  # tokens of 10.5 on average: 8 cover twice the need, a cold fetch more
        (120, 16, 168, 23),  # 2 x 120 / 10.5 = 22.9
        (1200, 64, 990, 64),  # tokens of 15.5: 155 would, a warm fetch is the most
    ],
)
def test_a_contested_keys_fetch_reads_what_its_need_takes(demand, clock, need, rows, total, limit):
    cache = TokenCache(1.0, clock=clock)
    demand.selected(KEY)
    demand.measured(KEY, rows, total)
    assert demand.fetch_limit(KEY, cache, need) == (limit, True)
    # Without a need (a key that is not contested) the warm limit, whatever was measured.
    assert demand.fetch_limit(KEY, cache) == (64, True)


def test_without_a_measure_a_contested_key_reads_a_warm_batch(demand, clock):
    cache = TokenCache(1.0, clock=clock)
    demand.selected(KEY)
    demand.measured(KEY, 0, 0)  # an empty batch says nothing of the tokens' size
    assert demand.fetch_limit(KEY, cache, 30) == (64, True)


def test_it_remembers_the_latest_keys_only(clock):
    demand = Demand(SelectorConfig(cache_max_wallets=2), 1.0, clock)
    keys = [WalletKey(f"w{n}", "USD") for n in range(3)]
    for key in keys:
        demand.selected(key)
        demand.measured(key, 4, 40)
    cache = TokenCache(1.0, clock=clock)
    assert demand.fetch_limit(keys[0], cache, 30)[1] is False  # forgotten: cold
    assert demand.fetch_limit(keys[2], cache, 30) == (16, True)
