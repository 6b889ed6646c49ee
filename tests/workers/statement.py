"""Run one statement in a session of its own, as another replica would, and print its first value.

``python -m tests.workers.statement URL STATEMENT PARAMS_JSON``: the test passes the
benchmark reference's spend (``bench.strategies.reference.SPEND``) and prints what it counted.
"""

from __future__ import annotations

import json
import sys

import psycopg


def main(argv: list[str]) -> int:
    url, statement, params = argv[0], argv[1], json.loads(argv[2])
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(statement, params).fetchone()
    print(None if row is None else row[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
