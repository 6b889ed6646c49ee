"""Run the benchmark reference's spend in a session of its own, as another replica would.

``python -m tests.workers.reference_spend URL PARAMS_JSON`` prints the number of tokens spent.
"""

from __future__ import annotations

import json
import sys

import psycopg

from bench.strategies.reference import SPEND


def main(argv: list[str]) -> int:
    url, params = argv[0], json.loads(argv[1])
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(SPEND, params).fetchone()
    print(0 if row is None else row[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
