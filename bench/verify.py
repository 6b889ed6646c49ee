"""Figures of one measured point, and the audit that no token was ever handed out twice."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from itertools import pairwise

from bench.worker import Record

OUTCOMES = ("selected", "insufficient_funds", "funds_locked", "no_match", "rate_limited", "error")
# Selections that start this many seconds into a point or later make its steady figures: the
# start (every replica arriving at once, a wallet not yet in the shape its load gives it) is a
# good part of a short point's p99.
STEADY_AFTER = 1.0


def percentile(values: list[float], fraction: float) -> float | None:
    """Return the nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def latency_ms(latencies: list[float]) -> dict[str, float | None]:
    """Summarize latencies in seconds as p50/p99/mean milliseconds."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    mean = sum(latencies) / len(latencies) if latencies else None
    return {
        "p50": ms(percentile(latencies, 0.5)),
        "p99": ms(percentile(latencies, 0.99)),
        "mean": ms(mean),
    }


def overlapping_holds(records: Iterable[Record]) -> int:
    """Count tokens held by two selections at once (a spent token is held forever)."""
    spans: dict[object, list[tuple[float, float]]] = defaultdict(list)
    for record in records:
        if record.outcome == "selected":
            for token in record.tokens:
                spans[token].append((record.acquired, record.ended))
    doubled = 0
    for intervals in spans.values():
        intervals.sort()
        if any(start < end for (_, end), (start, _) in pairwise(intervals)):
            doubled += 1
    return doubled


def spent_twice(records: Iterable[Record], stored: Mapping[object, str]) -> int:
    """Count tokens spent by two selections, or whose stored spender is not the recorded one."""
    spent_by: dict[object, str] = {}
    bad = set()
    for record in records:
        if record.action == "spent":
            for token in record.tokens:
                if token in spent_by:
                    bad.add(token)
                spent_by[token] = record.tx_id
    # Spends are single statements, so a recorded spend is committed; the books must agree.
    bad |= {token for token, tx_id in spent_by.items() if stored.get(token) != tx_id}
    bad |= {token for token in stored if token not in spent_by}
    return len(bad)


def figures(records: list[Record], elapsed: float, supply: Mapping[str, int]) -> dict:
    """Return the throughput, latency and contention figures of one point.

    ``supply`` is each wallet's conserved unspent quantity: an insufficient-funds answer for a
    request it covers is spurious.
    """
    outcomes = Counter(record.outcome for record in records)
    selected = [r for r in records if r.outcome == "selected"]
    locked = sum(len(r.tokens) for r in selected)
    known = [r.attempts for r in records if r.attempts is not None]
    attempts = sum(known) if len(known) == len(records) and records else None
    spurious = sum(
        r.outcome == "insufficient_funds" and supply.get(r.wallet, 0) >= r.quantity for r in records
    )
    actions = Counter(r.action for r in selected)
    start = min((r.started for r in records), default=0.0)
    return {
        "selections": len(selected),
        "selections_per_s": round(len(selected) / elapsed, 2) if elapsed > 0 else None,
        "latency_ms": latency_ms([r.latency for r in selected]),
        "latency_after_first_second_ms": latency_ms(
            [r.latency for r in selected if r.started - start >= STEADY_AFTER]
        ),
        "outcomes": {name: outcomes.get(name, 0) for name in OUTCOMES},
        "spent": actions.get("spent", 0),
        "released": actions.get("released", 0),
        "spend_failures": actions.get("spend_failed", 0),
        "release_failures": actions.get("release_failed", 0),
        "lock_attempts": attempts,
        "locked_tokens": locked,
        "attempts_per_locked_token": round(attempts / locked, 3) if attempts and locked else None,
        "spurious_insufficient_funds": spurious,
        # What the selections cost the wallets: tokens in, change out (strategies differ).
        "inputs_per_selection": round(locked / len(selected), 3) if selected else None,
        "change_per_selection": (
            round(sum(r.total - r.quantity for r in selected) / len(selected), 3)
            if selected
            else None
        ),
        # Errors of spends and releases (retried once), apart from failed selections.
        "lifecycle_errors": sum(bool(r.error) and r.outcome == "selected" for r in records),
        "errors": sorted({r.error for r in records if r.error})[:3],
    }
