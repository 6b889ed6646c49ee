"""``python -m bench --check``: a point that dropped is measured again before it counts.

Timings are never asserted: the baseline is made up so that the point drops beyond any
tolerance in both measurements.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from django.conf import settings

from bench import confirmation, database
from bench.options import parse_args
from bench.strategies import CACHE_BATCH, OURS
from tests.helpers.processes import database_url, run_module

ONE_POINT = [
    "--workloads",
    "hot-wallet",
    "--replicas",
    "2",
    "--strategies",
    f"{OURS},{CACHE_BATCH}",
    "--duration",
    "1",
    "--hot-wallet-tokens",
    "100",
    "--hold",
    "0.002",
    "--http-replicas",
    "",
    "--housekeeping",
    "off",
    "--chain-payments",
    "0",
    "--client-cycles",
    "0",
    "--pgbouncer-replicas",
    "0",
    "--selection-strategies",
    "",
]


@pytest.mark.timeout(300)
def test_check_measures_a_dropped_point_again_before_it_calls_it_a_regression(tmp_path):
    # A baseline in which ours led cache-batch a thousand times over at hot-wallet R = 2: the
    # fresh point drops beyond any tolerance, and so does its second measurement.
    lead = {
        "workload": "hot-wallet",
        "replicas": 2,
        "strategy": OURS,
        "baseline": CACHE_BATCH,
        "value": 1000.0,
    }
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"points": [], "ratios": [lead]}))
    name = os.environ.get("SHERDLOCK_TEST_DB", "test_sherdlock") + "_bench_again"
    env = dict(os.environ, DATABASE_URL=database_url(settings.DATABASES["default"]))
    out = tmp_path / "out"
    argv = [*ONE_POINT, "--out", str(out), "--database", name, "--check", str(baseline)]
    try:
        checked = run_module("bench", *argv, env=env, timeout=240)
        assert checked.returncode == 1, checked.stderr[-4000:] + checked.stdout[-2000:]
        assert "REGRESSED hot-wallet R=2 ours÷the best baseline" in checked.stdout
        assert "measured again:" in checked.stdout
        report = json.loads((out / "report.json").read_text())
        again = json.loads((out / "confirmation" / "report.json").read_text())
        assert {(p["workload"], p["replicas"], p["strategy"]) for p in again["points"]} == {
            ("hot-wallet", 2, OURS),
            ("hot-wallet", 2, CACHE_BATCH),
        }
        assert again["http"] == [] and not again["problems"]
        # --no-confirm takes the first measurement's word for it: the same report, checked
        # again without measuring (no replica is started, nothing is written).
        shutil.rmtree(out / "confirmation")
        args = parse_args([*argv, "--no-confirm"])
        assert args.confirm is False
        assert (
            confirmation.compare_with_baseline(
                args, report, out / "report.json", [OURS, CACHE_BATCH]
            )
            == 1
        )
        assert not (out / "confirmation").exists()
    finally:
        database.drop(database.renamed(env["DATABASE_URL"], name))
