"""Ours against the reference in rounds: a verdict that does not rest on one measurement.

On a contested wallet the reference's selections collide, back off and retry, and its
throughput at one point can double or halve between two measurements of the same code a few
minutes apart; ours' varies far less. One pair of measurements then decides a reference target
by the luck of the reference's draw. So the harness measures the two ``--reference-rounds``
times (default 3) at every point where both run:

- round 0 is the pass over every strategy (``bench.runner.run_points``);
- each later round measures the two back to back on the same seeded data, right after the
  workload's pass: the reference first in odd rounds, ours first in even ones, so neither
  always runs after the other.

The reference's targets, its table and the figures read the median of the per-round ratios.
The points of the later rounds are kept in the report (``reference_rounds``, each with its
``round``) and audited like every point.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from bench.strategies import OURS, REFERENCE

# The key that numbers a later round's point (1, 2, ...); the pass over every strategy is 0.
ROUND = "round"

Pair = tuple[dict, dict]  # (ours, the reference), measured in the same round


def order(number: int) -> tuple[str, str]:
    """Which of the two runs first in later round ``number``."""
    return (REFERENCE, OURS) if number % 2 else (OURS, REFERENCE)


def pairs(
    points: list[dict], rounds: list[dict] | None = None
) -> dict[tuple[str, int], list[Pair]]:
    """Every (workload, replicas) where ours and the reference both ran: their pairs, by round.

    ``points`` are the pass over every strategy (round 0), ``rounds`` the later rounds' points.
    """
    by_round: dict[tuple[str, int, int], dict[str, dict]] = {}
    for point in [*points, *(rounds or [])]:
        if point["strategy"] in (OURS, REFERENCE):
            key = (point["workload"], point["replicas"], point.get(ROUND, 0))
            by_round.setdefault(key, {})[point["strategy"]] = point
    out: dict[tuple[str, int], list[Pair]] = {}
    for (workload, replicas, _), both in sorted(by_round.items()):
        if OURS in both and REFERENCE in both:
            out.setdefault((workload, replicas), []).append((both[OURS], both[REFERENCE]))
    return out


def ratios(measured: list[Pair], figure: Callable[[dict], float | None]) -> list[float | None]:
    """Ours ÷ the reference of ``figure`` in each round (None where either lacks it)."""
    out: list[float | None] = []
    for ours, reference in measured:
        mine, theirs = figure(ours), figure(reference)
        out.append(mine / theirs if mine and theirs else None)
    return out


def median_of(values: list[float | None]) -> float | None:
    """The median of the values that exist; None if none does."""
    present = [v for v in values if v is not None]
    return median(present) if present else None


def median_ratio(measured: list[Pair], figure: Callable[[dict], float | None]) -> float | None:
    """The median over the rounds of ours ÷ the reference of ``figure``."""
    return median_of(ratios(measured, figure))


def described(values: list[float | None]) -> str:
    """The rounds' ratios as a target's note says them: "median of 3 rounds: 0.71, 0.75, 0.80"."""
    if len(values) < 2:
        return ""
    shown = ", ".join("-" if v is None else f"{v:.2f}" for v in values)
    return f"median of {len(values)} rounds: {shown}"
