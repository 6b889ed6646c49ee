"""Prometheus metrics of the lock table, registered in the process-wide default registry."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from sherdlock import STRATEGIES, SelectionStats

# housekeeping
HOUSEKEEPING_DELETED = Counter(
    "sherdlock_housekeeping_deleted_total",
    "Rows removed by housekeeping: expired leases, locks of spent tokens (lock rows), and "
    "rate-limit buckets idle for a full period.",
    ["kind"],
)
# Passes run in Celery worker processes; with PROMETHEUS_MULTIPROC_DIR set, /metrics reads their
# files, and "max" reports the latest pass of any process, dead ones included.
HOUSEKEEPING_LAST_RUN = Gauge(
    "sherdlock_housekeeping_last_run_timestamp_seconds",
    "Unix time at which the last housekeeping pass that held the guard finished.",
    multiprocess_mode="max",
)

HOUSEKEEPING_STATISTICS_CLEARED = Counter(
    "sherdlock_housekeeping_statistics_cleared_total",
    "Times housekeeping cleared the lock table's statistics (a table or a partition) because "
    "they said it was too small to plan on, as after a quiet spell.",
)

# Export both series from the first scrape, before anything has been removed.
for _kind in ("expired", "spent", "rate_buckets"):
    HOUSEKEEPING_DELETED.labels(kind=_kind)

# listener
LISTENER_NOTIFICATIONS = Counter(
    "sherdlock_listener_notifications_total",
    "Change notifications applied to this replica's token cache, by event.",
    ["event"],
)
LISTENER_RECONNECTS = Counter(
    "sherdlock_listener_reconnects_total",
    "Times the cache listener connected again after losing its connection.",
)
LISTENER_INVALIDATIONS = Counter(
    "sherdlock_listener_invalidations_total",
    "Cache invalidations by the listener: every queue (connect, reset, bad payload) or one key "
    "(overflow).",
    ["scope"],
)

# Per process (pid label under PROMETHEUS_MULTIPROC_DIR, live processes only), a series for each
# listener the process started: the cache listener (SHERDLOCK_LISTEN) and the wake-up listener
# of waiting requests (Prefer: wait). 0 while it reconnects: caches then live CACHE_TTL, and
# waiting requests look for their turn every poll instead of being woken.
LISTENER_CONNECTED = Gauge(
    "sherdlock_listener_connected",
    "1 while the listener holds its LISTEN session, 0 while it reconnects.",
    ["listener"],
    multiprocess_mode="liveall",
)

for _event in ("issued", "spent", "locked", "released", "overflow", "reset", "invalid"):
    LISTENER_NOTIFICATIONS.labels(event=_event)
for _scope in ("all", "key"):
    LISTENER_INVALIDATIONS.labels(scope=_scope)

# waiting for held funds (Prefer: wait), per web process: its slots are WAIT_SLOTS at most
WAITING_REQUESTS = Gauge(
    "sherdlock_waiting_requests",
    "Requests of this process waiting in a wallet's queue for held funds (Prefer: wait).",
    multiprocess_mode="liveall",
)

# selection
SELECTION_OUTCOMES = ("success", "insufficient_funds", "funds_locked", "no_match", "error")
SELECTION_DURATION = Histogram(
    "sherdlock_selection_duration_seconds",
    "Time one selection took in the selector, retries and backoff included.",
    ["outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
SELECTIONS = Counter("sherdlock_selections_total", "Selections by outcome.", ["outcome"])
SELECTION_RETRIES = Counter(
    "sherdlock_selection_retries_total",
    "Backoff rounds run after a round lost to contention (rounds - 1 per selection).",
)
LOCK_ATTEMPTS = Counter(
    "sherdlock_lock_attempts_total",
    "Tokens submitted for locking: try-lock batches and the prefixes fetches chose.",
)
LOCK_CONFLICTS = Counter(
    "sherdlock_lock_conflicts_total",
    "Lock attempts lost to another spender (held, spent or being touched), fetches included.",
)
CACHE_HITS = Counter("sherdlock_cache_hits_total", "Cached candidates that were then locked.")
FETCHES = Counter("sherdlock_fetches_total", "Fetch-and-lock queries (cache refills) run.")

# strategies: how often each is used, and what its selections cost in inputs and change
STRATEGY_SELECTIONS = Counter(
    "sherdlock_strategy_selections_total",
    "Selections by the strategy that made them (an exact one that fell back: random) and outcome.",
    ["strategy", "outcome"],
)
STRATEGY_INPUTS = Counter(
    "sherdlock_selection_inputs_total",
    "Tokens locked by successful selections, by strategy.",
    ["strategy"],
)
STRATEGY_CHANGE = Counter(
    "sherdlock_selection_change_total",
    "Change produced by successful selections (total - quantity), by strategy.",
    ["strategy"],
)

for _outcome in SELECTION_OUTCOMES:
    SELECTIONS.labels(outcome=_outcome)
for _strategy in STRATEGIES:
    STRATEGY_INPUTS.labels(strategy=_strategy)
    STRATEGY_CHANGE.labels(strategy=_strategy)
    for _outcome in SELECTION_OUTCOMES:
        STRATEGY_SELECTIONS.labels(strategy=_strategy, outcome=_outcome)


_children: dict[tuple[object, ...], Any] = {}


def _labelled(metric: Any, *values: str) -> Any:
    """Return ``metric.labels(*values)``, kept: labels() checks and looks them up every call."""
    key = (metric, *values)
    child = _children.get(key)
    if child is None:
        child = _children.setdefault(key, metric.labels(*values))
    return child


def record_selection(
    seconds: float,
    outcome: str,
    stats: SelectionStats | None,
    *,
    strategy: str = "random",
    selection: object | None = None,
) -> None:
    """Record one selection: its duration and outcome, and the work its stats counted.

    A successful one gives its ``selection`` (a ``locks.models.Selection``): its strategy,
    inputs and change are counted.
    """
    _labelled(SELECTION_DURATION, outcome).observe(seconds)
    _labelled(SELECTIONS, outcome).inc()
    if selection is not None:
        strategy = getattr(selection, "strategy", strategy)
        _labelled(STRATEGY_INPUTS, strategy).inc(len(selection.token_ids))  # type: ignore[attr-defined]
        change = selection.total - selection.quantity  # type: ignore[attr-defined]
        _labelled(STRATEGY_CHANGE, strategy).inc(float(change))
    _labelled(STRATEGY_SELECTIONS, strategy, outcome).inc()
    if stats is None:
        return
    SELECTION_RETRIES.inc(max(0, stats.rounds - 1))
    LOCK_ATTEMPTS.inc(stats.lock_attempts)
    LOCK_CONFLICTS.inc(stats.lock_conflicts)
    CACHE_HITS.inc(stats.cache_hits)
    FETCHES.inc(stats.fetches)
