"""``python -m bench --check``: a point that dropped is measured again before the drop counts."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.runner import Harness, make_workload, run_points, say


def compare_with_baseline(
    args: argparse.Namespace, data: dict, report_path: Path, names: list[str]
) -> int:
    """Compare the report with ``--check``'s baseline, measuring every dropped point again.

    A drop beyond the tolerance is measured once more before it counts: the same strategies
    at the same point, right away (``bench.check``, ``--confirmation``). One busy moment of
    the host can halve a point.
    """
    import json

    from bench import check

    command = [str(report_path), str(args.check), "--tolerance", str(args.tolerance)]
    baseline = json.loads(args.check.read_text())
    again = check.suspects(data, baseline, args.tolerance) if args.confirm else {}
    if again:
        say(f"measuring the points that dropped again: {again}")
        confirmation = measure_again(args, names, again)
        command += ["--confirmation", str(confirmation)]
    return check.main(command)


def measure_again(args: argparse.Namespace, names: list[str], points: dict) -> Path:
    """Measure ``points`` ({"selection"/"http": {workload: [R]}}) again; return the report."""
    from bench import report, web

    started = time.monotonic()
    again = argparse.Namespace(**vars(args))
    again.out = args.out / "confirmation"
    again.replicas = sorted({r for rs in points.get("selection", {}).values() for r in rs}) or [1]
    again.http_replicas = sorted({r for rs in points.get("http", {}).values() for r in rs})
    again.housekeeping, again.chain_payments, again.pgbouncer_replicas = [], 0, 0
    again.selection_strategies = []
    again.reference_rounds = 1  # a drop is confirmed by one more pass, as it was measured
    harness = Harness(again)
    selection: list[dict] = []
    pairs: list[dict] = []
    try:
        for name, replicas in points.get("selection", {}).items():
            harness.args.replicas = replicas
            selection += run_points(harness, [make_workload(name, again)], names)[0]
        for name, replicas in points.get("http", {}).items():
            again.http_workloads, again.http_replicas = [name], replicas
            pairs += web.run_all(again, harness, make_workload, say)[0]
    finally:
        harness.close()
    data = report.build(selection, {"http": pairs}, [], vars(again), time.monotonic() - started)
    again.out.mkdir(parents=True, exist_ok=True)
    return report.write(data, again.out / "report.json")
