"""SelectorConfig and BackoffPolicy validation and derived values."""

from __future__ import annotations

import random

import pytest

from sherdlock import BackoffPolicy, SelectorConfig


def test_defaults_are_valid():
    config = SelectorConfig()
    assert config.max_retries == 5 and config.fetch_limit == 64
    assert config.backoff == BackoffPolicy(3, 0.005, 0.050)


def test_backoff_delay_is_uniform_within_bounds():
    policy = BackoffPolicy(attempts=1, min_delay=0.01, max_delay=0.02)
    rng = random.Random(4)
    delays = [policy.delay(rng) for _ in range(500)]
    assert all(0.01 <= d <= 0.02 for d in delays)
    assert max(delays) - min(delays) > 0.009  # jitter actually spreads


def test_retry_after_covers_a_competitor_round():
    config = SelectorConfig(
        max_retries=2, refetch_delay=(0, 0.01), backoff=BackoffPolicy(1, 0, 0.05)
    )
    assert config.retry_after == pytest.approx(2 * (2 * 0.01 + 0.05))
    assert SelectorConfig(max_retries=0, backoff=BackoffPolicy(0, 0, 0)).retry_after > 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": -1},
        {"attempts": 1.5},
        {"min_delay": -0.1},
        {"min_delay": 0.2, "max_delay": 0.1},
        {"max_delay": float("inf")},
    ],
)
def test_backoff_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        BackoffPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_retries": -1},
        {"fetch_limit": 0},
        {"calm_fetch_limit": 0},
        {"refetch_delay": (0.01, 0.001)},
        {"refetch_delay": [0.001, 0.01]},
        {"cache_ttl": 0},
        {"cache_ttl": float("nan")},
        {"cache_max_wallets": 0},
        {"backoff": 3},
    ],
)
def test_selector_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        SelectorConfig(**kwargs)
