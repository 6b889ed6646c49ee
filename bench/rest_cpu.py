"""What the REST path costs the server's CPU: a select + spend/release cycle, in process.

Each cycle selects through ``POST /api/v1/selections/`` from a random wallet of the spread
workload, then spends (payment and change) or releases, alternately. The requests go to
Django's WSGI handler directly, as a web server's worker calls it (middleware, authentication,
rate limits, validation, the statements, the JSON answer), in this process: no network, no web
server, so what is measured is Django's and ours. Prints the server CPU (``process_time``) and
the wall time per cycle; ``--profile`` prints cProfile's view of the same cycles, by CPU time.

    python -m bench.rest_cpu [--cycles 2000] [--profile] [--top 40]

It uses the benchmark database (``sherdlock_bench``, emptied) on the server of
``DATABASE_URL``, or on the embedded server when that is unset. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys

from bench import database, seeding
from bench.cycles import measure


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rest_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's CPU view")
    parser.add_argument("--top", type=int, default=40, help="functions --profile prints")
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    return parser.parse_args(argv)


class Wsgi:
    """POST JSON to the WSGI application as a web server's worker would."""

    def __init__(self, key: str) -> None:
        from django.core.wsgi import get_wsgi_application

        self.app = get_wsgi_application()
        self.key = key

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        data = json.dumps(body).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_AUTHORIZATION": f"Api-Key {self.key}",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        status: list[str] = []
        body_out = b"".join(self.app(environ, lambda s, headers, exc_info=None: status.append(s)))
        return int(status[0][:3]), json.loads(body_out) if body_out else {}


def run(cycles: int, profile: bool, top: int) -> tuple[float, float]:
    """Return (CPU ms, wall ms) per cycle after the warm-up."""
    from bench import web
    from bench.options import parse_args as bench_args
    from bench.runner import make_workload

    workload = make_workload("spread", bench_args([]))
    seeding.seed(workload.tokens, workload.currency)
    api = Wsgi(web.api_key())
    rng = random.Random(1)

    def cycle(number: int) -> None:
        tx_id, wallet = f"cpu-{number}", workload.pick_wallet(rng)
        quantity = rng.randint(workload.min_quantity, workload.max_quantity)
        request = {"tx_id": tx_id, "wallet": wallet, "currency": workload.currency}
        status, body = api.post("/api/v1/selections/", {**request, "quantity": str(quantity)})
        if status != 201:
            raise RuntimeError(f"select answered {status}: {body}")
        if number % 2:
            outputs = web.outputs(wallet, workload.currency, int(body["total"]), quantity)
            status, body = api.post(f"/api/v1/selections/{tx_id}/spend/", {"outputs": outputs})
        else:
            status, body = api.post(f"/api/v1/selections/{tx_id}/release/", {})
        if status != 200:
            raise RuntimeError(f"spend or release answered {status}: {body}")

    return measure(cycle, cycles, profile, top)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with database.django_on(args.database):
        cpu, wall = run(args.cycles, args.profile, args.top)
    note = " (under cProfile)" if args.profile else ""
    print(f"server CPU per cycle {cpu:.3f} ms, wall {wall:.3f} ms{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
