"""Compare a fresh report with a baseline report: exit 1 on a regression beyond a tolerance.

Only machine-independent figures are compared: ratios of ours to a baseline measured in the
same run, and lock attempts per locked token. Any correctness failure (double spend, leaked
lock, lost spend) in the fresh report fails the check whatever the baseline says.

``python -m bench.check REPORT BASELINE [--tolerance 0.25]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.report import problems
from bench.strategies import CANDIDATES


def _ratios(data: dict) -> dict[tuple, float]:
    return {
        (r["workload"], r["replicas"], r["strategy"], r["baseline"]): r["value"]
        for r in data.get("ratios", [])
    }


def _attempts(data: dict) -> dict[tuple, float]:
    return {
        (p["workload"], p["replicas"], p["strategy"]): p["attempts_per_locked_token"]
        for p in data.get("points", [])
        if p["strategy"] in CANDIDATES and p.get("attempts_per_locked_token")
    }


# A baseline that made under a twentieth of a candidate's selections in both runs has collapsed
# at that point (skip-locked-statement on hot tokens, a few selections a second; seed-faithful
# at hot tokens R = 20): a ratio to a handful of selections swings by half from run to run, so
# every candidate's ratio to it there is listed, not compared.
COLLAPSED = 20.0


def _point_baseline(key: tuple) -> tuple:
    workload, replicas, _candidate, baseline = key
    return workload, replicas, baseline


def compare(current: dict, baseline: dict, tolerance: float) -> tuple[list[str], list[str]]:
    """Return (regressions, lines describing every comparison)."""
    regressions = [f"correctness: {p}" for p in problems(current)]
    lines = []
    now, then = _ratios(current), _ratios(baseline)
    compared = now.keys() & then.keys()
    collapsed = {_point_baseline(k) for k in compared if min(now[k], then[k]) > COLLAPSED}
    for key in sorted(compared):
        if _point_baseline(key) in collapsed:
            lines.append(
                f"skipped   {key[0]} R={key[1]} {key[2]}÷{key[3]}: {now[key]:.2f} vs baseline "
                f"{then[key]:.2f} (the baseline collapsed in both runs)"
            )
            continue
        floor = then[key] * (1 - tolerance)
        bad = now[key] < floor
        text = (
            f"{key[0]} R={key[1]} {key[2]}÷{key[3]}: {now[key]:.2f} vs baseline "
            f"{then[key]:.2f} (min {floor:.2f})"
        )
        lines.append(("REGRESSED " if bad else "ok        ") + text)
        if bad:
            regressions.append(text)
    now, then = _attempts(current), _attempts(baseline)
    for key in sorted(now.keys() & then.keys()):
        ceiling = then[key] * (1 + tolerance)
        bad = now[key] > ceiling
        text = (
            f"{key[0]} R={key[1]} {key[2]} lock attempts per locked token: "
            f"{now[key]:.2f} vs baseline {then[key]:.2f} (max {ceiling:.2f})"
        )
        lines.append(("REGRESSED " if bad else "ok        ") + text)
        if bad:
            regressions.append(text)
    return regressions, lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("report", type=Path)
    parser.add_argument("baseline", type=Path)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.25,
        help="allowed relative drop of a ratio (0.25: 25%%)",
    )
    args = parser.parse_args(argv)
    current = json.loads(args.report.read_text())
    baseline = json.loads(args.baseline.read_text())
    regressions, lines = compare(current, baseline, args.tolerance)
    print("\n".join(lines))
    if regressions:
        print(f"{len(regressions)} regression(s) beyond {args.tolerance:.0%}:")
        print("\n".join(f"  {r}" for r in regressions))
        return 1
    if not lines:
        print("nothing to compare: the report and the baseline share no measured point")
        return 2
    print(f"no regression beyond {args.tolerance:.0%} in {len(lines)} comparison(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
