"""The benchmark harness on a tiny configuration: correct books, a report, a plot, a check.

Timings are never asserted here; the correctness counters are, and so is the auditor that
produces them (it must catch a double spend when there is one).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from bench import database
from bench.strategies import BASELINES, HTTP, OURS
from bench.verify import overlapping_holds, spent_twice
from bench.worker import Record
from tests.conftest import ROOT, database_url

WORKLOADS = ("spread", "hot-wallet", "hot-tokens")
TINY = ["--workloads", ",".join(WORKLOADS), "--replicas", "2", "--duration", "1",
        "--spread-wallets", "20", "--spread-tokens", "10", "--hot-wallet-tokens", "100",
        "--hot-tokens-big", "4", "--hot-tokens-big-quantity", "100",
        "--hot-tokens-small", "60", "--http-replicas", "2", "--hold", "0.002"]
REPORT_KEYS = {"version", "created_at", "machine", "config", "elapsed_s", "points", "ratios",
               "targets", "skipped", "problems"}


def bench(*argv: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, Path, subprocess.CompletedProcess]:
    """Run the harness once for the module, in a database of its own on the test server."""
    out = tmp_path_factory.mktemp("bench")
    # One database per concurrent test run, as for the test database itself.
    name = os.environ.get("SHERDLOCK_TEST_DB", "test_sherdlock") + "_bench"
    env = dict(os.environ, DATABASE_URL=database_url(settings.DATABASES["default"]))
    done = bench("bench", *TINY, "--out", str(out), "--database", name, env=env, timeout=480)
    try:
        assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
        yield json.loads((out / "report.json").read_text()), out, done
    finally:
        database.drop(database.renamed(env["DATABASE_URL"], name))


@pytest.mark.timeout(600)
def test_every_strategy_ran_on_every_workload_without_a_double_spend(run):
    report, _, done = run
    assert report.keys() >= REPORT_KEYS
    points = {(p["workload"], p["strategy"]): p for p in report["points"]}
    skipped = {note["what"] for note in report["skipped"]}
    for workload in WORKLOADS:
        for strategy in (OURS, *BASELINES):
            assert (workload, strategy) in points or strategy in skipped, (workload, strategy)
    assert (report["config"]["http_workload"], HTTP) in points or HTTP in skipped
    for (workload, strategy), point in points.items():
        where = f"{workload} {strategy}"
        assert point["selections"] > 0, where
        if strategy == "floor":
            continue  # pgbench spends nothing and stops mid-cycle: no books to audit
        assert point["leaked_locks"] == 0, where
        assert point["double_spends"] == 0, where
        assert point["spend_failures"] == 0, where
        assert point["supply_conserved"] is True, where
        assert point["spent"] + point["released"] == point["selections"], where
    assert report["problems"] == []
    assert "targets (reported, not asserted)" in done.stdout
    assert "ours÷" in done.stdout


@pytest.mark.timeout(600)
def test_ours_counts_its_lock_attempts_and_the_metrics_saw_the_http_selections(run):
    report, _, _ = run
    points = {(p["workload"], p["strategy"]): p for p in report["points"]}
    ours = points[("hot-wallet", OURS)]
    assert ours["lock_attempts"] >= ours["locked_tokens"] > 0
    assert ours["listening"] is False
    if ("hot-wallet", HTTP) in points:
        http = points[("hot-wallet", HTTP)]
        # /metrics sums every gunicorn worker's files: at least the measured successes.
        assert http["metrics"]["success"] >= http["selections"] > 0
    ratios = {(r["workload"], r["baseline"]) for r in report["ratios"]}
    assert ("hot-wallet", "serialized") in ratios


@pytest.mark.timeout(600)
def test_the_plot_is_written(run):
    _, out, _ = run
    assert (out / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(600)
def test_check_passes_against_itself_and_fails_against_a_better_baseline(run, tmp_path):
    report, out, _ = run
    env = dict(os.environ)
    same = bench("bench.check", str(out / "report.json"), str(out / "report.json"), env=env,
                 timeout=60)
    assert same.returncode == 0, same.stdout
    doctored = dict(report, ratios=[dict(r, value=r["value"] * 10) for r in report["ratios"]])
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(doctored))
    worse = bench("bench.check", str(out / "report.json"), str(baseline), "--tolerance",
                  "0.25", env=env, timeout=60)
    assert worse.returncode == 1, worse.stdout
    assert "REGRESSED" in worse.stdout


def record(tx_id: str, tokens: tuple[int, ...], acquired: float, ended: float,
           action: str) -> Record:
    return Record(tx_id, "w", 1, acquired, 0.0, "selected", tokens, acquired, ended, action,
                  len(tokens))


def test_the_auditor_catches_overlapping_holds_and_double_spends():
    fine = [record("a", (1, 2), 0.0, 1.0, "released"), record("b", (1,), 1.0, 2.0, "released"),
            record("c", (2,), 3.0, math.inf, "spent")]
    assert overlapping_holds(fine) == 0
    assert spent_twice(fine, {2: "c"}) == 0
    overlapping = [*fine, record("d", (1,), 1.5, 1.8, "released")]
    assert overlapping_holds(overlapping) == 1
    after_spend = [*fine, record("e", (2,), 4.0, 5.0, "released")]
    assert overlapping_holds(after_spend) == 1  # a spent token was handed out again
    assert spent_twice([*fine, record("f", (2,), 5.0, math.inf, "spent")], {2: "f"}) == 1
    assert spent_twice(fine, {2: "someone-else"}) == 1
    assert spent_twice(fine, {2: "c", 7: "ghost"}) == 1
