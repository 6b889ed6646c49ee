"""Reading the plans PostgreSQL explains in JSON."""

from __future__ import annotations

from collections.abc import Iterator


def nodes(plan: dict) -> Iterator[dict]:
    """Yield ``plan`` and every node under it, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)
