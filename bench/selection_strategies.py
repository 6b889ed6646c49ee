"""What each selection strategy costs against random: throughput, inputs and change.

On the spread workload, one point per strategy at ``--strategy-replicas`` replicas (default 8),
each on freshly reset data, ours with every selection naming the strategy (exact falls back to
random when it finds no changeless set, consolidate sweeps up to 10 tokens:
``bench.strategies.ours.BENCH_TERMS``). Reported per strategy: selections/s, p50/p99, inputs
and change per selection, and each ÷ random's in the same run, and the answers that the
strategy's terms could not be met (``no_match``: a consolidation the 10 largest free tokens
cannot cover, once spends have split a wallet into small tokens). The correctness audit of
every point (double spends, leaked locks, conserved supply) joins the report's.

    python -m bench --selection-strategies smallest_first,exact --strategy-replicas 8 ...
"""

from __future__ import annotations

import argparse

from bench import seeding, strategies

RANDOM = "random"


def label(name: str) -> str:
    """Return the harness's strategy name for selection strategy ``name``."""
    return strategies.OURS if name == RANDOM else strategies.OURS_WITH + name


def run(args: argparse.Namespace, harness, make_workload, say) -> dict:
    """Measure random and each of ``args.selection_strategies`` on the spread workload."""
    workload = make_workload("spread", args)
    replicas = args.strategy_replicas
    say(f"selection strategies: seeding {workload.title}")
    supply = seeding.seed(workload.tokens, workload.currency)
    points = []
    for name in [RANDOM, *args.selection_strategies]:
        point = harness.measure(workload, label(name), replicas, supply, tag=f"strategy-{name}")
        point["selection_strategy"] = name
        points.append(point)
        say(
            f"selection strategy {name:<15} R={replicas:<3} "
            f"{point['selections_per_s'] or 0:>8.1f} sel/s  "
            f"inputs {point['inputs_per_selection'] or 0:5.2f}  "
            f"change {point['change_per_selection'] or 0:6.2f}"
        )
    base = points[0]
    for point in points:
        point["vs_random"] = {
            key: _ratio(point.get(key), base.get(key))
            for key in ("selections_per_s", "inputs_per_selection", "change_per_selection")
        }
    return {"workload": workload.name, "replicas": replicas, "points": points}


def _ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 3) if value is not None and base else None


def table(section: dict | None) -> list[str]:
    """Return the section as text lines (nothing when it was not measured)."""
    if not section:
        return []
    lines = [
        "",
        f"Selection strategies ({section['workload']}, R={section['replicas']}; "
        "÷ random in the same run):",
        f"  {'strategy':<16}{'sel/s':>8}{'÷':>6}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'inputs':>8}{'÷':>6}{'change':>8}{'÷':>6}{'locked':>7}{'nomatch':>8}{'err':>5}",
    ]
    for p in section["points"]:
        r, latency, outcomes = p["vs_random"], p["latency_ms"], p["outcomes"]
        lines.append(
            f"  {p['selection_strategy']:<16}{_num(p['selections_per_s'], 1):>8}"
            f"{_num(r['selections_per_s'], 2):>6}{_num(latency['p50'], 1):>8}"
            f"{_num(latency['p99'], 1):>8}{_num(p['inputs_per_selection'], 2):>8}"
            f"{_num(r['inputs_per_selection'], 2):>6}{_num(p['change_per_selection'], 2):>8}"
            f"{_num(r['change_per_selection'], 2):>6}{outcomes.get('funds_locked', 0):>7}"
            f"{outcomes.get('no_match', 0):>8}{outcomes.get('error', 0):>5}"
        )
    return lines


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
