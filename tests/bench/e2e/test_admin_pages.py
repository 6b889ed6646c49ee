"""The admin-pages benchmark on a tiny configuration: every page answers, queries are counted.

Timings are printed by the script, never asserted here.
"""

from __future__ import annotations

import json
import os

import pytest
from django.conf import settings

from bench import database
from bench.admin_pages import PAGES
from tests.helpers.processes import database_url, run_module


@pytest.mark.timeout(600)
def test_the_benchmark_seeds_requests_every_page_and_reports(tmp_path):
    name = os.environ.get("SHERDLOCK_TEST_DB", "test_sherdlock") + "_admin_bench"
    env = dict(os.environ, DATABASE_URL=database_url(settings.DATABASES["default"]))
    out = tmp_path / "admin_pages.json"
    argv = [
        "--wallets",
        "3",
        "--tokens-per-wallet",
        "40",
        "--locks",
        "30",
        "--failures",
        "10",
        "--repeat",
        "1",
        "--database",
        name,
        "--out",
        str(out),
    ]
    try:
        done = run_module("bench.admin_pages", *argv, env=env, timeout=480)
        assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
        again = run_module("bench.admin_pages", *argv, "--reuse", env=env, timeout=480)
        assert again.returncode == 0, again.stderr[-4000:]
        assert "reusing the 120 tokens" in again.stderr
    finally:
        database.drop(database.renamed(env["DATABASE_URL"], name))
    report = json.loads(out.read_text())
    assert report["config"]["wallets"] == 3 and report["config"]["locks"] == 30
    pages = {page["page"]: page for page in report["pages"]}
    assert set(pages) == {name for name, _, _ in PAGES}
    for page in pages.values():
        assert page["status"] == 200, page
        assert page["queries"] > 0 and len(page["ms"]) == 1
    assert "dashboard" in done.stdout and "wallet page" in done.stdout
