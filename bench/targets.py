"""The targets ours is measured against, each reported as met, not met, or not measured.

``targets`` evaluates every target of a report: those at the library's selection points here,
those of the HTTP path, housekeeping and the chain in ``bench.service_targets``.
Selection (library), for ours at hot-wallet R = 1, 8, 20; spread R = 8; hot-tokens R = 8, 20:
selections/s at least the best baseline's, p99 at most 1.1x the lowest baseline p99, at most
1.2 lock attempts per locked token, and no spurious insufficient funds, double spend or leaked
lock. The baselines are the five strategies of ``BASELINES``; the floor is not one. Beside the
p99 target, the same ratio over the selections that started after the point's first second is
printed (not judged): how much of the target's p99 is the start.
Reference, the strongest simple design (``bench.strategies.reference``), at the same points:
on spread, selections/s at least 0.9x its and p99 at most 1.1x its; on hot-wallet and
hot-tokens, selections/s at least its and p99 at most its; each judged on the median of the
ratios of its rounds (``bench.reference_rounds``). It is not one of the baselines.
"""

from __future__ import annotations

from bench import reference_rounds
from bench.service_targets import chain_targets, housekeeping_targets, http_targets
from bench.strategies import BASELINES, OURS
from bench.target_record import STEADY, p99, target

SELECTION_POINTS = (
    ("hot-wallet", 1),
    ("hot-wallet", 8),
    ("hot-wallet", 20),
    ("spread", 8),
    ("hot-tokens", 8),
    ("hot-tokens", 20),
)
# Ours against the reference, by workload: (selections/s at least, p99 at most) times its. Where
# nearly every selection is one statement (many wallets), ours pays for what the reference does
# without (namespaces, rate limits, strategies, queues) and may trail it by a little; where
# wallets are contested, ours' machinery must pay for itself.
REFERENCE_RATIOS = {"spread": (0.9, 1.1), "hot-wallet": (1.0, 1.0), "hot-tokens": (1.0, 1.0)}
REFERENCE_NAME = "the reference (the strongest simple design)"


def selection_targets(points: list[dict]) -> list[dict]:
    """Evaluate the selection targets of ours at each target point."""
    index = {(p["workload"], p["replicas"], p["strategy"]): p for p in points}
    out = []
    for workload, replicas in SELECTION_POINTS:
        ours = index.get((workload, replicas, OURS))
        others = {
            b: index[(workload, replicas, b)] for b in BASELINES if (workload, replicas, b) in index
        }
        measured = ours is not None and bool(others)
        missing = [b for b in BASELINES if b not in others]
        note = f"without {', '.join(missing)}" if missing and others else ""
        rates = {b: p["selections_per_s"] for b, p in others.items() if p["selections_per_s"]}
        p99s = {b: p99(p) for b, p in others.items() if p99(p)}
        best = max(rates, key=rates.get, default=None)
        lowest = min(p99s, key=p99s.get, default=None)
        mine = (ours or {}).get("selections_per_s")
        out.append(
            target(
                "selection",
                "selections/s >= 1.0x the best baseline",
                workload,
                replicas,
                mine / rates[best] if mine and best else None,
                1.0,
                at_least=True,
                note=f"best: {best}" + (f"; {note}" if note else "") if best else note,
                measured=measured,
            )
        )
        out.append(
            target(
                "selection",
                "p99 <= 1.1x the lowest baseline p99",
                workload,
                replicas,
                p99(ours) / p99s[lowest] if p99(ours) and lowest else None,
                1.1,
                note=f"lowest: {lowest}" if lowest else "",
                measured=measured,
            )
        )
        # The same without each point's first second: what the target's p99 owes to the start.
        steady = {b: p99(p, STEADY) for b, p in others.items() if p99(p, STEADY)}
        calmest = min(steady, key=steady.get, default=None)
        ours_steady = p99(ours, STEADY)
        out.append(
            target(
                "selection",
                "p99 after the first second ÷ the lowest baseline's",
                workload,
                replicas,
                ours_steady / steady[calmest] if ours_steady and calmest else None,
                None,
                note=f"lowest: {calmest}" if calmest else "",
                measured=measured,
            )
        )
        out.append(
            target(
                "selection",
                "lock attempts per locked token <= 1.2",
                workload,
                replicas,
                (ours or {}).get("attempts_per_locked_token"),
                1.2,
                measured=ours is not None,
            )
        )
        faults = (
            None
            if ours is None
            else sum(
                ours.get(k) or 0
                for k in ("spurious_insufficient_funds", "double_spends", "leaked_locks")
            )
        )
        out.append(
            target(
                "selection",
                "0 spurious insufficient funds, double spends, leaked locks",
                workload,
                replicas,
                faults,
                0,
                measured=ours is not None,
            )
        )
    return out


def reference_targets(points: list[dict], rounds: list[dict] | None = None) -> list[dict]:
    """Evaluate ours against the reference at each target point: the median of its rounds."""
    measured_pairs = reference_rounds.pairs(points, rounds)
    out = []
    for workload, replicas in SELECTION_POINTS:
        measured_rounds = measured_pairs.get((workload, replicas), [])
        rate, latency = REFERENCE_RATIOS[workload]
        rates = reference_rounds.ratios(measured_rounds, lambda p: p.get("selections_per_s"))
        p99s = reference_rounds.ratios(measured_rounds, p99)
        out.append(
            target(
                "reference",
                f"selections/s >= {rate}x {REFERENCE_NAME}",
                workload,
                replicas,
                reference_rounds.median_of(rates),
                rate,
                at_least=True,
                note=reference_rounds.described(rates),
                measured=bool(measured_rounds),
            )
        )
        out.append(
            target(
                "reference",
                f"p99 <= {latency}x {REFERENCE_NAME}",
                workload,
                replicas,
                reference_rounds.median_of(p99s),
                latency,
                note=reference_rounds.described(p99s),
                measured=bool(measured_rounds),
            )
        )
    return out


def targets(data: dict) -> list[dict]:
    """Evaluate every target of a report."""
    return (
        selection_targets(data["points"])
        + reference_targets(data["points"], data.get("reference_rounds"))
        + http_targets(data.get("http") or [])
        + housekeeping_targets(data.get("housekeeping"))
        + chain_targets(data.get("chain"))
    )
