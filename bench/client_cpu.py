"""What the API's client costs its caller's CPU per select + spend/release cycle.

The web server runs as ``make run`` starts it (``bench.web_server``), on the spread workload.
This process sends the same cycles three ways, each on kept-alive connections: a bare
``http.client`` loop (one connection, ``json`` in and out, nothing parsed beyond the total
a spend needs), the shipped client ``sherdlock_client.Client`` (typed answers, retries), and
``sherdlock_client.AsyncClient``. The ways take turns in short rounds, so that a busy host
slows them alike, and the CPU this process spent (``process_time``) is summed per way: the
server's work is in other processes. The client's cost is reported as a ratio to the bare
loop's, next to ``BOUND``.

    python -m bench.client_cpu [--cycles 2000]

It uses the benchmark database (``sherdlock_bench``, emptied) on the server of
``DATABASE_URL``, or on the embedded server when that is unset.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable

from bench import database, seeding

# The client may cost its caller this much more CPU per cycle than the bare loop.
BOUND = 1.3
# Cycles per turn of each way: short enough that load on the host falls on every way alike.
ROUND = 100
WARM_UP = 50  # cycles of each way before the clock starts (connections, imports, caches)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.client_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cycles", type=int, default=2000, help="measured cycles per way")
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    return parser.parse_args(argv)


class Requests:
    """The same sequence of cycles for every way: (wallet, quantity, spend?) from a seed."""

    def __init__(self, workload, seed: int = 1) -> None:
        self.workload = workload
        self.rng = random.Random(seed)

    def next(self) -> tuple[str, int]:
        w = self.workload
        return w.pick_wallet(self.rng), self.rng.randint(w.min_quantity, w.max_quantity)


def bare_way(port: int, key: str, currency: str) -> Callable[[str, str, int, bool], None]:
    """Return a cycle on one kept-alive ``http.client`` connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Api-Key {key}", "Content-Type": "application/json"}

    def post(path: str, body: dict) -> tuple[int, dict]:
        for again in (False, True):
            try:
                connection.request("POST", path, json.dumps(body), headers)
                response = connection.getresponse()
                return response.status, json.loads(response.read())
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed the idle connection while the other ways took their turn;
                # every request of the cycle may be sent again (its tx id names it).
                connection.close()
                if again:
                    raise
        raise AssertionError("unreachable")

    def cycle(tx_id: str, wallet: str, quantity: int, spend: bool) -> None:
        status, body = post(
            "/api/v1/selections/",
            {"tx_id": tx_id, "wallet": wallet, "currency": currency, "quantity": str(quantity)},
        )
        if status != 201:
            raise RuntimeError(f"select answered {status}: {body}")
        if spend:
            outputs = _outputs(wallet, currency, int(body["total"]), quantity)
            status, body = post(f"/api/v1/selections/{tx_id}/spend/", {"outputs": outputs})
        else:
            status, body = post(f"/api/v1/selections/{tx_id}/release/", {})
        if status != 200:
            raise RuntimeError(f"spend or release answered {status}: {body}")

    return cycle


def _outputs(wallet: str, currency: str, total: int, quantity: int) -> list[dict]:
    from bench.web import outputs

    return outputs(wallet, currency, total, quantity)


def client_way(port: int, key: str, currency: str) -> Callable[[str, str, int, bool], None]:
    """Return a cycle through ``sherdlock_client.Client``."""
    from sherdlock_client import Client, Output

    client = Client(f"http://127.0.0.1:{port}", key)

    def cycle(tx_id: str, wallet: str, quantity: int, spend: bool) -> None:
        selection = client.select(tx_id, wallet, currency, quantity)
        if spend:
            outputs = _outputs(wallet, currency, selection.total, quantity)
            client.spend(tx_id, [Output(**o) for o in outputs])
        else:
            client.release(tx_id)

    return cycle


