"""The targets of ours beyond the library's selection points: HTTP, housekeeping, the chain.

HTTP, against ours in the library at the same point: selections/s at least 0.5x at R = 8,
select p99 at most 3x, no 429 at the default rate limits, no 5xx. Beside them, the select's
mean ÷ the library's and each side's p99 ÷ mean are printed (not judged): whether the p99 ratio
is the HTTP tail's own, or the mean's that the selections/s ratio sets.
Housekeeping: p99 while it removes the expired rows at most 1.2x the p99 without it; what the
leftover rows cost selections/s is printed. Chain: no errors, completion at most 3x the
sequential time, worst wait at most 2.5x the mean wait.
"""

from __future__ import annotations

from bench.strategies import HTTP, OURS
from bench.target_record import STEADY, mean, p99, target
from bench.web_server import describe_split

HTTP_RATIO_REPLICAS = 8


def http_targets(pairs: list[dict]) -> list[dict]:
    """Evaluate the HTTP targets at every measured HTTP point."""
    out = []
    for pair in pairs:
        workload, replicas, point = pair["workload"], pair["replicas"], pair["http"]
        ratios = pair["ratios"]
        if replicas == HTTP_RATIO_REPLICAS:
            out.append(
                target(
                    "http",
                    f"{HTTP} selections/s >= 0.5x ours",
                    workload,
                    replicas,
                    ratios.get("selections_per_s"),
                    0.5,
                    at_least=True,
                )
            )
        else:
            out.append(
                target(
                    "http",
                    f"{HTTP} selections/s ÷ ours",
                    workload,
                    replicas,
                    ratios.get("selections_per_s"),
                    None,
                )
            )
        out.append(
            target(
                "http", f"{HTTP} select p99 <= 3x ours", workload, replicas, ratios.get("p99"), 3.0
            )
        )
        # The same without each point's first second, beside how the load's connections fell
        # to the web workers when its clock started: a worker over its share of them hands one
        # back only at a connection's hundredth request, most of a second into the point.
        http_steady, library_steady = p99(point, STEADY), p99(pair["library"], STEADY)
        split = point.get("connections_per_worker")
        out.append(
            target(
                "http",
                f"{HTTP} select p99 after the first second ÷ ours'",
                workload,
                replicas,
                http_steady / library_steady if http_steady and library_steady else None,
                None,
                note=f"connections per worker {describe_split(split)}" if split else "",
            )
        )
        # Each load process sends its next request as soon as the last is answered, so a
        # cycle's mean time is R ÷ cycles/s: the select's mean ÷ the library's follows the
        # inverse of the selections/s ratio, and its p99 ÷ the library's follows the mean's
        # whenever the two tails have the same shape (p99 ÷ mean). Printed, not judged.
        http_mean, library_mean = mean(point), mean(pair["library"])
        http_p99, library_p99 = p99(point), p99(pair["library"])
        shapes = (
            f"p99 ÷ mean {http_p99 / http_mean:.2f}, ours' {library_p99 / library_mean:.2f}"
            if http_mean and library_mean and http_p99 and library_p99
            else ""
        )
        out.append(
            target(
                "http",
                f"{HTTP} select mean ÷ ours'",
                workload,
                replicas,
                http_mean / library_mean if http_mean and library_mean else None,
                None,
                note=shapes,
            )
        )
        out.append(
            target(
                "http",
                "no 429 at the default rate limits",
                workload,
                replicas,
                point.get("rate_limited", 0),
                0,
            )
        )
        out.append(target("http", "no 5xx", workload, replicas, point.get("server_errors", 0), 0))
    return out


def housekeeping_targets(section: dict | None) -> list[dict]:
    """Evaluate the housekeeping target; print the cost of the leftover rows."""
    if not section:
        return [
            target(
                "housekeeping",
                "p99 while housekeeping <= 1.2x without",
                "large",
                None,
                None,
                1.2,
                measured=False,
            )
        ]
    replicas, ratios = section["replicas"], section["ratios"]
    keeper = section["housekeeper"]
    covered = keeper["window_covered"]
    return [
        target(
            "housekeeping",
            "p99 while housekeeping <= 1.2x without (c/b)",
            "large",
            replicas,
            ratios["housekeeping_p99"],
            1.2,
            note=f"housekeeping ran {covered:.0%} of the window" if covered < 1 else "",
        ),
        target(
            "housekeeping",
            "housekeeping removed every expired row",
            "large",
            replicas,
            keeper["expired_left"],
            0,
            note=f"{keeper['expired_removed']} removed in {keeper['seconds']:.1f} s",
        ),
        target(
            "housekeeping",
            "leftover rows: selections/s with ÷ without (b/a)",
            "large",
            replicas,
            ratios["leftover_rows_selections_per_s"],
            None,
            note=f"p99 with ÷ without {ratios['leftover_rows_p99']}",
        ),
    ]


def chain_targets(section: dict | None) -> list[dict]:
    """Evaluate the chain targets for the library and the HTTP path."""
    out = []
    for side in ("library", "http"):
        run = (section or {}).get(side) or {}
        measured = bool(run.get("concurrent"))
        concurrent = run.get("concurrent") or {}
        label = OURS if side == "library" else HTTP
        n = run.get("payments")
        out.append(
            target(
                "chain",
                f"{label}: 0 errors",
                "chain",
                n,
                concurrent.get("errors"),
                0,
                measured=measured,
                note=", ".join(f"{v} x {k}" for k, v in concurrent.get("error_kinds", {}).items()),
            )
        )
        completion = target(
            "chain",
            f"{label}: completion <= 3x sequential",
            "chain",
            n,
            run.get("completion_over_sequential"),
            3.0,
            measured=measured,
        )
        if measured and concurrent.get("completed", 0) < (n or 0):
            # Not every payment went through: the time is a lower bound, and not a pass.
            completion.update(met=False, note="a lower bound: not every payment completed")
        out.append(completion)
        out.append(
            target(
                "chain",
                f"{label}: worst wait <= 2.5x mean wait",
                "chain",
                n,
                concurrent.get("worst_over_mean_wait"),
                2.5,
                measured=measured,
            )
        )
    return out
