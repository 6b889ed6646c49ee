"""What a selection cycle costs in the library: select, then spend or release.

The library's twin of ``bench.rest_cpu``: one replica in this process selects through the
shipped selector and store (``ours``, as the benchmark's replicas run it; ``--strategy
reference`` runs the reference instead), then spends (payment and change, the strategy's
spend) or releases, alternately, for a fixed number of cycles drawn from a seeded random
stream. Nothing competes with it, so what it measures is the work of one cycle: the replica's
(the selector, the store, psycopg and Django's cursor) and, on a server on this host, its
backend's (``bench.cpu``). Prints the CPU (``process_time``) and the wall time per cycle;
``--profile`` prints cProfile's view. ``--spread-wallets`` and the workload options of
``python -m bench`` size the workload. One process revisits each of spread's default 1,000
wallets within the cache's ttl, so its fetches are warm (full batches, spare rows queued),
where a replica of the benchmark's 8 meets most wallets cold: ``--spread-wallets 8000`` gives
that replica's view. The backend's pid is printed (stderr) before the first
cycle: ``perf record --call-graph dwarf -p PID -- sleep 5`` then shows where the server's time
goes, phase by phase (``standard_ExecutorStart``: setting up the plan, which grows with the
statement's nodes; ``ExecInsertIndexTuples``: an entry per index; ``CommitTransaction``).

    python -m bench.library_cpu [--workload hot-wallet] [--cycles 2000] [--strategy ours]
        [--profile] [-- --spread-wallets 8000 --spread-tokens 20]

On a shared host, run the two sides of a comparison at the same time (each with its own
``--database``): both then see the same load, and their ratio holds where one side run after
the other does not. Being a fixed sequence of calls, it can also be counted in instructions,
which a busy host does not move: ``valgrind --tool=callgrind python -m bench.library_cpu
--cycles N`` at two values of N, the difference over the difference in cycles (start-up,
seeding and warm-up cancel out). It uses the benchmark database (``sherdlock_bench``, emptied)
on the server of ``DATABASE_URL``, or on the embedded server when that is unset. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import random
import sys

from bench import database, seeding
from bench.cycles import measure

WORKLOADS = ("hot-wallet", "spread", "hot-tokens")
STRATEGIES = ("ours", "reference")


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
    parser.add_argument("--strategy", choices=STRATEGIES, default="ours")
    parser.add_argument(
        "workload_options", nargs="*", help="options of python -m bench that size the workload"
    )
    return parser.parse_args(argv)


def run(
    workload_name: str,
    cycles: int,
    profile: bool,
    top: int,
    strategy: str = "ours",
    workload_options: list[str] | None = None,
) -> tuple[float, float, float | None]:
    """Return (replica CPU ms, wall ms, backend CPU ms or None) per cycle after the warm-up."""
    from django.db import connection

    from bench import strategies, worker
    from bench.cpu import cpu_seconds, postgres_server
    from bench.options import parse_args as bench_args
    from bench.runner import make_workload
    from bench.strategies import payment, spend
    from common import db

    workload = make_workload(workload_name, bench_args(workload_options or []))
    seeding.seed(workload.tokens, workload.currency)
    if strategy == strategies.REFERENCE:
        database.reset_reference()
    replica = strategies.build(strategy, 1)
    spender = getattr(replica, "spend", spend)  # a strategy on tables of its own spends itself
    rng = random.Random(1)
    # Its backend's CPU is read only when the server runs on this host (bench.cpu finds its
    # postmaster): elsewhere the pid would name another host's process.
    local = postgres_server(connection) is not None
    backend = db.one(db.execute("SELECT pg_backend_pid()", {}))[0]
    # Named before the warm-up, so that a native profiler can be attached to the server's side
    # of the cycles (``perf record --call-graph dwarf -p PID``) while they run.
    print(f"[library_cpu] backend pid {backend}", file=sys.stderr, flush=True)
    started: list[float | None] = []

    def cycle(number: int) -> None:
        if number == 0:  # the first measured cycle
            started.append(cpu_seconds(backend))
        key, quantity = worker._request(workload, rng)
        picked = replica.select(f"cpu-{number}", key, quantity)
        if number % 2:
            created = spender(picked, payment(picked.total, quantity, key.wallet))
            if created is None:
                raise RuntimeError(f"the spend of cpu-{number} failed")
            if hasattr(replica, "spent"):
                replica.spent(picked, created)
        else:
            replica.release(picked)

    cpu, wall = measure(cycle, cycles, profile, top)
    ended = cpu_seconds(backend)
    if not local or not started or started[0] is None or ended is None:
        return cpu, wall, None
    return cpu, wall, 1000 * (ended - started[0]) / cycles


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    with database.django_on(args.database):
        cpu, wall, backend = run(
            args.workload, args.cycles, args.profile, args.top, args.strategy, args.workload_options
        )
    label = args.workload if args.strategy == "ours" else f"{args.workload}, {args.strategy}"
    note = " (under cProfile)" if args.profile else ""
    print(f"{label}: replica CPU per cycle {cpu:.3f} ms, wall {wall:.3f} ms{note}")
    if backend is not None:
        print(f"{label}: backend CPU per cycle {backend:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
