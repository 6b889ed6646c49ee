"""The report: ours ÷ the reference and each baseline, the targets, the audit, the JSON file."""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

from bench import database
from bench.render import render
from bench.strategies import BASELINES, CANDIDATES, FLOOR, HTTP, OURS, REFERENCE
from bench.targets import targets

VERSION = 2

__all__ = ["build", "correct", "problems", "ratios", "render", "write"]


def _index(points: list[dict]) -> dict[tuple[str, int, str], dict]:
    return {(p["workload"], p["replicas"], p["strategy"]): p for p in points}


def ratios(points: list[dict], http: list[dict] | None = None) -> list[dict]:
    """Divide each candidate's selections/s by the reference's, each baseline's and the floor's.

    The HTTP path is divided by ours in the library at the same workload and replica count.
    """
    index, out = _index(points), []
    for (workload, replicas, strategy), point in sorted(index.items()):
        if strategy not in CANDIDATES:
            continue
        for baseline in (REFERENCE, *BASELINES, FLOOR):
            other = index.get((workload, replicas, baseline))
            if other and point["selections_per_s"] and other["selections_per_s"]:
                out.append(
                    {
                        "workload": workload,
                        "replicas": replicas,
                        "strategy": strategy,
                        "baseline": baseline,
                        "metric": "selections_per_s",
                        "value": round(point["selections_per_s"] / other["selections_per_s"], 3),
                    }
                )
    for pair in http or []:
        if value := pair["ratios"].get("selections_per_s"):
            out.append(
                {
                    "workload": pair["workload"],
                    "replicas": pair["replicas"],
                    "strategy": HTTP,
                    "baseline": OURS,
                    "metric": "selections_per_s",
                    "value": value,
                }
            )
    return out


def _point_problems(where: str, p: dict) -> list[str]:
    found = [
        f"{where}: {key}={p[key]}"
        for key in (
            "double_spends",
            "leaked_locks",
            "spend_failures",
            "release_failures",
            "spurious_insufficient_funds",
            "server_errors",
        )
        if p.get(key)
    ]
    if errors := p.get("outcomes", {}).get("error"):
        found.append(f"{where}: {errors} failed selection(s): {p.get('errors')}")
    if p.get("supply_conserved") is False:
        found.append(f"{where}: supply not conserved")
    return found


def problems(data: dict) -> list[str]:
    """List the correctness failures of a report, of every section."""
    found = []
    for p in data["points"]:
        if p["strategy"] == FLOOR:
            continue  # pgbench clients are not our code: a client that dies strands its locks
        found += _point_problems(f"{p['workload']} R={p['replicas']} {p['strategy']}", p)
    for p in data.get("reference_rounds") or []:
        where = f"{p['workload']} R={p['replicas']} {p['strategy']} round {p['round']}"
        found += _point_problems(where, p)
    for pair in data.get("http") or []:
        for side in ("library", "http"):
            p = pair[side]
            found += _point_problems(f"{p['workload']} R={p['replicas']} {p['strategy']}", p)
    housekeeping = data.get("housekeeping") or {}
    for name in ("no_rows", "rows_left", "housekeeping"):
        if p := housekeeping.get(name):
            found += _point_problems(f"housekeeping {name} R={p['replicas']}", p)
    pooled = data.get("pgbouncer") or {}
    for pair in pooled.get("points", []):
        for mode in ("pooled", "direct"):
            found += _point_problems(
                f"pgbouncer {pair['workload']} R={pooled['replicas']} {mode}", pair[mode]
            )
    for p in (data.get("selection_strategies") or {}).get("points", []):
        found += _point_problems(f"{p['workload']} R={p['replicas']} {p['strategy']}", p)
    for side, run in (data.get("chain") or {}).items():
        for mode in ("sequential", "concurrent"):
            result = (run or {}).get(mode)
            if not result:
                continue
            where = f"chain {side} {mode}"
            found += _point_problems(where, result)
            for kind, count in result.get("error_kinds", {}).items():
                if "insufficient_funds" in kind or kind[:1] == "5":
                    found.append(f"{where}: {count} x {kind}")
    return found


def correct(data: dict) -> bool:
    """Tell whether no strategy double-spent, leaked, lost value or answered falsely."""
    return not problems(data)


def build(
    points: list[dict], sections: dict, skipped: list[dict], config: dict, elapsed: float
) -> dict:
    """Assemble the report."""
    data = {
        "version": VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "postgres": database.server_version(),
        },
        "config": {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in config.items()},
        "elapsed_s": round(elapsed, 1),
        "points": points,
        "reference_rounds": sections.get("reference_rounds") or [],
        "http": sections.get("http", []),
        "client_cpu": sections.get("client_cpu"),
        "housekeeping": sections.get("housekeeping"),
        "chain": sections.get("chain"),
        "pgbouncer": sections.get("pgbouncer"),
        "selection_strategies": sections.get("selection_strategies"),
        "skipped": skipped,
    }
    data["ratios"] = ratios(points, data["http"])
    data["targets"] = targets(data)
    data["problems"] = problems(data)
    return data


def write(data: dict, path: Path) -> Path:
    """Write the report as JSON."""
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path
