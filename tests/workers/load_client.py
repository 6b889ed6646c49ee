"""An HTTP load process for the fault and soak tests: select, then spend or release, repeatedly.

Run as ``python -m tests.workers.load_client --base URL --key KEY --out FILE ...``. Each request
is written as a JSON line (CLOCK_MONOTONIC and wall-clock start and end, status, code, and the
tokens a selection got), so the test can tell when errors happened, when requests succeeded
again, and who was told it held what. The client behaves as a careful
wallet backend: a request whose answer was lost (the worker died, the connection dropped) or
that was answered 503 is sent again with the same tx_id, which the API makes idempotent, until
it gets an answer or its deadline passes. Spends pay the tokens back to the same wallet, so
the unspent supply never changes.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import time

RETRY_FOR = 30.0  # seconds a request is retried before the client gives it up


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="http://host:port")
    parser.add_argument("--key", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", required=True, help="prefix of this client's tx ids")
    parser.add_argument("--wallets", nargs="+", required=True)
    parser.add_argument("--currency", default="USD")
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--max-quantity", type=int, default=30)
    parser.add_argument("--spend-ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=None)
    return parser.parse_args(argv)


class Client:
    """One keep-alive connection, reopened whenever it breaks; every request is recorded."""

    def __init__(self, base: str, key: str, out) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.host, self.port, self.out = host, int(port), out
        self.headers = {"Authorization": f"Api-Key {key}", "Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection | None = None

    def once(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        started, wall = time.monotonic(), time.time()
        try:
            self.conn.request(
                method, path, json.dumps(body) if body is not None else None, self.headers
            )
            response = self.conn.getresponse()
            payload = response.read()
            status = response.status
            answer = json.loads(payload) if payload else {}
        except (OSError, http.client.HTTPException, ValueError) as exc:
            self.conn.close()
            self.conn = None
            status, answer = 0, {"code": f"no answer: {type(exc).__name__}"}
        record = {
            "path": path,
            "start": started,
            "end": time.monotonic(),
            # The database's clock (the same machine's) stamps its rows: the wall clock lets the
            # test set a request beside them.
            "wall_start": wall,
            "wall_end": time.time(),
            "status": status,
            "code": answer.get("code"),
        }
        if body is not None and "tx_id" in body:
            record["tx_id"] = body["tx_id"]
        if status in (200, 201) and isinstance(answer.get("tokens"), list):
            record["tokens"] = [[token["tx_id"], token["index"]] for token in answer["tokens"]]
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        return status, answer

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """Send until answered with anything but 503 or a lost answer, or until RETRY_FOR."""
        deadline = time.monotonic() + RETRY_FOR
        while True:
            status, answer = self.once(method, path, body)
            if status not in (0, 503) or time.monotonic() > deadline:
                return status, answer
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    with open(args.out, "a") as out:
        client = Client(args.base, args.key, out)
        end_at = time.monotonic() + args.duration
        n = 0
        while time.monotonic() < end_at:
            n += 1
            tx_id, wallet = f"{args.name}-{n}", rng.choice(args.wallets)
            status, body = client.call(
                "POST",
                "/api/v1/selections/",
                {
                    "tx_id": tx_id,
                    "wallet": wallet,
                    "currency": args.currency,
                    "quantity": str(rng.randint(1, args.max_quantity)),
                },
            )
            if status not in (200, 201):
                continue
            if rng.random() < args.spend_ratio:
                outputs = [
                    {
                        "index": i,
                        "wallet": wallet,
                        "currency": args.currency,
                        "quantity": token["quantity"],
                    }
                    for i, token in enumerate(body["tokens"])
                ]
                client.call("POST", f"/api/v1/selections/{tx_id}/spend/", {"outputs": outputs})
            else:
                client.call("POST", f"/api/v1/selections/{tx_id}/release/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
