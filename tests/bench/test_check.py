"""bench.check: which ratios a fresh report is held to."""

from __future__ import annotations

from bench.check import COLLAPSED, HTTP_HELD_REPLICAS, compare, suspects
from bench.strategies import ADVISORY, CACHE_BATCH, FLOOR, HTTP, LISTENER, OURS, SKIP_LOCKED


def ratio(strategy: str, baseline: str, value: float, replicas: int = 8) -> dict:
    return {
        "workload": "hot-tokens",
        "replicas": replicas,
        "strategy": strategy,
        "baseline": baseline,
        "value": value,
    }


def report(*ratios: dict) -> dict:
    return {"points": [], "ratios": list(ratios)}


def ours(**values: float) -> dict:
    names = {"advisory": ADVISORY, "skip": SKIP_LOCKED, "cache": CACHE_BATCH, "floor": FLOOR}
    return report(*(ratio(OURS, names[name], value) for name, value in values.items()))


def verdicts(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


def test_a_drop_against_the_best_baseline_beyond_the_tolerance_is_a_regression():
    regressions, _ = compare(ours(advisory=1.0), ours(advisory=1.5), tolerance=0.25)
    assert len(regressions) == 1 and "the best baseline" in regressions[0]
    assert compare(ours(advisory=1.2), ours(advisory=1.5), tolerance=0.25)[0] == []


def test_ours_is_held_to_the_best_baseline_and_the_others_are_listed():
    # The best baseline is the one ours leads by least: cache-batch (1.2x) here.
    baseline = ours(advisory=3.0, cache=1.2, floor=1.5)
    # Every other ratio fell by half, the one to the best baseline held.
    regressions, lines = compare(ours(advisory=1.5, cache=1.2, floor=0.7), baseline, tolerance=0.25)
    assert regressions == []
    assert sorted(verdicts(lines)) == ["listed", "listed", "listed", "ok"]
    # The best baseline got relatively faster: ours ÷ it fell from 1.2 to 0.8.
    regressions, _ = compare(ours(advisory=3.0, cache=0.8, floor=1.5), baseline, tolerance=0.25)
    assert len(regressions) == 1 and "1.20" in regressions[0]
    # Another baseline became the best, and ours leads it by less than the tolerance allows.
    regressions, _ = compare(ours(advisory=0.8, cache=1.2, floor=1.5), baseline, tolerance=0.25)
    assert len(regressions) == 1 and "0.80" in regressions[0]


def test_the_listener_variants_ratios_are_listed_not_held():
    current = report(ratio(OURS, CACHE_BATCH, 1.2), ratio(LISTENER, CACHE_BATCH, 0.5))
    baseline = report(ratio(OURS, CACHE_BATCH, 1.2), ratio(LISTENER, CACHE_BATCH, 1.0))
    regressions, lines = compare(current, baseline, tolerance=0.25)
    assert regressions == []
    assert next(line for line in lines if LISTENER in line).startswith("listed")


def test_the_http_ratio_is_held_at_the_targets_replica_count_only():
    def http(held: float, fewer: float) -> dict:
        return report(
            ratio(HTTP, OURS, held, replicas=HTTP_HELD_REPLICAS),
            ratio(HTTP, OURS, fewer, replicas=HTTP_HELD_REPLICAS // 2),
        )

    regressions, lines = compare(http(0.30, 0.15), http(0.32, 0.30), tolerance=0.25)
    assert regressions == []
    assert sorted(verdicts(lines)) == ["listed", "ok"]
    regressions, _ = compare(http(0.20, 0.30), http(0.32, 0.30), tolerance=0.25)
    assert len(regressions) == 1 and f"R={HTTP_HELD_REPLICAS} {HTTP}" in regressions[0]


def test_a_point_where_every_baseline_collapsed_in_both_runs_is_skipped():
    high = COLLAPSED * 20
    regressions, lines = compare(ours(skip=COLLAPSED + 5), ours(skip=high), tolerance=0.25)
    assert regressions == []
    assert verdicts(lines) == ["skipped", "listed"]
    # Collapsed in the baseline only: the fresh run is held to it.
    regressions, _ = compare(ours(skip=2.0), ours(skip=high), tolerance=0.25)
    assert len(regressions) == 1


def test_a_collapsed_baseline_does_not_hide_a_drop_against_one_that_did_not_collapse():
    high = COLLAPSED * 20
    regressions, _ = compare(
        ours(skip=COLLAPSED + 5, cache=1.0), ours(skip=high, cache=2.0), tolerance=0.25
    )
    assert len(regressions) == 1 and "1.00 vs baseline 2.00" in regressions[0]


def test_the_best_baseline_is_the_best_of_those_both_runs_measured():
    # The fresh run also measured serialized-advisory, which the baseline run left out: ours
    # leads it by less, but there is nothing to compare that with.
    regressions, lines = compare(ours(advisory=1.1, cache=3.0), ours(cache=3.0), tolerance=0.25)
    assert regressions == []
    assert verdicts(lines) == ["ok", "listed"]


def measured(data: dict, *points: tuple[str, int]) -> dict:
    """``data`` as a report that measured ours at ``points`` (workload, replicas)."""
    rows = [{"workload": w, "replicas": r, "strategy": OURS} for w, r in points]
    return dict(data, points=rows)


def test_the_points_whose_held_figures_dropped_are_named_for_measuring_again():
    baseline = report(
        ratio(OURS, CACHE_BATCH, 1.5),
        ratio(OURS, CACHE_BATCH, 1.5, replicas=20),
        ratio(HTTP, OURS, 0.32, replicas=HTTP_HELD_REPLICAS),
        ratio(LISTENER, CACHE_BATCH, 1.0),
    )
    current = report(
        ratio(OURS, CACHE_BATCH, 1.0),  # dropped
        ratio(OURS, CACHE_BATCH, 1.4, replicas=20),  # held
        ratio(HTTP, OURS, 0.20, replicas=HTTP_HELD_REPLICAS),  # dropped
        ratio(LISTENER, CACHE_BATCH, 0.1),  # listed, not held
    )
    assert suspects(current, baseline, tolerance=0.25) == {
        "selection": {"hot-tokens": [8]},
        "http": {"hot-tokens": [HTTP_HELD_REPLICAS]},
    }
    assert suspects(baseline, baseline, tolerance=0.25) == {}


def test_a_drop_that_the_confirmation_does_not_show_again_is_noise():
    baseline = ours(cache=1.5)
    current = measured(ours(cache=1.0), ("hot-tokens", 8))
    recovered = measured(ours(cache=1.45), ("hot-tokens", 8))
    regressions, lines = compare(current, baseline, tolerance=0.25, confirmation=recovered)
    assert regressions == []
    assert verdicts(lines) == ["noise", "listed"]  # ours ÷ cache-batch itself is listed
    assert "1.00 vs baseline 1.50" in lines[0] and "measured again: 1.45" in lines[0]


def test_a_drop_that_shows_again_is_a_regression():
    baseline = ours(cache=1.5)
    current = measured(ours(cache=1.0), ("hot-tokens", 8))
    again = measured(ours(cache=0.9), ("hot-tokens", 8))
    regressions, lines = compare(current, baseline, tolerance=0.25, confirmation=again)
    assert len(regressions) == 1 and "measured again: 0.90" in regressions[0]
    assert verdicts(lines) == ["REGRESSED", "listed"]


def test_a_drop_at_a_point_the_confirmation_did_not_measure_stands():
    baseline = ours(cache=1.5)
    current = measured(ours(cache=1.0), ("hot-tokens", 8))
    elsewhere = measured(ours(cache=1.5), ("spread", 8))
    regressions, _ = compare(current, baseline, tolerance=0.25, confirmation=elsewhere)
    assert len(regressions) == 1 and "measured again" not in regressions[0]


def test_a_fault_in_the_confirmation_fails_the_check():
    baseline = ours(cache=1.5)
    current = measured(ours(cache=1.0), ("hot-tokens", 8))
    faulty = measured(ours(cache=1.5), ("hot-tokens", 8))
    faulty["points"][0]["double_spends"] = 1
    regressions, _ = compare(current, baseline, tolerance=0.25, confirmation=faulty)
    assert any(r.startswith("correctness (confirmation)") for r in regressions)
