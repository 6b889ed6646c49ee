"""A replica under remote control, and ``RemoteReplica``, the test's side of it.

The child (``python -m tests.workers.remote_replica``) builds this process's selector as a
replica would (``locks.replica``), says whether it listens, then answers one JSON command per
stdin line with one JSON reply per stdout line: ``select``, ``release``, ``spend`` (pay
``pay`` away, the change back to the same wallet) and ``peek`` (the cached candidates).
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from typing import Any

from tests.helpers.processes import ROOT, WAIT


def main() -> int:
    import django

    django.setup()
    from django.db import transaction
    from django.utils import timezone

    from locks import replica
    from sherdlock import Selection, WalletKey
    from tests.helpers.warming import warm
    from tokens.models import Token

    selector = replica.get_selector()
    listener = replica.get_listener()
    if listener is not None and not listener.wait_connected(30):
        sys.exit("the listener never connected")
    held: dict[str, Selection] = {}

    def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        if op == "select":
            selection = selector.select(cmd["tx"], cmd["wallet"], "USD", cmd["quantity"])
            held[cmd["tx"]] = selection
            s = selection.stats
            return {
                "tokens": list(selection.token_ids),
                "fetches": s.fetches,
                "lock_attempts": s.lock_attempts,
                "lock_conflicts": s.lock_conflicts,
            }
        if op == "warm":
            warm(selector, cmd["wallet"], listener=listener)
            return {}
        if op == "release":
            return {"released": selector.release(held.pop(cmd["tx"]))}
        if op == "spend":
            selection = held.pop(cmd["tx"])
            with transaction.atomic():
                Token.objects.filter(pk__in=selection.token_ids).update(
                    spent_by=selection.tx_id, spent_at=timezone.now()
                )
                change = Token.objects.create(
                    tx_id=selection.tx_id,
                    index=0,
                    wallet=selection.key.wallet,
                    currency="USD",
                    quantity=selection.total - cmd["pay"],
                )
            selector.forget(selection.token_ids, selection.key)
            return {"change": change.pk}
        if op == "peek":
            key = WalletKey(cmd["wallet"], "USD")
            return {"tokens": [[c.token_id, c.quantity] for c in selector.cache.peek(key)]}
        raise ValueError(op)

    print(json.dumps({"listening": listener is not None}), flush=True)
    for line in sys.stdin:
        try:
            reply = handle(json.loads(line))
        except Exception as exc:
            reply = {"error": repr(exc)}
        print(json.dumps(reply), flush=True)
    return 0


class RemoteReplica:
    """A replica in a child process, driven one command at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.workers.remote_replica"],
            cwd=ROOT,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None and self.process.stderr is not None
        ready, _, _ = select.select([self.process.stdout], [], [], WAIT * 3)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.process.kill()
            raise AssertionError(f"worker gave no answer: {self.process.stderr.read()[-3000:]}")
        reply: dict[str, Any] = json.loads(line)
        assert "error" not in reply, reply["error"]
        return reply

    def __call__(self, op: str, **args: object) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=WAIT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


if __name__ == "__main__":
    sys.exit(main())
