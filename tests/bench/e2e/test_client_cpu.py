"""The client's cost benchmark on a short run: every way selects, spends and releases.

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
def test_the_client_cost_runs_and_reports_every_way():
    name = os.environ.get("SHERDLOCK_TEST_DB", "test_sherdlock") + "_client_cpu"
    env = dict(os.environ, DATABASE_URL=database_url(settings.DATABASES["default"]))
    try:
        done = run_module(
            "bench.client_cpu", "--cycles", "20", "--database", name, env=env, timeout=240
        )
    finally:
        database.drop(database.renamed(env["DATABASE_URL"], name))
    # A failed select, spend or release stops the run with an error.
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert re.search(
        r"^  http.client loop [\d.]+ ms, sherdlock_client.Client [\d.]+ ms \(x[\d.]+, "
        r"(within|beyond) the x1.3 bound\), AsyncClient [\d.]+ ms \(x[\d.]+\)$",
        done.stdout,
        re.M,
    )