def async_way(port: int, key: str, currency: str) -> Callable[[str, str, int, bool], None]:
    """Return a cycle through ``sherdlock_client.AsyncClient``, on one event loop."""
    from sherdlock_client import AsyncClient, Output

    loop = asyncio.new_event_loop()
    client = AsyncClient(f"http://127.0.0.1:{port}", key)

    async def run(tx_id: str, wallet: str, quantity: int, spend: bool) -> None:
        selection = await client.select(tx_id, wallet, currency, quantity)
        if spend:
            outputs = _outputs(wallet, currency, selection.total, quantity)
            await client.spend(tx_id, [Output(**o) for o in outputs])
        else:
            await client.release(tx_id)

    def cycle(tx_id: str, wallet: str, quantity: int, spend: bool) -> None:
        loop.run_until_complete(run(tx_id, wallet, quantity, spend))

    return cycle


def measure(port: int, key: str, workload, cycles: int) -> dict:
    """Return each way's CPU and wall ms per cycle and the clients' ratios to the bare loop."""
    currency = workload.currency
    ways = {
        "http.client": bare_way(port, key, currency),
        "client": client_way(port, key, currency),
        "async_client": async_way(port, key, currency),
    }
    cpu = dict.fromkeys(ways, 0.0)
    wall = dict.fromkeys(ways, 0.0)
    requests = {name: Requests(workload) for name in ways}
    done = 0
    for turn in range(-1, (cycles + ROUND - 1) // ROUND):
        size = WARM_UP if turn < 0 else min(ROUND, cycles - done)
        for name, cycle in ways.items():
            plan = [requests[name].next() for _ in range(size)]
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            for n, (wallet, quantity) in enumerate(plan):
                number = done + n if turn >= 0 else n - WARM_UP
                cycle(f"{name}-{number}", wallet, quantity, number % 2 == 1)
            if turn >= 0:
                cpu[name] += time.process_time() - started_cpu
                wall[name] += time.perf_counter() - started_wall
        if turn >= 0:
            done += size
    per = {name: 1000 * cpu[name] / cycles for name in ways}
    return {
        "cycles": cycles,
        "cpu_ms_per_cycle": {name: round(ms, 4) for name, ms in per.items()},
        "wall_ms_per_cycle": {name: round(1000 * wall[name] / cycles, 4) for name in ways},
        "ratio": round(per["client"] / per["http.client"], 3),
        "async_ratio": round(per["async_client"] / per["http.client"], 3),
        "bound": BOUND,
    }


def run(
    cycles: int, say: Callable[[str], None] = print, args: argparse.Namespace | None = None
) -> dict:
    """Seed the spread workload (sized by the harness's ``args``), serve it, and measure every
    way (Django set up by the caller)."""
    from bench import web, web_server
    from bench.options import parse_args as bench_args
    from bench.runner import make_workload

    workload = make_workload("spread", args or bench_args([]))
    seeding.seed(workload.tokens, workload.currency)
    key = web.api_key()
    say(f"client cost: {cycles} cycles per way")
    with tempfile.TemporaryFile("w+") as log:
        server = web_server.Server(1, log)
        try:
            return measure(server.port, key, workload, cycles)
        finally:
            server.stop()


def describe(result: dict | None) -> list[str]:
    """Return the report's lines for ``run``'s result."""
    if not result:
        return []
    ms = result["cpu_ms_per_cycle"]
    verdict = "within" if result["ratio"] <= result["bound"] else "beyond"
    return [
        "",
        "Client CPU per select + spend/release cycle (the calling process, "
        f"{result['cycles']} cycles each):",
        f"  http.client loop {ms['http.client']:.3f} ms, sherdlock_client.Client "
        f"{ms['client']:.3f} ms (x{result['ratio']:.2f}, {verdict} the x{result['bound']} bound), "
        f"AsyncClient {ms['async_client']:.3f} ms (x{result['async_ratio']:.2f})",
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with database.django_on(args.database):
        result = run(args.cycles)
    print("\n".join(describe(result)[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
