"""The library's in-process cost benchmark on a short run: it selects, spends and releases.

Timings are printed by the script, never asserted here.
"""

from __future__ import annotations

import os
import re

import pytest
from django.conf import settings

from bench import database
from tests.helpers.processes import database_url, run_module


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "strategy, label", [("ours", "hot-wallet"), ("reference", "hot-wallet, reference")]
)
def test_the_library_cycle_runs_and_reports_its_cost(strategy, label):
    name = os.environ.get("SHERDLOCK_TEST_DB", "test_sherdlock") + "_library_cpu"
    env = dict(os.environ, DATABASE_URL=database_url(settings.DATABASES["default"]))
    try:
        done = run_module(
            "bench.library_cpu",
            "--workload",
            "hot-wallet",
            "--cycles",
            "20",
            "--database",
            name,
            "--strategy",
            strategy,
            env=env,
            timeout=240,
        )
    finally:
        database.drop(database.renamed(env["DATABASE_URL"], name))
    # A failed spend or release stops the run with an error, so a clean exit means every one
    # of the warm-up's and the measured cycles' selections was spent or released.
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert re.search(
        rf"^{label}: replica CPU per cycle [\d.]+ ms, wall [\d.]+ ms$", done.stdout, re.M
    )
    # A server on this host (a socket or a loopback address) has its backend's CPU read too.
    host = settings.DATABASES["default"].get("HOST") or ""
    local = host.startswith("/") or host in ("", "localhost", "127.0.0.1", "::1")
    backend = re.search(rf"^{label}: backend CPU per cycle [\d.]+ ms$", done.stdout, re.M)
    assert bool(backend) == local, done.stdout
    # The backend's pid, for a profiler of the server's side, is named on stderr.
    assert re.search(r"^\[library_cpu\] backend pid \d+$", done.stderr, re.M), done.stderr[-2000:]
