"""PgBouncer points: ours at many replica processes through a transaction pool, and directly.

For each workload (spread and hot-wallet by default) ours runs at ``--pgbouncer-replicas``
replica processes (50) twice, on the same data and the same requests:
  pooled  every replica's ``DATABASE_URL`` goes through Debian's PgBouncer pooling transactions
          onto ``--pgbouncer-pool`` server sessions (10), with ``DATABASE_POOLING=transaction``
          and the benchmark database itself as ``DATABASE_DIRECT_URL``, as docs/scaling.md
          deploys it;
  direct  every replica holds a server session of its own.
pooled ÷ direct is what the pool costs (or saves) in selections/s and p99; the correctness
counters of both must be clean (no double spend, no spurious insufficient funds).
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

from bench import seeding, strategies
from bench.strategies import OURS
from bench.worker import Pool

MODES = ("pooled", "direct")


def unavailable() -> str | None:
    """Return why the points cannot be measured, or None when they can."""
    from tests.helpers import pgbouncer

    if pgbouncer.binary() is None:
        return "pgbouncer is not installed (make pgbouncer, or apt-get install pgbouncer)"
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _environment(mode: str, bouncer) -> dict[str, str]:
    """The replicas' environment: ours' shipped settings, through the pool or not."""
    env = strategies.environment(OURS)
    if mode == "pooled":
        direct = os.environ["DATABASE_URL"]  # the benchmark database, set by bench.runner
        env.update(
            DATABASE_URL=bouncer.url(urlsplit(direct).path.lstrip("/")),
            DATABASE_POOLING="transaction",
            DATABASE_DIRECT_URL=direct,
        )
    return env


def run(args, harness, make_workload, say) -> dict:
    """Measure every workload pooled and direct; return the points and their ratios."""
    from django.db import connection

    from tests.helpers import pgbouncer

    replicas, size = args.pgbouncer_replicas, args.pgbouncer_pool
    out: dict[str, object] = {
        "replicas": replicas,
        "pool_size": size,
        "strategy": OURS,
        "points": [],
    }
    workloads = [make_workload(name, args) for name in args.pgbouncer_workloads]
    results: dict[tuple[str, str], dict] = {}
    with pgbouncer.running(connection.settings_dict, pool_size=size) as bouncer:
        for mode in MODES:
            say(
                f"starting {replicas} replica processes, {mode}"
                + (f" through PgBouncer ({size} server sessions)" if mode == "pooled" else "")
            )
            pool = Pool(replicas, _environment(mode, bouncer))
            try:
                for workload in workloads:
                    began = time.monotonic()
                    supply = seeding.seed(workload.tokens, workload.currency)
                    say(f"seeded {workload.title} in {time.monotonic() - began:.1f} s")
                    point = harness.measure(
                        workload, OURS, replicas, supply, tag=f"pgb-{mode}", pool=pool
                    )
                    point["mode"] = mode
                    results[(workload.name, mode)] = point
                    latency = point["latency_ms"]
                    say(
                        f"[pgbouncer] {workload.name:<10} R={replicas:<3} {mode:<7}"
                        f"{point['selections_per_s'] or 0:>9.1f} sel/s  p99 "
                        f"{latency['p99'] or 0:7.1f} ms"
                    )
            finally:
                pool.close()
    for workload in workloads:
        pooled, direct = results[(workload.name, "pooled")], results[(workload.name, "direct")]
        out["points"].append(
            {
                "workload": workload.name,
                "pooled": pooled,
                "direct": direct,
                "ratios": {
                    "selections_per_s": _ratio(
                        pooled["selections_per_s"], direct["selections_per_s"]
                    ),
                    "p99": _ratio(pooled["latency_ms"]["p99"], direct["latency_ms"]["p99"]),
                },
            }
        )
    return out
