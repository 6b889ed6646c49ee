"""An HTTP load process for the fault and soak tests: select, then spend or release, repeatedly.

Run as ``python -m tests.workers.load_client --base URL --key KEY --out FILE ...``. Each request
is written as a JSON line (CLOCK_MONOTONIC and wall-clock start and end, status, code, its tx_id,
and the tokens a selection got), so the test can tell when errors happened, when requests
succeeded again, and who was told it held what. It calls through the API's client
(``sherdlock_client``) as a careful wallet backend would: a request whose answer was lost (the
worker died, the connection dropped) or that was answered 503 is sent again by the client, with
the same tx_id, which the API makes idempotent, until it gets an answer or its deadline passes;
every attempt is written, through the client's retry hook. Spends pay the tokens back to the
same wallet, so the unspent supply never changes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TextIO, TypeVar

from sherdlock_client import (
    ApiError,
    Client,
    ClientError,
    Output,
    Retry,
    RetryPolicy,
    Selection,
    Spent,
)

T = TypeVar("T")

RETRY_FOR = 30.0  # seconds a request is retried before the client gives it up
ATTEMPTS = 1_000_000  # as many as fit in RETRY_FOR


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


def failure(error: ClientError) -> tuple[int, str]:
    """Return the status (0: no answer) and code a failed attempt is written with."""
    if isinstance(error, ApiError):
        return error.status or 0, error.code
    return 0, f"no answer: {type(error).__name__}"


class Recorder:
    """Write every attempt of every call: the retried ones (hook) and the last one."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.started = self.wall_started = 0.0
        self.tx_id: str | None = None

    def write(self, path: str, status: int, code: str | None, answer: object = None) -> None:
        record: dict[str, Any] = {
            "path": path,
            "start": self.started,
            "end": time.monotonic(),
            # The database's clock (the same machine's) stamps its rows: the wall clock lets the
            # test set a request beside them.
            "wall_start": self.wall_started,
            "wall_end": time.time(),
            "status": status,
            "code": code,
        }
        if self.tx_id is not None:
            record["tx_id"] = self.tx_id
        held = answer.selection if isinstance(answer, Spent) else answer
        if isinstance(held, Selection):
            record["tokens"] = [[token.tx_id, token.index] for token in held.tokens]
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def retried(self, retry: Retry) -> None:
        self.write(retry.target, *failure(retry.error))
        # When the next attempt goes out.
        self.started = time.monotonic() + retry.delay
        self.wall_started = time.time() + retry.delay

    def call(self, path: str, tx_id: str, send: Callable[[], T]) -> T | None:
        """Send one call (retried by the client); return its answer, or None if it failed."""
        self.started, self.wall_started, self.tx_id = time.monotonic(), time.time(), tx_id
        try:
            answer = send()
        except ClientError as error:
            self.write(path, *failure(error))
            return None
        created = isinstance(answer, Selection) and answer.created
        self.write(path, 201 if created else 200, None, answer)
        return answer


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    with open(args.out, "a") as out:
        recorder = Recorder(out)
        client = Client(
            args.base,
            args.key,
            timeout=30,
            retries=RetryPolicy(retry_for=RETRY_FOR, attempts=ATTEMPTS),
            on_retry=recorder.retried,
        )
        api = "/api/v1/selections/"
        end_at = time.monotonic() + args.duration
        n = 0
        while time.monotonic() < end_at:
            n += 1
            tx_id, wallet = f"{args.name}-{n}", rng.choice(args.wallets)
            quantity = rng.randint(1, args.max_quantity)
            selection = recorder.call(
                api, tx_id, partial(client.select, tx_id, wallet, args.currency, quantity)
            )
            if selection is None:
                continue
            if rng.random() < args.spend_ratio:
                outputs = [
                    Output(i, wallet, args.currency, token.quantity)
                    for i, token in enumerate(selection.tokens)
                ]
                spend = partial(client.spend, tx_id, outputs)
                recorder.call(f"{api}{tx_id}/spend/", tx_id, spend)
            else:
                release = partial(client.release, tx_id)
                recorder.call(f"{api}{tx_id}/release/", tx_id, release)
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
