"""The figures of a point after its first second, and the ratio printed beside the p99 target."""

from __future__ import annotations

from bench.service_targets import http_targets
from bench.targets import selection_targets
from bench.verify import STEADY_AFTER, figures
from bench.worker import Record


def record(started: float, latency: float, outcome: str = "selected") -> Record:
    tokens = (1,) if outcome == "selected" else ()
    action = "released" if outcome == "selected" else ""
    return Record(
        "t", "w", 1, started, latency, outcome, tokens, started, started, action, 1, "", 1
    )


def test_selections_of_the_first_second_stay_out_of_the_steady_figures():
    records = [record(100.0, 0.500)]  # the point's start, slow
    records += [record(100.0 + STEADY_AFTER - 0.01, 0.400)]  # still in the first second
    records += [record(100.0 + STEADY_AFTER + k / 100, 0.010) for k in range(99)]
    records += [record(103.0, 0.900, outcome="funds_locked")]  # not a selection
    point = figures(records, 3.0, {"w": 10})
    assert point["latency_ms"]["p99"] == 400.0
    assert point["latency_after_first_second_ms"] == {"p50": 10.0, "p99": 10.0, "mean": 10.0}


def point(strategy: str, p99: float, steady: float | None) -> dict:
    return {
        "workload": "hot-tokens",
        "replicas": 20,
        "strategy": strategy,
        "selections_per_s": 100.0,
        "latency_ms": {"p99": p99},
        "latency_after_first_second_ms": {"p99": steady},
        "attempts_per_locked_token": 1.0,
    }


def test_the_steady_ratio_is_printed_beside_the_p99_target_and_not_judged():
    points = [
        point("ours", 90.0, 55.0),
        point("serialized-advisory", 60.0, 50.0),
        point("cache-batch", 300.0, 44.0),  # the lowest after the first second
    ]
    targets = {
        t["target"]: t
        for t in selection_targets(points)
        if (t["workload"], t["replicas"]) == ("hot-tokens", 20)
    }
    assert targets["p99 <= 1.1x the lowest baseline p99"]["value"] == 1.5
    assert targets["p99 <= 1.1x the lowest baseline p99"]["met"] is False
    steady = targets["p99 after the first second ÷ the lowest baseline's"]
    assert steady["value"] == 1.25 and steady["note"] == "lowest: cache-batch"
    assert steady["info"] is True and steady["met"] is None


def test_no_steady_figures_print_no_ratio():
    points = [point("ours", 90.0, None), point("serialized-advisory", 60.0, None)]
    [steady] = [
        t
        for t in selection_targets(points)
        if (t["workload"], t["replicas"]) == ("hot-tokens", 20)
        and t["target"].startswith("p99 after")
    ]
    assert steady["value"] is None and steady["met"] is None


def test_the_http_steady_ratio_is_printed_with_the_connection_split_and_not_judged():
    def latency(p99: float, steady: float) -> dict:
        return {"latency_ms": {"p99": p99}, "latency_after_first_second_ms": {"p99": steady}}

    pair = {
        "workload": "spread",
        "replicas": 8,
        "library": latency(5.0, 5.0),
        "http": {**latency(27.0, 18.0), "connections_per_worker": [7, 1]},
        "ratios": {"selections_per_s": 0.3, "p99": 5.4},
    }
    targets = {t["target"]: t for t in http_targets([pair])}
    assert targets["ours-http select p99 <= 3x ours"]["met"] is False
    steady = targets["ours-http select p99 after the first second ÷ ours'"]
    assert steady["value"] == 3.6 and steady["note"] == "connections per worker 7/1"
    assert steady["info"] is True and steady["met"] is None


def test_the_http_select_mean_ratio_is_printed_with_both_tail_shapes_and_not_judged():
    def latency(mean: float, p99: float) -> dict:
        return {"latency_ms": {"mean": mean, "p99": p99}}

    pair = {
        "workload": "spread",
        "replicas": 8,
        "library": latency(2.0, 6.0),
        "http": {**latency(8.0, 32.0), "connections_per_worker": [5, 3]},
        "ratios": {"selections_per_s": 0.3, "p99": 32.0 / 6.0},
    }
    targets = {t["target"]: t for t in http_targets([pair])}
    mean = targets["ours-http select mean ÷ ours'"]
    assert mean["value"] == 4.0 and mean["note"] == "p99 ÷ mean 4.00, ours' 3.00"
    assert mean["info"] is True and mean["met"] is None
    pair["http"] = {"latency_ms": {}}  # no selection answered
    mean = {t["target"]: t for t in http_targets([pair])}["ours-http select mean ÷ ours'"]
    assert mean["value"] is None and mean["note"] == ""
