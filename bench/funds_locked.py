"""What a funds-locked answer costs the server: the whole request, in process.

One wallet holds one token, held by a first selection; then ``--requests`` selections of the
same wallet ask for it and are answered 409 ``funds_locked`` at once (no waiting asked for).
Each goes through Django's full stack (middleware, authentication, rate limits, the view, the
selecting statement, the failure record, the JSON answer) with the test client, in this
process: no network, no web server. Prints the median and p99 of the answer's time.

    python -m bench.funds_locked [--requests 300]

It uses the benchmark database (``sherdlock_bench``, emptied) on the server of
``DATABASE_URL``, or on the embedded server when that is unset. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench import database, seeding

WARM_UP = 20


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.funds_locked",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    return parser.parse_args(argv)


def measure(requests: int) -> list[float]:
    """Return the milliseconds of each funds-locked answer after the warm-up."""
    from django.conf import settings
    from django.test import Client

    from bench import web

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    seeding.seed((("held", 100),), "USD")
    client = Client(HTTP_AUTHORIZATION=f"Api-Key {web.api_key()}")

    def select(tx_id: str):
        return client.post(
            "/api/v1/selections/",
            {"tx_id": tx_id, "wallet": "held", "currency": "USD", "quantity": "1"},
            content_type="application/json",
        )

    if select("holder").status_code != 201:
        raise RuntimeError("the first selection failed")
    times = []
    for number in range(requests + WARM_UP):
        started = time.perf_counter()
        answer = select(f"waiting-{number}")
        times.append((time.perf_counter() - started) * 1000)
        if answer.status_code != 409 or answer.json().get("code") != "funds_locked":
            raise RuntimeError(f"expected funds_locked, got {answer.status_code}")
    return times[WARM_UP:]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with database.django_on(args.database, log_level="ERROR"):
        times = sorted(measure(args.requests))
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(
        f"funds_locked answer over {len(times)} requests: median "
        f"{statistics.median(times):.2f} ms, p99 {p99:.2f} ms (whole request, in process)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
