"""bench.check: which ratios a fresh report is held to."""

from __future__ import annotations

from bench.check import COLLAPSED, compare


def report(strategy: str = "ours", **ratios: float) -> dict:
    return {
        "points": [],
        "ratios": [
            {
                "workload": "hot-tokens",
                "replicas": 8,
                "strategy": strategy,
                "baseline": name,
                "value": value,
            }
            for name, value in ratios.items()
        ],
    }


def both(ours: dict, listener: dict) -> dict:
    return {"points": [], "ratios": ours["ratios"] + listener["ratios"]}


def test_a_drop_beyond_the_tolerance_is_a_regression():
    regressions, _ = compare(report(advisory=1.0), report(advisory=1.5), tolerance=0.25)
    assert len(regressions) == 1 and "advisory" in regressions[0]
    assert compare(report(advisory=1.2), report(advisory=1.5), tolerance=0.25)[0] == []


def test_ratios_to_a_baseline_that_collapsed_in_both_runs_are_listed_not_compared():
    high = COLLAPSED * 20
    regressions, lines = compare(
        report(skip=COLLAPSED + 1, cache=COLLAPSED + 1),
        report(skip=high, cache=COLLAPSED - 1),
        tolerance=0.25,
    )
    assert [line.split()[0] for line in lines] == ["ok", "skipped"]
    assert regressions == []
    # Collapsed in the baseline only: the fresh run is held to it.
    regressions, _ = compare(report(skip=2.0), report(skip=high), tolerance=0.25)
    assert len(regressions) == 1


def test_a_collapsed_baseline_is_skipped_for_every_candidate_at_that_point():
    high = COLLAPSED * 20
    current = both(report(skip=COLLAPSED + 5), report("ours+listener", skip=COLLAPSED - 5))
    baseline = both(report(skip=high), report("ours+listener", skip=high / 2))
    regressions, lines = compare(current, baseline, tolerance=0.25)
    assert regressions == []
    assert [line.split()[0] for line in lines] == ["skipped", "skipped"]
