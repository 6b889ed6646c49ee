"""One target as the report records it, and the figures of a point that the targets read.

A target is met, not met, or not measured; one without a threshold is a figure printed beside
the others, not judged.
"""

from __future__ import annotations

# The latency of the selections that started after a point's first second (bench.verify).
STEADY = "latency_after_first_second_ms"


def target(
    section: str,
    text: str,
    workload: str,
    replicas: int | None,
    value: float | None,
    threshold: float | None,
    at_least: bool = False,
    note: str = "",
    measured: bool = True,
) -> dict:
    """One target; ``threshold`` None makes it a figure to print (met None, "info").

    The value is recorded to three decimals and judged as recorded, so that the report never
    prints a value that meets its threshold beside a verdict that it does not.
    """
    if value is not None:
        value = round(value, 3)
    if threshold is None or not measured:
        met = None
    elif value is None:
        met = False  # measured but not computable: e.g. no selection at all
    else:
        met = value >= threshold if at_least else value <= threshold
    return {
        "section": section,
        "target": text,
        "workload": workload,
        "replicas": replicas,
        "value": value,
        "threshold": threshold,
        "met": met,
        "info": threshold is None,
        "measured": measured,
        "note": note,
    }


def p99(point: dict | None, figures: str = "latency_ms") -> float | None:
    """The p99 of a point's latency ``figures``; None for a point or figures not measured."""
    return (point or {}).get(figures, {}).get("p99")


def mean(point: dict | None) -> float | None:
    """The mean latency of a point; None for a point not measured."""
    return (point or {}).get("latency_ms", {}).get("mean")
