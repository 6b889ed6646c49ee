"""The report's headline figures as a Markdown table, for the docs and the changelog.

Every run writes ``figures.md`` beside ``report.json``; ``docs/performance.md`` carries the
table of the committed baseline between two markers, and a test checks that it is this module's
rendering of ``bench/results/baseline.json``, so the figures in the docs are always a report's.

    python -m bench.figures bench/results/baseline.json                 # print the table
    python -m bench.figures bench/results/baseline.json --docs docs/performance.md   # rewrite it
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import reference_rounds
from bench.strategies import BASELINES, OURS, REFERENCE

BEGIN = "<!-- figures: written by `python -m bench.figures` from bench/results/baseline.json -->"
END = "<!-- /figures -->"


def _rate(point: dict | None) -> float | None:
    return None if point is None else point.get("selections_per_s")


def _p99(point: dict | None) -> float | None:
    return None if point is None else point.get("latency_ms", {}).get("p99")


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine and theirs else "-"


def table(data: dict) -> str:
    """Render ours against the reference and the best baseline at every point, then targets."""
    index = {(p["workload"], p["replicas"], p["strategy"]): p for p in data["points"]}
    keys = sorted({(w, r) for w, r, _ in index}, key=lambda key: (key[0], key[1]))
    measured = reference_rounds.pairs(data["points"], data.get("reference_rounds"))
    lines = [
        "| workload | replicas | ours sel/s | ours ÷ reference | best baseline | its sel/s "
        "| ours ÷ best | ours p99 ms | reference p99 ms | lowest baseline p99 ms "
        "| lock attempts per locked token |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for workload, replicas in keys:
        ours = index.get((workload, replicas, OURS))
        baselines = {
            name: index[(workload, replicas, name)]
            for name in BASELINES
            if (workload, replicas, name) in index
        }
        best = max(baselines, key=lambda name: _rate(baselines[name]) or 0, default=None)
        lowest = min(
            (p for name, p in baselines.items() if _p99(p) is not None and _rate(p)),
            key=lambda p: _p99(p) or 0,
            default=None,
        )
        reference = index.get((workload, replicas, REFERENCE))
        # Ours ÷ the reference: the median of the rounds' ratios (one round: that ratio).
        found = measured.get((workload, replicas), [])
        against = reference_rounds.median_ratio(found, _rate)
        mine, theirs = _rate(ours), _rate(baselines.get(best)) if best else None
        lines.append(
            f"| {workload} | {replicas} | {_num(mine)} "
            f"| {'-' if against is None else f'{against:.2f}x'} "
            f"| {best or '-'} | {_num(theirs)} | {_ratio(mine, theirs)} | {_num(_p99(ours), 1)} "
            f"| {_num(_p99(reference), 1)} | {_num(_p99(lowest), 1)} "
            f"| {_num(None if ours is None else ours.get('attempts_per_locked_token'), 2)} |"
        )
    held = [t for t in data.get("targets", []) if t.get("measured") and not t.get("info")]
    met = sum(1 for t in held if t.get("met"))
    machine = data.get("machine", {})
    lines += [
        "",
        f"Targets met: {met} of {len(held)}. Correctness problems: "
        f"{len(data.get('problems', [])) or 'none'}. Run of {data.get('created_at', '?')[:10]}, "
        f"{machine.get('cpus', '?')} CPUs, PostgreSQL {machine.get('postgres', '?')}.",
    ]
    return "\n".join(lines) + "\n"


def replace_block(text: str, block: str) -> str:
    """Put ``block`` between the markers of ``text``."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n\n" + block + "\n" + text[end:]


def block_of(text: str) -> str:
    """Return what stands between the markers of ``text``."""
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.figures", description=__doc__)
    parser.add_argument("report", type=Path)
    parser.add_argument("--docs", type=Path, help="rewrite the table in this Markdown file")
    args = parser.parse_args(argv)
    rendered = table(json.loads(args.report.read_text()))
    if args.docs:
        args.docs.write_text(replace_block(args.docs.read_text(), rendered))
    else:
        print(rendered, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
