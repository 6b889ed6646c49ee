"""The figures in the docs are the committed baseline's, as ``bench.figures`` renders them."""

from __future__ import annotations

import json
from pathlib import Path

from bench import figures

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "bench" / "results" / "baseline.json"
PERFORMANCE = ROOT / "docs" / "performance.md"


def test_the_docs_table_is_the_baselines():
    rendered = figures.table(json.loads(BASELINE.read_text()))
    assert figures.block_of(PERFORMANCE.read_text()) == rendered, (
        "docs/performance.md's figures differ from bench/results/baseline.json: run "
        "`python -m bench.figures bench/results/baseline.json --docs docs/performance.md`"
    )


def test_the_table_names_ours_the_reference_and_the_best_baseline_of_each_point():
    point = {"latency_ms": {"p99": 2.0}, "attempts_per_locked_token": 1.0}
    reference = {"strategy": "reference", "selections_per_s": 400.0, "latency_ms": {"p99": 1.0}}
    data = {
        "points": [
            {**point, "workload": "spread", "replicas": 8, **reference},
            {
                **point,
                "workload": "spread",
                "replicas": 8,
                "strategy": "ours",
                "selections_per_s": 300.0,
            },
            {
                **point,
                "workload": "spread",
                "replicas": 8,
                "strategy": "cache-batch",
                "selections_per_s": 200.0,
                "latency_ms": {"p99": 4.0},
            },
            {
                **point,
                "workload": "spread",
                "replicas": 8,
                "strategy": "serialized",
                "selections_per_s": 100.0,
                "latency_ms": {"p99": 3.0},
            },
        ],
        "targets": [{"measured": True, "info": False, "met": True}],
        "problems": [],
    }
    row = figures.table(data).splitlines()[2]
    assert row == (
        "| spread | 8 | 300 | 0.75x | cache-batch | 200 | 1.50x | 2.0 | 1.0 | 3.0 | 1.00 |"
    )


def test_rewriting_keeps_the_text_around_the_block():
    text = f"before\n{figures.BEGIN}\nold\n{figures.END}\nafter\n"
    new = figures.replace_block(text, "| new |\n")
    assert new.startswith("before\n") and new.endswith(f"{figures.END}\nafter\n")
    assert figures.block_of(new) == "| new |\n"
