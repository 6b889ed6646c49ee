"""The benchmark harness on a tiny configuration: correct books, a report, a plot, a check.

Timings are never asserted here; the correctness counters are, and so is the auditor that
produces them (it must catch a double spend when there is one). One run covers every
strategy on every workload, the HTTP points, a small housekeeping point and the chain.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from bench import asleep, database, strategies
from bench.strategies import BASELINES, HTTP, LISTENER, OURS, REFERENCE
from bench.verify import overlapping_holds, spent_twice
from bench.worker import Record
from tests.helpers.processes import database_url, run_module

WORKLOADS = ("spread", "hot-wallet", "hot-tokens")
CHAIN = 6
HOUSEKEEPING_SECONDS = 1.5  # not --duration: the housekeeping points have their own
TINY = [
    "--workloads",
    ",".join(WORKLOADS),
    "--replicas",
    "2",
    "--duration",
    "0.5",
    "--spread-wallets",
    "20",
    "--spread-tokens",
    "10",
    "--hot-wallet-tokens",
    "100",
    "--hot-tokens-big",
    "4",
    "--hot-tokens-big-quantity",
    "100",
    "--hot-tokens-small",
    "60",
    "--http-replicas",
    "2",
    "--hold",
    "0.002",
    "--housekeeping",
    "10x60:250",
    "--housekeeping-replicas",
    "2",
    "--housekeeping-duration",
    str(HOUSEKEEPING_SECONDS),
    "--client-cycles",
    "10",
    "--chain-payments",
    str(CHAIN),
    "--chain-processes",
    "2",
    "--chain-timeout",
    "90",
    "--pgbouncer-replicas",
    "3",
    "--pgbouncer-pool",
    "2",
    "--pgbouncer-workloads",
    "hot-wallet",
    "--strategy-replicas",
    "2",
    "--reference-rounds",
    "2",
]
REPORT_KEYS = {
    "version",
    "created_at",
    "machine",
    "config",
    "elapsed_s",
    "points",
    "reference_rounds",
    "http",
    "client_cpu",
    "housekeeping",
    "chain",
    "pgbouncer",
    "selection_strategies",
    "ratios",
    "targets",
    "skipped",
    "problems",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, Path, subprocess.CompletedProcess]:
    """Run the harness once for the module, in a database of its own on the test server."""
    out = tmp_path_factory.mktemp("bench")
    # One database per concurrent test run, as for the test database itself.
    name = os.environ.get("SHERDLOCK_TEST_DB", "test_sherdlock") + "_bench"
    # A knob in the caller's environment must not reach ours: it runs the shipped defaults.
    env = dict(
        os.environ,
        DATABASE_URL=database_url(settings.DATABASES["default"]),
        SHERDLOCK_DURABLE_LEASES="1",
    )
    done = run_module("bench", *TINY, "--out", str(out), "--database", name, env=env, timeout=540)
    try:
        assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
        yield json.loads((out / "report.json").read_text()), out, done
    finally:
        database.drop(database.renamed(env["DATABASE_URL"], name))


def assert_sound(point: dict, where: str) -> None:
    """Assert the correctness fields of one measured point."""
    # What each cycle ended in says why a point selected nothing.
    assert point["selections"] > 0, (where, point.get("outcomes"), point.get("errors"))
    assert point["leaked_locks"] == 0, where
    assert point["double_spends"] == 0, where
    assert point["spend_failures"] == 0, where
    assert point["spurious_insufficient_funds"] == 0, where
    assert point["outcomes"]["error"] == 0, (where, point["errors"])
    assert point["supply_conserved"] is True, where
    assert point["spent"] + point["released"] == point["selections"], where


@pytest.mark.timeout(600)
def test_every_strategy_ran_on_every_workload_without_a_double_spend(run):
    report, _, done = run
    assert report.keys() >= REPORT_KEYS
    points = {(p["workload"], p["strategy"]): p for p in report["points"]}
    skipped = {note["what"] for note in report["skipped"]}
    for workload in WORKLOADS:
        for strategy in (OURS, LISTENER, REFERENCE, *BASELINES):
            assert (workload, strategy) in points or strategy in skipped, (workload, strategy)
    for (workload, strategy), point in points.items():
        if strategy == "floor":
            assert point["selections"] > 0
            continue  # pgbench spends nothing and stops mid-cycle: no books to audit
        assert_sound(point, f"{workload} {strategy}")
        assert point["lock_attempts"] >= point["locked_tokens"] > 0, (workload, strategy)
        # How much of the point the replicas slept (bench.asleep), wherever the host tells.
        share = point["replicas_asleep"]
        assert (share is not None) == asleep.available(), (workload, strategy)
        assert share is None or 0 <= share <= 1, (workload, strategy)
    # One later round of ours and the reference per workload, audited like every point.
    later = {(p["workload"], p["strategy"], p["round"]): p for p in report["reference_rounds"]}
    assert set(later) == {(w, s, 1) for w in WORKLOADS for s in (OURS, REFERENCE)}
    for (workload, strategy, _), point in later.items():
        assert_sound(point, f"{workload} {strategy} round 1")
    assert report["problems"] == []
    assert "targets (reported, not asserted)" in done.stdout
    assert "ours÷" in done.stdout
    assert "Ours ÷ reference, the strongest simple design" in done.stdout


@pytest.mark.timeout(600)
def test_ours_runs_the_shipped_defaults_and_ratios_cover_every_baseline(run):
    report, _, _ = run
    points = {(p["workload"], p["strategy"]): p for p in report["points"]}
    # This test process runs the shipped settings; the variable set for the harness
    # (SHERDLOCK_DURABLE_LEASES=1) did not reach ours' replicas.
    ours = points[("hot-wallet", OURS)]
    assert ours["settings"]["DURABLE_LEASES"] is settings.SHERDLOCK["DURABLE_LEASES"] is False
    assert ours["listening"] is settings.SHERDLOCK["LISTEN"]
    listener = points[("hot-wallet", LISTENER)]
    assert listener["listening"] is True and listener["settings"]["LISTEN"] is True
    ratios = {(r["workload"], r["baseline"]) for r in report["ratios"] if r["strategy"] == OURS}
    for baseline in BASELINES:
        assert ("hot-wallet", baseline) in ratios


@pytest.mark.timeout(600)
def test_the_http_points_pair_the_server_with_the_library(run):
    report, _, _ = run
    if HTTP in {note["what"] for note in report["skipped"]}:
        pytest.skip("the REST API is not installed")
    pairs = {(pair["workload"], pair["replicas"]): pair for pair in report["http"]}
    assert set(pairs) == {("hot-wallet", 2), ("spread", 2)}
    for (workload, _), pair in pairs.items():
        assert_sound(pair["library"], f"{workload} library")
        assert_sound(pair["http"], f"{workload} http")
        assert pair["http"]["server_errors"] == 0
        assert pair["http"]["rate_limited"] >= 0
        # Each selection's total covers what it asked, as in the library.
        assert pair["http"]["change_per_selection"] >= 0
        assert pair["library"]["change_per_selection"] >= 0
        # /metrics sums every web worker's files: at least the measured successes.
        assert pair["http"]["metrics"]["success"] >= pair["http"]["selections"]
        assert pair["ratios"]["selections_per_s"] > 0
        # What the web stack allows (two GET /healthz per cycle), measured on the same server.
        assert pair["http"]["framework_cycles_per_s"] > 0
        assert pair["ratios"]["of_framework"] > 0
        # Each load process keeps one connection, held by one of the web workers.
        split = pair["http"]["connections_per_worker"]
        assert sum(split) == 2 and split == sorted(split, reverse=True), split
        # Where the cores went (bench.cpu): the web workers serve, the load processes only
        # send; in the library the replicas do what the workers do. PostgreSQL's share is
        # there when its server runs on this host, as the embedded one does.
        http = pair["http"]["cpu_ms_per_selection"]
        library = pair["library"]["cpu_ms_per_selection"]
        assert set(http) - {"postgres"} == {"web", "load"}, http
        assert set(library) - {"postgres"} == {"replicas"}, library
        assert http["web"] > 0 and library["replicas"] > 0
        assert ("postgres" in http) == ("postgres" in library)
        assert all(ms > 0 for ms in [http.get("postgres", 1), library.get("postgres", 1)])


@pytest.mark.timeout(600)
def test_the_housekeeping_points_remove_every_planted_row_without_a_fault(run):
    report, _, _ = run
    section = report["housekeeping"]
    assert section["planted"] > 0
    for name in ("no_rows", "rows_left", "housekeeping"):
        assert_sound(section[name], name)
        assert section[name]["duration_s"] == HOUSEKEEPING_SECONDS
    assert section["housekeeper"]["expired_left"] == 0
    assert section["housekeeper"]["expired_removed"] > 0
    assert set(section["ratios"]) >= {"housekeeping_p99", "leftover_rows_selections_per_s"}


@pytest.mark.timeout(600)
def test_every_payment_of_the_chain_goes_through_in_the_library_and_over_http(run):
    report, _, _ = run
    for side in ("library", "http"):
        for mode in ("sequential", "concurrent"):
            result = report["chain"][side][mode]
            where = f"{side} {mode}"
            assert result["completed"] == CHAIN, (where, result["error_kinds"])
            assert result["double_spends"] == 0, where
            assert result["leaked_locks"] == 0, where
            assert result["supply_conserved"] is True, where
            assert result["wait_ms"]["max"] >= result["wait_ms"]["mean"] > 0, where
        assert report["chain"][side]["completion_over_sequential"] > 0


@pytest.mark.timeout(600)
def test_the_pgbouncer_points_run_pooled_and_direct_without_a_fault(run):
    report, _, done = run
    section = report["pgbouncer"]
    assert (section["replicas"], section["pool_size"]) == (3, 2)
    (pair,) = section["points"]
    assert pair["workload"] == "hot-wallet"
    for mode in ("pooled", "direct"):
        assert_sound(pair[mode], f"pgbouncer {mode}")
    # Behind the pool the replicas prepared nothing; directly they run the shipped threshold.
    assert pair["pooled"]["settings"]["PREPARE_THRESHOLD"] is None
    assert (
        pair["direct"]["settings"]["PREPARE_THRESHOLD"] == settings.SHERDLOCK["PREPARE_THRESHOLD"]
    )
    assert pair["ratios"]["selections_per_s"] > 0
    assert "pooled ÷ direct" in done.stdout


@pytest.mark.timeout(600)
def test_every_selection_strategy_is_measured_against_random(run):
    report, _, done = run
    section = report["selection_strategies"]
    assert (section["workload"], section["replicas"]) == ("spread", 2)
    names = [p["selection_strategy"] for p in section["points"]]
    assert names == ["random", "smallest_first", "fewest_tokens", "exact", "consolidate"]
    for point in section["points"]:
        assert_sound(point, f"selection strategy {point['selection_strategy']}")
        assert point["inputs_per_selection"] >= 1 and point["change_per_selection"] >= 0
        assert point["vs_random"]["selections_per_s"] > 0
    exact = section["points"][3]
    assert exact["change_per_selection"] <= section["points"][0]["change_per_selection"]
    assert "Selection strategies (spread, R=2" in done.stdout


@pytest.mark.timeout(600)
def test_every_target_is_stated_and_judged(run):
    report, _, done = run
    sections = {t["section"] for t in report["targets"]}
    assert sections == {"selection", "reference", "http", "housekeeping", "chain"}
    for target in report["targets"]:
        assert target["met"] in (True, False, None), target
    # Targets at replica counts this run did not measure say so instead of passing.
    judged = [t for t in report["targets"] if t["section"] == "selection"]
    assert judged and all(t["met"] is None for t in judged)
    assert "not measured" in done.stdout


@pytest.mark.timeout(600)
def test_the_plot_is_written(run):
    _, out, _ = run
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(600)
def test_check_passes_against_itself_and_fails_on_regressions_and_faults(run, tmp_path):
    report, out, _ = run
    env = dict(os.environ)
    same = run_module(
        "bench.check", str(out / "report.json"), str(out / "report.json"), env=env, timeout=60
    )
    assert same.returncode == 0, same.stdout
    doctored = dict(report, ratios=[dict(r, value=r["value"] * 10) for r in report["ratios"]])
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(doctored))
    worse = run_module(
        "bench.check",
        str(out / "report.json"),
        str(baseline),
        "--tolerance",
        "0.25",
        env=env,
        timeout=60,
    )
    assert worse.returncode == 1, worse.stdout
    assert "REGRESSED" in worse.stdout
    faulty = dict(
        report,
        points=[
            dict(p, double_spends=1) if p["strategy"] == "serialized" else p
            for p in report["points"]
        ],
    )
    current = tmp_path / "faulty.json"
    current.write_text(json.dumps(faulty))
    broken = run_module("bench.check", str(current), str(out / "report.json"), env=env, timeout=60)
    assert broken.returncode == 1, broken.stdout
    assert "double_spends=1" in broken.stdout


def test_the_environment_of_each_strategy_is_decided_in_one_place():
    caller = {
        "PATH": "/bin",
        "SHERDLOCK_DURABLE_LEASES": "1",
        "SHERDLOCK_LISTEN": "0",
        "SHERDLOCK_DATA_DIR": "/data",
        "SHERDLOCK_RATE_SELECTIONS_PER_KEY": "off",
    }
    ours = strategies.environment(OURS, caller)
    assert ours == {"PATH": "/bin", "SHERDLOCK_DATA_DIR": "/data"}
    assert strategies.environment(LISTENER, caller) == {**ours, "SHERDLOCK_LISTEN": "1"}
    for other in (*BASELINES, HTTP):
        assert strategies.environment(other, caller) == ours


def record(
    tx_id: str, tokens: tuple[int, ...], acquired: float, ended: float, action: str
) -> Record:
    return Record(
        tx_id, "w", 1, acquired, 0.0, "selected", tokens, acquired, ended, action, len(tokens)
    )


def test_the_auditor_catches_overlapping_holds_and_double_spends():
    fine = [
        record("a", (1, 2), 0.0, 1.0, "released"),
        record("b", (1,), 1.0, 2.0, "released"),
        record("c", (2,), 3.0, math.inf, "spent"),
    ]
    assert overlapping_holds(fine) == 0
    assert spent_twice(fine, {2: "c"}) == 0
    overlapping = [*fine, record("d", (1,), 1.5, 1.8, "released")]
    assert overlapping_holds(overlapping) == 1
    after_spend = [*fine, record("e", (2,), 4.0, 5.0, "released")]
    assert overlapping_holds(after_spend) == 1  # a spent token was handed out again
    assert spent_twice([*fine, record("f", (2,), 5.0, math.inf, "spent")], {2: "f"}) == 1
    assert spent_twice(fine, {2: "someone-else"}) == 1
    assert spent_twice(fine, {2: "c", 7: "ghost"}) == 1


@pytest.mark.timeout(600)
def test_the_clients_cost_is_reported_beside_a_bare_loop(run):
    data, _, done = run
    section = data["client_cpu"]
    assert section["cycles"] == 10 and section["bound"] == 1.3
    assert set(section["cpu_ms_per_cycle"]) == {"http.client", "client", "async_client"}
    assert section["ratio"] > 0 and "Client CPU per select + spend/release cycle" in done.stdout
