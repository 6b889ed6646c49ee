"""Reading the plans PostgreSQL explains in JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.db import connection

from common import db


def nodes(plan: dict) -> Iterator[dict]:
    """Yield ``plan`` and every node under it, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


def explain_prepared(statement: str, params: dict, analyse: bool = False) -> list[dict]:
    """Explain ``statement`` prepared as the application sends it; return the plan's nodes.

    ``params`` are by name (``common.db.native`` numbers them); with ``analyse`` it runs. The
    plan is the one the session's ``plan_cache_mode`` gives a prepared statement's first run.
    """
    text, names = db.native(statement)
    values = [params[name] for name in names]
    placeholders = ", ".join(["%s"] * len(values))
    options = "ANALYZE, FORMAT JSON" if analyse else "FORMAT JSON"
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE probe AS {text}")
        try:
            cursor.execute(f"EXPLAIN ({options}) EXECUTE probe({placeholders})", values)
            found = cursor.fetchone()[0]
        finally:
            cursor.execute("DEALLOCATE probe")
    found = json.loads(found) if isinstance(found, str) else found
    return list(nodes(found[0]["Plan"]))
