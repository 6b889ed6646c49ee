"""Compare a fresh report with a baseline report: exit 1 on a regression beyond a tolerance.

Only machine-independent figures are compared, and only those that hold still between runs of
the same code: at each point, ours' selections/s ÷ the best baseline's (every ratio is measured
in one run); ours-http ÷ ours at the HTTP target's replica count; lock attempts per locked token.
The rest of the report's ratios are listed beside them, not held: ours ÷ each other baseline and
÷ the floor, the listener variant's, and the HTTP points at other replica counts. Any
correctness failure (double spend, leaked lock, lost spend) in the fresh report fails the check
whatever the baseline says.

``python -m bench.check REPORT BASELINE [--tolerance 0.25]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.report import problems
from bench.strategies import BASELINES, CANDIDATES, HTTP, OURS
from bench.targets import HTTP_RATIO_REPLICAS

# The HTTP target's replica count is the one held. With fewer load processes, a point whose
# connections all land on one web worker makes about half the selections of one split evenly
# (docs/performance.md, "How the load's connections split between the web workers"): a
# placement by the kernel, not a change of the code, so those points are listed.
HTTP_HELD_REPLICAS = HTTP_RATIO_REPLICAS

# A baseline that made under a twentieth of ours' selections has collapsed at that point
# (skip-locked-statement on hot tokens, a few selections a second; seed-faithful at hot tokens
# R = 20): a ratio to a handful of selections swings by half from run to run. Such a baseline
# is never the best where another one ran; a point where even the best collapsed in both runs
# is skipped.
COLLAPSED = 20.0

Key = tuple[str, int, str, str]


def _ratios(data: dict) -> dict[Key, float]:
    return {
        (r["workload"], r["replicas"], r["strategy"], r["baseline"]): r["value"]
        for r in data.get("ratios", [])
    }


def _held(ratios: dict[Key, float]) -> dict[Key, float]:
    """The ratios a fresh report is held to, keyed as in the report ("best" for the best baseline).

    Ours ÷ the best baseline is ours ÷ each baseline at its smallest. The best of five
    baselines moves less from run to run than any one of them (in three runs of the same code,
    ratios to single baselines moved by up to 31% where ratios to the best moved by 21% at
    most), and it is the one the selection targets name. The listener variant's own
    selections/s moved by 26-30% between those runs: it is listed.
    """
    best: dict[Key, float] = {}
    for (workload, replicas, strategy, baseline), value in ratios.items():
        if strategy == OURS and baseline in BASELINES:
            key = (workload, replicas, OURS, "best")
            best[key] = min(value, best.get(key, value))
        elif strategy == HTTP and baseline == OURS and replicas == HTTP_HELD_REPLICAS:
            best[(workload, replicas, strategy, baseline)] = value
    return best


def _attempts(data: dict) -> dict[tuple, float]:
    return {
        (p["workload"], p["replicas"], p["strategy"]): p["attempts_per_locked_token"]
        for p in data.get("points", [])
        if p["strategy"] in CANDIDATES and p.get("attempts_per_locked_token")
    }


def _name(key: Key) -> str:
    baseline = "the best baseline" if key[3] == "best" else key[3]
    return f"{key[0]} R={key[1]} {key[2]}÷{baseline}"


def compare(current: dict, baseline: dict, tolerance: float) -> tuple[list[str], list[str]]:
    """Return (regressions, lines describing every comparison)."""
    regressions = [f"correctness: {p}" for p in problems(current)]
    lines = []
    now_all, then_all = _ratios(current), _ratios(baseline)
    # The best of the baselines both runs measured: a baseline left out of one run would
    # otherwise change what "best" means between them.
    both = now_all.keys() & then_all.keys()
    now = _held({key: value for key, value in now_all.items() if key in both})
    then = _held({key: value for key, value in then_all.items() if key in both})
    for key in sorted(now.keys() & then.keys()):
        if min(now[key], then[key]) > COLLAPSED:
            lines.append(
                f"skipped   {_name(key)}: {now[key]:.2f} vs baseline {then[key]:.2f} "
                "(every baseline collapsed in both runs)"
            )
            continue
        floor = then[key] * (1 - tolerance)
        bad = now[key] < floor
        text = f"{_name(key)}: {now[key]:.2f} vs baseline {then[key]:.2f} (min {floor:.2f})"
        lines.append(("REGRESSED " if bad else "ok        ") + text)
        if bad:
            regressions.append(text)
    for key in sorted(both):
        if key not in now:
            lines.append(
                f"listed    {_name(key)}: {now_all[key]:.2f} vs baseline {then_all[key]:.2f}"
            )
    now_attempts, then_attempts = _attempts(current), _attempts(baseline)
    for point in sorted(now_attempts.keys() & then_attempts.keys()):
        ceiling = then_attempts[point] * (1 + tolerance)
        bad = now_attempts[point] > ceiling
        text = (
            f"{point[0]} R={point[1]} {point[2]} lock attempts per locked token: "
            f"{now_attempts[point]:.2f} vs baseline {then_attempts[point]:.2f} (max {ceiling:.2f})"
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
    if not any(line.startswith(("ok", "REGRESSED")) for line in lines):
        print("nothing to compare: the report and the baseline share no measured point")
        return 2
    held = sum(line.startswith("ok") for line in lines)
    print(f"no regression beyond {args.tolerance:.0%} in {held} comparison(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
