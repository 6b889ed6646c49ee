"""The strategies compared: ours and its baselines, each as one replica process runs it.

``ours`` is the shipped selector with the shipped defaults (``common.knobs``, no
``SHERDLOCK_*`` variable from the caller's environment), ``ours+listener`` the same with
``SHERDLOCK_LISTEN=1``. ``reference`` is the strongest simple design: a hand-written
one-statement selector with ours' guarantees, on minimal tables of its own
(``bench.strategies.reference``); ours is measured against it at every point, apart from the
baselines ours must beat. The baselines keep their own SQL and read the same knobs
(``common.knobs``); they run in replicas with ours' environment. ``floor`` is pgbench running
our own statements, an informational reference outside the replica processes
(``bench.strategies.floor``); it is not a baseline for the targets.
"""

from __future__ import annotations

import importlib.util
import os
import random

from bench.strategies.base import Picked, Spent, Strategy, payment, spend

OURS = "ours"
LISTENER = "ours+listener"
SERIALIZED = "serialized"
ADVISORY = "serialized-advisory"
SEED = "seed-faithful"
SKIP_LOCKED = "skip-locked-statement"
CACHE_BATCH = "cache-batch"
REFERENCE = "reference"
FLOOR = "floor"
HTTP = "ours-http"
# Ours with a selection strategy other than the default (bench.selection_strategies): the
# same replicas and settings, each selection naming the strategy.
SELECTION_STRATEGIES = ("smallest_first", "fewest_tokens", "exact", "consolidate")
OURS_WITH = "ours:"
# What ours must beat at every target point.
BASELINES = (SERIALIZED, ADVISORY, SEED, SKIP_LOCKED, CACHE_BATCH)
ALL = (OURS, LISTENER, REFERENCE, *BASELINES, FLOOR)
# Strategies whose figures are divided by those of the reference, the baselines and the floor.
CANDIDATES = (OURS, LISTENER)

# The one place that says which environment the replicas of each strategy run with: variables
# set here override, every other SHERDLOCK_* variable of the caller is removed, so that ours
# runs exactly what ships. Those that only say where things are stay.
ENVIRONMENTS: dict[str, dict[str, str]] = {OURS: {}, LISTENER: {"SHERDLOCK_LISTEN": "1"}}
# Kept from the caller's environment: where things are, and the schema's shape (fixed at migrate).
KEPT = ("SHERDLOCK_DATA_DIR", "SHERDLOCK_TEST_DB", "SHERDLOCK_PARTITIONS")

__all__ = [
    "ALL",
    "BASELINES",
    "CANDIDATES",
    "Picked",
    "Spent",
    "Strategy",
    "build",
    "deploy",
    "environment",
    "listener_available",
    "overrides",
    "payment",
    "spend",
]


def environment(name: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Return the whole environment the replicas of strategy ``name`` run with.

    ``base`` defaults to this process's environment; strategies without an entry of their own
    (the baselines, the HTTP server) get ours'.
    """
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not k.startswith("SHERDLOCK_") or k in KEPT
    }
    env.update(ENVIRONMENTS.get(name, ENVIRONMENTS[OURS]))
    return env


def overrides(name: str) -> dict[str, str]:
    """Return the variables strategy ``name`` sets on top of the shipped defaults."""
    return dict(ENVIRONMENTS.get(name, ENVIRONMENTS[OURS]))


def deploy(name: str) -> bool:
    """Set the database up as a deployment with strategy ``name``'s settings would be.

    Where replicas listen for cache notifications, the triggers that publish them are
    installed (``locks.notifications``); elsewhere they are not, as ``migrate`` leaves them
    for the setting. Return whether they are installed.
    """
    from common.knobs import knobs

    value = overrides(name).get("SHERDLOCK_LISTEN")
    listen = (
        knobs().listen if value is None else value.strip().lower() in ("1", "true", "yes", "on")
    )
    if importlib.util.find_spec("locks.notifications") is None:
        return True  # an older schema publishes from triggers that are always there
    from locks import notifications

    if listen != notifications.installed():
        (notifications.install if listen else notifications.uninstall)()
    return listen


def listener_available() -> bool:
    """Tell whether the LISTEN/NOTIFY cache updater (``locks.listener``) is installed."""
    return importlib.util.find_spec("locks.listener") is not None


def build(name: str, seed: int) -> Strategy:
    """Create a strategy for one replica process (Django must be set up)."""
    rng = random.Random(seed)
    if name in (OURS, LISTENER) or name.startswith(OURS_WITH):
        from bench.strategies.ours import Ours

        return Ours(name)
    if name == SEED:
        from bench.strategies.seed import SeedFaithful

        return SeedFaithful(rng)
    if name == SERIALIZED:
        from bench.strategies.serialized import Serialized

        return Serialized(rng)
    if name == ADVISORY:
        from bench.strategies.advisory import SerializedAdvisory

        return SerializedAdvisory(rng)
    if name == SKIP_LOCKED:
        from bench.strategies.skiplocked import SkipLockedStatement

        return SkipLockedStatement(rng)
    if name == REFERENCE:
        from bench.strategies.reference import Reference

        return Reference(rng)
    if name == CACHE_BATCH:
        from bench.strategies.cachebatch import CacheBatch

        return CacheBatch(rng)
    raise ValueError(f"{name!r} does not run in replica processes")
