"""The reference in the report: ours ÷ it at every point, its targets, and the ratio held."""

from __future__ import annotations

from bench.check import compare
from bench.render import reference_table, selection_table
from bench.report import ratios
from bench.strategies import CACHE_BATCH, OURS, REFERENCE
from bench.targets import REFERENCE_RATIOS, reference_targets, selection_targets


def point(workload: str, strategy: str, rate: float, p99: float, replicas: int = 8) -> dict:
    return {
        "workload": workload,
        "replicas": replicas,
        "strategy": strategy,
        "selections_per_s": rate,
        "latency_ms": {"p99": p99},
        "latency_after_first_second_ms": {"p99": p99},
        "attempts_per_locked_token": 1.0,
        "outcomes": {},
    }


def test_ours_is_divided_by_the_reference_at_every_point_where_both_ran():
    points = [
        point("spread", OURS, 900.0, 9.0),
        point("spread", REFERENCE, 1000.0, 6.0),
        point("hot-wallet", OURS, 800.0, 16.0, replicas=3),  # not a target point
        point("hot-wallet", REFERENCE, 400.0, 20.0, replicas=3),
    ]
    found = {
        (r["workload"], r["replicas"]): r["value"]
        for r in ratios(points)
        if r["baseline"] == REFERENCE
    }
    assert found == {("spread", 8): 0.9, ("hot-wallet", 3): 2.0}
    table = "\n".join(reference_table(points))
    assert "strongest simple design" in table
    [spread] = [line for line in table.splitlines() if line.strip().startswith("spread")]
    assert spread.split()[4:8] == ["0.90", "9.0", "6.0", "1.50"]  # sel/s ratio; p99s, ratio
    # In the main table the reference's row carries ours ÷ it, as a baseline's does.
    [row] = [
        line for line in selection_table(points) if line.split()[:3] == ["spread", "8", REFERENCE]
    ]
    assert row.split()[-1] == "0.90"


def test_the_reference_is_not_a_baseline_of_the_selection_targets():
    points = [
        point("spread", OURS, 900.0, 9.0),
        point("spread", REFERENCE, 1000.0, 6.0),
        point("spread", CACHE_BATCH, 300.0, 30.0),
    ]
    [rate] = [
        t
        for t in selection_targets(points)
        if t["workload"] == "spread" and t["target"].startswith("selections/s")
    ]
    assert rate["value"] == 3.0 and rate["met"] is True


def test_the_reference_targets_hold_ours_to_each_workloads_ratios():
    points = [
        point("spread", OURS, 900.0, 6.6),
        point("spread", REFERENCE, 1000.0, 6.0),
        point("hot-tokens", OURS, 990.0, 5.0),
        point("hot-tokens", REFERENCE, 1000.0, 6.0),
    ]
    found = {
        (t["workload"], t["target"].split()[0]): t
        for t in reference_targets(points)
        if t["replicas"] == 8 and t["measured"]
    }
    assert set(found) == {
        ("spread", "selections/s"),
        ("spread", "p99"),
        ("hot-tokens", "selections/s"),
        ("hot-tokens", "p99"),
    }
    assert "the strongest simple design" in found[("spread", "p99")]["target"]
    # Spread: 0.9x the selections/s and 1.1x the p99 are met exactly.
    assert found[("spread", "selections/s")]["threshold"] == REFERENCE_RATIOS["spread"][0] == 0.9
    assert found[("spread", "selections/s")]["met"] and found[("spread", "p99")]["met"]
    # Hot tokens: ours must match its selections/s (0.99x is not enough) with a p99 no higher.
    assert found[("hot-tokens", "selections/s")]["met"] is False
    assert found[("hot-tokens", "p99")]["met"] is True


def report(reference: float, cache: float) -> dict:
    def ratio(baseline: str, value: float) -> dict:
        return {
            "workload": "spread",
            "replicas": 8,
            "strategy": OURS,
            "baseline": baseline,
            "value": value,
        }

    return {"points": [], "ratios": [ratio(REFERENCE, reference), ratio(CACHE_BATCH, cache)]}


def test_ours_divided_by_the_reference_is_held_apart_from_the_best_baseline():
    regressions, lines = compare(report(0.6, 2.0), report(0.9, 2.0), tolerance=0.25)
    assert len(regressions) == 1 and f"{OURS}÷{REFERENCE}" in regressions[0]
    # A reference far ahead of ours is not the best baseline: ours ÷ cache-batch is held alone.
    assert any(line.startswith("ok") and "the best baseline" in line for line in lines)
    assert compare(report(0.8, 2.0), report(0.9, 2.0), tolerance=0.25)[0] == []
