"""The report: ratios of ours to each baseline, the targets, a table, and the JSON file."""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

from bench import database
from bench.strategies import BASELINES, CANDIDATES, FLOOR, HTTP, OURS, SEED, SERIALIZED

VERSION = 1
HOT = "hot-wallet"


def _index(points: list[dict]) -> dict[tuple[str, int, str], dict]:
    return {(p["workload"], p["replicas"], p["strategy"]): p for p in points}


def ratios(points: list[dict]) -> list[dict]:
    """Divide each candidate's selections/s by each baseline's at the same workload and R."""
    index, out = _index(points), []
    for (workload, replicas, strategy), point in sorted(index.items()):
        if strategy not in CANDIDATES or strategy == HTTP:
            continue
        for baseline in BASELINES:
            other = index.get((workload, replicas, baseline))
            if other and point["selections_per_s"] and other["selections_per_s"]:
                out.append({"workload": workload, "replicas": replicas, "strategy": strategy,
                            "baseline": baseline, "metric": "selections_per_s",
                            "value": round(point["selections_per_s"]
                                           / other["selections_per_s"], 3)})
    return out


def _target(text: str, workload: str, replicas: int, value: float | None,
            threshold: float, at_least: bool) -> dict:
    met = None if value is None else (value >= threshold if at_least else value <= threshold)
    return {"target": text, "workload": workload, "replicas": replicas,
            "value": None if value is None else round(value, 3), "threshold": threshold,
            "met": met}


def targets(points: list[dict]) -> list[dict]:
    """Evaluate the stated targets; a target whose points were not measured has met None."""
    index = _index(points)

    def get(workload: str, replicas: int, strategy: str, *path: str) -> float | None:
        value = index.get((workload, replicas, strategy))
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def ratio(workload: str, replicas: int, baseline: str) -> float | None:
        ours = get(workload, replicas, OURS, "selections_per_s")
        other = get(workload, replicas, baseline, "selections_per_s")
        return ours / other if ours and other else None

    out = []
    for replicas in (8, 20):
        out.append(_target("ours >= 3x serialized (selections/s)", HOT, replicas,
                           ratio(HOT, replicas, SERIALIZED), 3.0, True))
        out.append(_target("ours >= 1.1x seed-faithful (selections/s)", HOT, replicas,
                           ratio(HOT, replicas, SEED), 1.1, True))
        out.append(_target("ours lock attempts per locked token <= 1.2", HOT, replicas,
                           get(HOT, replicas, OURS, "attempts_per_locked_token"), 1.2, False))
        ours_p99 = get(HOT, replicas, OURS, "latency_ms", "p99")
        floor_p99 = get(HOT, replicas, FLOOR, "latency_ms", "p99")
        out.append(_target("ours p99 <= floor p99 (ratio)", HOT, replicas,
                           ours_p99 / floor_p99 if ours_p99 and floor_p99 else None, 1.0, False))
    for replicas in sorted({p["replicas"] for p in points if p["workload"] == "spread"}):
        out.append(_target("ours >= 1.0x floor (selections/s)", "spread", replicas,
                           ratio("spread", replicas, FLOOR), 1.0, True))
    return out


def correct(data: dict) -> bool:
    """Tell whether no replica of ours or of a baseline double-spent, leaked or lost value."""
    return not problems(data)


def problems(data: dict) -> list[str]:
    """List the correctness failures of a report."""
    found = []
    for p in data["points"]:
        if p["strategy"] == FLOOR:
            continue  # pgbench clients are not our code: a client that dies strands its locks
        where = f"{p['workload']} R={p['replicas']} {p['strategy']}"
        for key in ("double_spends", "leaked_locks", "spend_failures", "release_failures"):
            if p.get(key):
                found.append(f"{where}: {key}={p[key]}")
        if p.get("supply_conserved") is False:
            found.append(f"{where}: supply not conserved")
    return found


def build(points: list[dict], skipped: list[dict], config: dict, elapsed: float) -> dict:
    """Assemble the report."""
    return {
        "version": VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "postgres": database.server_version()},
        "config": {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in config.items()},
        "elapsed_s": round(elapsed, 1),
        "points": points,
        "ratios": ratios(points),
        "targets": targets(points),
        "skipped": skipped,
        "problems": problems({"points": points}),
    }


def write(data: dict, path: Path) -> Path:
    """Write the report as JSON."""
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(data: dict) -> str:
    """Return the report as text tables: figures with ours' ratio per point, then targets."""
    index = _index(data["points"])
    head = (f"{'workload':<11}{'R':>3}  {'strategy':<14}{'sel/s':>9}{'p50 ms':>8}{'p99 ms':>9}"
            f"{'att/tok':>8}{'insuf':>6}{'locked':>7}{'dbl':>4}{'leak':>5}{'ours÷':>7}")
    lines = [head, "-" * len(head)]
    for (workload, replicas, strategy), p in sorted(
            index.items(), key=lambda item: (item[0][0], item[0][1], _order(item[0][2]))):
        ours = index.get((workload, replicas, OURS), {}).get("selections_per_s")
        mine = p.get("selections_per_s")
        ratio = _num(ours / mine, 2) if ours and mine and strategy != OURS else ""
        outcomes, latency = p.get("outcomes", {}), p.get("latency_ms", {})
        lines.append(
            f"{workload:<11}{replicas:>3}  {strategy:<14}{_num(mine):>9}"
            f"{_num(latency.get('p50'), 2):>8}{_num(latency.get('p99'), 2):>9}"
            f"{_num(p.get('attempts_per_locked_token'), 2):>8}"
            f"{_num(p.get('spurious_insufficient_funds'), 0):>6}"
            f"{_num(outcomes.get('funds_locked'), 0):>7}{_num(p.get('double_spends'), 0):>4}"
            f"{_num(p.get('leaked_locks'), 0):>5}{ratio:>7}")
    lines += ["", "targets (reported, not asserted):"]
    for t in data["targets"]:
        state = {True: "MET", False: "NOT MET", None: "not measured"}[t["met"]]
        lines.append(f"  {state:<13} {t['workload']} R={t['replicas']}: {t['target']}: "
                     f"{_num(t['value'], 2)} (threshold {t['threshold']})")
    for note in data["skipped"]:
        lines.append(f"  skipped {note['what']}: {note['why']}")
    lines.append("correctness: " + ("ok (no double spend, no leaked lock, no lost spend)"
                                    if not data["problems"] else "; ".join(data["problems"])))
    lines.append("insuf = spurious insufficient funds; locked = funds-locked answers; "
                 "att/tok = lock attempts per locked token; ours÷ = ours sel/s ÷ this row's")
    return "\n".join(lines)


def _order(strategy: str) -> int:
    order = (OURS, "ours+listener", HTTP, SEED, SERIALIZED, FLOOR)
    return order.index(strategy) if strategy in order else len(order)
