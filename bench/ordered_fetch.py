"""What a fetch in quantity order costs on one large wallet, against the random fetch.

One wallet of ``--tokens`` tokens of 1-20 (generated in the database), then, one replica in
this process, ``--calls`` fetch-and-lock calls of each kind through the PostgreSQL store, each
released at once: the random fetch, and fetches in ascending and descending order (the
strategies smallest_first and fewest_tokens, a random selection's largest-first fetch) whose
batch of ``--limit`` tokens covers the need, and whose batch cannot (the wallet's free tokens
are then asked whether they can). Prints the median time of a call (client and server) and
each kind ÷ the random fetch, and writes them to ``--out`` as JSON.

    python -m bench.ordered_fetch [--tokens 100000] [--calls 30] [--out FILE]

It uses the benchmark database (``sherdlock_bench``, emptied) on the server of
``DATABASE_URL``, or on the embedded server when that is unset. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench import database, seeding

WARM_UP = 5
# (name, order, need): the batch covers a need of 50 in either order (64 tokens of at least 1);
# 64 tokens of at most 20 cannot cover 2,000.
KINDS = (
    ("random", "random", 50),
    ("ascending, batch covers", "ascending", 50),
    ("descending, batch covers", "descending", 50),
    ("ascending, beyond the batch", "ascending", 2000),
    ("descending, beyond the batch", "descending", 2000),
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ordered_fetch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    parser.add_argument("--out", default="bench/results/ordered_fetch.json")
    return parser.parse_args(argv)


def measure(tokens: int, calls: int, limit: int) -> dict[str, float]:
    """Return the median milliseconds of a call of each kind."""
    from django.db import connection

    from locks.store import PostgresTokenStore
    from sherdlock import Claim, WalletKey

    (wallet,) = seeding.seed_generated("large", 1, tokens, "USD", 1)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tokens_token")
    store, key = PostgresTokenStore(lease=30), WalletKey(wallet, "USD")
    medians = {}
    for name, order, need in KINDS:
        times = []
        for number in range(calls + WARM_UP):
            tx_id = f"{order}-{need}-{number}"
            started = time.perf_counter()
            result = store.fetch_and_lock(Claim(tx_id, key, need, None, order=order), limit)
            times.append(1000 * (time.perf_counter() - started))
            if not result.granted:
                raise RuntimeError(f"{name}: nothing was locked")
            store.unlock(tx_id, result.fence, None, wallet)
        medians[name] = statistics.median(times[WARM_UP:])
    return medians


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with database.django_on(args.database, log_level="ERROR"):
        medians = measure(args.tokens, args.calls, args.limit)
    print(
        f"one wallet of {args.tokens:,} tokens, batches of {args.limit}, {args.calls} calls each:"
    )
    ratios = {name: median / medians["random"] for name, median in medians.items()}
    for name, median in medians.items():
        print(f"  {name:30} {median:8.2f} ms  {ratios[name]:6.1f}x the random fetch")
    report = {"tokens": args.tokens, "limit": args.limit, "calls": args.calls}
    report |= {"median_ms": medians, "vs_random": ratios}
    with open(args.out, "w") as out:
        json.dump(report, out, indent=2)
    print(f"report {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
