"""What a selection cycle costs a replica's CPU in the library: select, then spend or release.

The library's twin of ``bench.rest_cpu``: one replica in this process selects through the
shipped selector and store (``ours``, as the benchmark's replicas run it), then spends (payment
and change, the harness's statement) or releases, alternately, for a fixed number of cycles
drawn from a seeded random stream. Nothing competes with it, so what it measures is the
replica's own work per cycle: the selector, the store, psycopg and Django's cursor. Prints the
CPU (``process_time``) and the wall time per cycle; ``--profile`` prints cProfile's view.

    python -m bench.library_cpu [--workload hot-wallet] [--cycles 2000] [--profile]

Being a fixed sequence of calls, it can also be counted in instructions, which a busy host
does not move: ``valgrind --tool=callgrind python -m bench.library_cpu --cycles N`` at two
values of N, the difference over the difference in cycles (start-up, seeding and warm-up
cancel out). It uses the benchmark database (``sherdlock_bench``, emptied) on the server of
``DATABASE_URL``, or on the embedded server when that is unset. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import sys

from bench import database
from bench.cycles import measure

WORKLOADS = ("hot-wallet", "spread", "hot-tokens")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.library_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workload", choices=WORKLOADS, default="hot-wallet")
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's CPU view")
    parser.add_argument("--top", type=int, default=40, help="functions --profile prints")
    parser.add_argument("--database", default=database.DEFAULT_NAME)
    return parser.parse_args(argv)


def run(workload_name: str, cycles: int, profile: bool, top: int) -> tuple[float, float]:
    """Return (CPU ms, wall ms) per cycle after the warm-up."""
    from bench import strategies, worker
    from bench.options import parse_args as bench_args
    from bench.runner import make_workload
    from bench.strategies import payment, spend

    workload = make_workload(workload_name, bench_args([]))
    database.seed(workload.tokens, workload.currency)
    replica = strategies.build("ours", 1)
    rng = random.Random(1)

    def cycle(number: int) -> None:
        key, quantity = worker._request(workload, rng)
        picked = replica.select(f"cpu-{number}", key, quantity)
        if number % 2:
            created = spend(picked, payment(picked.total, quantity, key.wallet))
            if created is None:
                raise RuntimeError(f"the spend of cpu-{number} failed")
            replica.spent(picked, created)
        else:
            replica.release(picked)

    return measure(cycle, cycles, profile, top)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with database.django_on(args.database):
        cpu, wall = run(args.workload, args.cycles, args.profile, args.top)
    note = " (under cProfile)" if args.profile else ""
    print(f"{args.workload}: replica CPU per cycle {cpu:.3f} ms, wall {wall:.3f} ms{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
