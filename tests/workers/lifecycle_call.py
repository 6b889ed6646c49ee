"""Spend, extend or release one selection when told to, in a process of its own.

``python -m tests.workers.lifecycle_call OPERATION TX_ID [TOTAL]`` sets Django up, connects and
prints ``ready PID`` (its database backend's pid), then waits for a line on stdin. It then runs
OPERATION (spend, paying TOTAL to bob in USD; extend; release) on TX_ID through
``locks.selections`` and prints one JSON line: ``{"outcome": "ok"}`` or the name of the error
the operation raised.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import django

    django.setup()
    from django.db import connection

    from locks import selections
    from sherdlock import SherdlockError
    from tokens.services import TokenSpec

    operation, tx_id = argv[0], argv[1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    print("ready", pid, flush=True)
    sys.stdin.readline()
    try:
        if operation == "spend":
            pay = TokenSpec(
                tx_id=tx_id, index=0, wallet="bob", currency="USD", quantity=int(argv[2])
            )
            selections.spend_selection(tx_id, [pay])
        elif operation == "extend":
            selections.extend_selection(tx_id, 60)
        elif operation == "release":
            selections.release_selection(tx_id)
        else:
            raise SystemExit(f"unknown operation {operation!r}")
        outcome = "ok"
    except SherdlockError as exc:
        outcome = type(exc).__name__
    print(json.dumps({"outcome": outcome}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
