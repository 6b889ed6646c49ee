"""The strategies compared: ours and its baselines, each as one replica process runs it.

``ours`` and ``ours+listener`` are the shipped selector in replicas started with
``SHERDLOCK_LISTEN=0`` and ``=1`` (the latter only when ``locks.listener`` exists);
``seed-faithful`` and ``serialized`` are baselines in Python on the same connection; ``floor``
is pgbench and runs outside the replica processes (``bench.strategies.floor``).
"""

from __future__ import annotations

import importlib.util
import random

from bench.strategies.base import Picked, Strategy, spend

OURS = "ours"
LISTENER = "ours+listener"
SEED = "seed-faithful"
SERIALIZED = "serialized"
FLOOR = "floor"
HTTP = "ours-http"
ALL = (OURS, LISTENER, SEED, SERIALIZED, FLOOR)
# Strategies whose figures are divided by those of the baselines.
CANDIDATES = (OURS, LISTENER, HTTP)
BASELINES = (SEED, SERIALIZED, FLOOR)
# Environment of the replica processes that run each strategy; the others share ours'.
ENVIRONMENTS = {OURS: {"SHERDLOCK_LISTEN": "0"}, LISTENER: {"SHERDLOCK_LISTEN": "1"}}


def environment(name: str) -> dict[str, str]:
    """Return the environment variables the replicas of strategy ``name`` run with."""
    return ENVIRONMENTS.get(name, ENVIRONMENTS[OURS])

__all__ = ["ALL", "BASELINES", "CANDIDATES", "Picked", "Strategy", "build", "environment",
           "listener_available", "spend"]


def listener_available() -> bool:
    """Tell whether the LISTEN/NOTIFY cache updater (``locks.listener``) is installed."""
    return importlib.util.find_spec("locks.listener") is not None


def build(name: str, seed: int) -> Strategy:
    """Create a strategy for one replica process (Django must be set up)."""
    rng = random.Random(seed)
    if name in (OURS, LISTENER):
        from bench.strategies.ours import Ours

        return Ours(name)
    if name == SEED:
        from bench.strategies.seed import SeedFaithful

        return SeedFaithful(rng)
    if name == SERIALIZED:
        from bench.strategies.serialized import Serialized

        return Serialized(rng)
    raise ValueError(f"{name!r} does not run in replica processes")
