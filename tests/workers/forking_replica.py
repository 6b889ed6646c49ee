"""A replica that forks twice: each child gets its own listener, the parent keeps its own.

``python -m tests.workers.forking_replica`` (with ``SHERDLOCK_LISTEN=1``) selects once, so its
cache holds a queue of wallet "f", then forks a child that builds its own selector and one that
does not; both exit, running the exit hook they inherited. Then it issues a token of "f" and
waits for its own listener to hear of it. It prints one JSON line: what each child saw, the
parent's listening session before and after, and whether it heard.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def child(use_selector: bool) -> dict[str, Any]:
    """Fork; in the child, report whether a listener came along (and start one); return it."""
    from locks import replica

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        report: dict[str, Any] = {"inherited": replica.get_listener() is not None}
        if use_selector:
            replica.get_selector()
            mine = replica.get_listener()
            assert mine is not None
            report.update(connected=mine.wait_connected(30), backend=mine.backend_pid)
        os.write(write, json.dumps(report).encode())
        sys.exit(0)  # runs the exit hook inherited from the parent
    os.close(write)
    got: dict[str, Any] = json.loads(os.read(read, 4096))
    os.waitpid(pid, 0)
    return got


def main() -> int:
    import django

    django.setup()
    from locks import replica
    from sherdlock import WalletKey
    from tests.helpers.warming import warm
    from tokens.services import TokenSpec, issue_tokens

    selector = replica.get_selector()
    parent = replica.get_listener()
    assert parent is not None and parent.wait_connected(30)
    before = parent.backend_pid
    warm(selector, "f", listener=parent)
    selector.select("parent-1", "f", "USD", 1)  # a queue for "f", so news about it is kept

    first, second = child(True), child(False)
    (issued,), _ = issue_tokens([TokenSpec("fork", 0, "f", "USD", 5)])
    key = WalletKey("f", "USD")

    def heard() -> bool:
        return issued.pk in {c.token_id for c in selector.cache.peek(key)}

    deadline = time.monotonic() + 30
    while not heard() and time.monotonic() < deadline:
        time.sleep(0.02)
    report = {
        "first": first,
        "second": second,
        "before": before,
        "after": parent.backend_pid,
        "connected": parent.connected,
        "reconnects": parent.stats.reconnects,
        "heard": heard(),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
