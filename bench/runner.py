"""The harness: ours against its baselines, the HTTP path, housekeeping points, the chain.

``python -m bench`` (what ``make bench`` runs) prints progress while it measures, then tables
with ratios and the targets, and writes ``report.json``, ``figures.md`` and ``throughput.png``
under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time

from bench import asleep, books, cpu, database, reference_rounds, seeding, strategies
from bench.options import parse_args
from bench.quiet_spell import quiet_spell
from bench.workloads import Workload, hot_tokens, hot_wallet, spread


def say(message: str) -> None:
    """Print a progress line."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def make_workload(name: str, args: argparse.Namespace) -> Workload:
    """Create one workload from the command-line sizes."""
    options = {"spend_ratio": args.spend_ratio, "hold": args.hold}
    if name == "spread":
        workload = spread(args.spread_wallets, args.spread_tokens, args.seed, **options)
    elif name == "hot-wallet":
        workload = hot_wallet(args.hot_wallet_tokens, args.seed, **options)
    else:
        workload = hot_tokens(
            args.hot_tokens_big,
            args.hot_tokens_big_quantity,
            args.hot_tokens_small,
            args.seed,
            **options,
        )
    workload.check()
    return workload


class Harness:
    """Measure points; keep one replica pool per environment, started on first use."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pools: dict[str, object] = {}
        self.size = max(
            [
                *args.replicas,
                *args.http_replicas,
                args.housekeeping_replicas,
                args.strategy_replicas if args.selection_strategies else 1,
                min(args.chain_processes, max(1, args.chain_payments)),
            ]
        )

    def pool(self, strategy: str):
        from bench.worker import Pool

        overrides = strategies.overrides(strategy)
        name = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
        if name not in self.pools:
            say(
                f"starting {self.size} replica processes with the shipped settings"
                f"{f' and {name}' if name else ''}"
            )
            self.pools[name] = Pool(self.size, strategies.environment(strategy))
        return self.pools[name]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()

    def measure(
        self,
        workload: Workload,
        strategy: str,
        replicas: int,
        supply: dict[str, int],
        tag: str = "",
        reset: bool = True,
        on_start=None,
        pool=None,
        duration: float | None = None,
    ) -> dict:
        """Measure one point (on freshly reset data unless ``reset`` is False).

        ``pool`` runs it on replica processes of the caller's (default: the strategy's own);
        ``duration`` is its length in seconds (default ``--duration``).
        """
        from bench import verify
        from bench.worker import Task

        reference = strategy == strategies.REFERENCE  # its own tables: filled, then audited
        if reset:
            database.reset()
            if reference:
                database.reset_reference()
            if self.args.quiet_spell:
                quiet_spell(self.args.quiet_spell)
        notifying = strategies.deploy(strategy)
        point: dict[str, object] = {
            "workload": workload.name,
            "strategy": strategy,
            "replicas": replicas,
        }
        duration = self.args.duration if duration is None else duration
        if strategy == strategies.FLOOR:
            return {**point, **self._floor(workload, replicas, duration)}
        lite = dataclasses.replace(workload, tokens=())
        tag = tag or strategy
        # Replica i draws the same requests whatever the strategy: same data, same demand.
        tasks = [Task(strategy, lite, i, self.args.seed * 1000 + i, tag) for i in range(replicas)]
        pool = pool or self.pool(strategy)
        windows, samplers = [], []
        sampling = asleep.available()  # asked now: the first answer starts a process

        def started(start_at: float, end_at: float) -> None:
            load = [process.pid for process in pool.processes[:replicas]]
            if cpu.available():
                groups = {"replicas": lambda: load, **cpu.server_groups()}
                windows.append(cpu.Window(groups, end_at))
            if sampling:
                samplers.append(asleep.Sampler(load, start_at, end_at))
            if on_start is not None:
                on_start(start_at, end_at)

        records, infos = pool.run(tasks, duration, started)
        point["duration_s"] = duration
        if strategy in strategies.CANDIDATES:
            point["listening"] = all(info.get("listening") for info in infos)
            point["settings"] = infos[0].get("settings")  # what the replicas ran with
            point["notifying"] = notifying
        point.update(verify.figures(records, duration, supply))
        stored = books.spent_tokens(prefix=f"{tag}-", reference=reference)
        point["double_spends"] = verify.overlapping_holds(records) + verify.spent_twice(
            records, stored
        )
        point["leaked_locks"] = books.leaked_locks(reference=reference)
        point["supply_conserved"] = books.unspent_by_wallet(reference=reference) == supply
        point["cpu_ms_per_selection"] = windows[0].result(point["selections"]) if windows else {}
        point["replicas_asleep"] = samplers[0].share() if samplers else None
        return point

    def _floor(self, workload: Workload, replicas: int, duration: float) -> dict:
        from django.db import connection

        from bench import verify
        from bench.strategies import floor
        from common.knobs import knobs
        from sherdlock.config import FETCH_LIMIT

        options = knobs()
        result = floor.run(
            workload,
            replicas,
            duration,
            connection.settings_dict,
            FETCH_LIMIT,
            options.lease_seconds,
        )
        latencies, elapsed = result["latencies"], result["elapsed"]
        return {
            "duration_s": elapsed,
            "selections": len(latencies),
            "selections_per_s": round(len(latencies) / elapsed, 2),
            "latency_ms": verify.latency_ms(latencies),
            "outcomes": {"selected": len(latencies), "error": result["failed"]},
            # Cycles replayed after a deadlock between our own statements.
            "retried": result["retried"],
            "lock_attempts": None,
            "attempts_per_locked_token": None,
            "spurious_insufficient_funds": None,
            "double_spends": None,
            # pgbench ends its run between the two statements of some clients' cycles, so
            # leftover locks say nothing about the SQL; reset() removes them.
            "leaked_locks": None,
        }


def run_points(
    harness: Harness, workloads: list[Workload], names: list[str]
) -> tuple[list[dict], list[dict]]:
    """Measure every (workload, replicas, strategy) point, printing progress.

    Return the points and those of the reference's later rounds (``bench.reference_rounds``),
    measured right after each workload's pass while its data is seeded.
    """
    args, points, rounds = harness.args, [], []
    both = {strategies.OURS, strategies.REFERENCE} <= set(names)
    later = args.reference_rounds - 1 if both else 0
    total = len(workloads) * len(args.replicas) * (len(names) + 2 * later)
    if not total:
        return points, rounds
    done = 0

    def measured(point: dict) -> dict:
        nonlocal done
        done += 1
        latency = point["latency_ms"]
        used = cpu.describe(point.get("cpu_ms_per_selection", {}))
        number = point.get(reference_rounds.ROUND)
        name = point["strategy"] + (f" (round {number})" if number else "")
        say(
            f"[{done}/{total}] {point['workload']:<10} R={point['replicas']:<3} "
            f"{name:<21} {point['selections_per_s'] or 0:>8.1f} sel/s  "
            f"p50 {latency['p50'] or 0:6.1f} ms  p99 {latency['p99'] or 0:7.1f} ms  "
            f"cpu ms/sel: {used}{_asleep(point)}  {_faults(point)}"
        )
        return point

    for workload in workloads:
        say(f"seeding {workload.title} ({len(workload.tokens)} tokens)")
        supply = seeding.seed(workload.tokens, workload.currency)
        for turn, replicas in enumerate(args.replicas):
            # Rotate the order, so that no strategy always runs first after a reseed.
            for strategy in names[turn % len(names) :] + names[: turn % len(names)]:
                points.append(measured(harness.measure(workload, strategy, replicas, supply)))
        for replicas in args.replicas:
            for number in range(1, later + 1):
                for strategy in reference_rounds.order(number):
                    point = harness.measure(workload, strategy, replicas, supply)
                    rounds.append(measured({**point, reference_rounds.ROUND: number}))
    return points, rounds


def _asleep(point: dict) -> str:
    """Return "  asleep N%" when the replicas slept 1 % of the point or more (bench.asleep)."""
    share = point.get("replicas_asleep")
    return f"  asleep {share:.0%}" if share is not None and share >= 0.01 else ""


def _faults(point: dict) -> str:
    outcomes = point.get("outcomes", {})
    parts = [f"{k}={v}" for k, v in outcomes.items() if k != "selected" and v]
    parts += [f"{k}={point[k]}" for k in ("double_spends", "leaked_locks") if point.get(k)]
    return " ".join(parts)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        with database.held(args.database) as url:
            return _main(args, url, started)
    except database.RunInProgress as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2


def _main(args, url: str, started: float) -> int:
    """Run the harness against the benchmark database of ``url``, which this run holds."""
    # The harness itself runs the shipped settings too (the floor reads them, migrate
    # installs what they ask for).
    environment = strategies.environment(strategies.OURS)
    os.environ.clear()
    os.environ.update(environment)
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    # Every replica's INFO lines (a listener starting, a housekeeping pass) would interleave
    # with the progress output. The web server keeps the shipped level (bench.web).
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    say(f"database {args.database}: migrating")
    database.migrate()
    return _run(args, started)


def _available(names: list[str], skipped: list[dict[str, str]]) -> list[str]:
    from bench.strategies import floor

    names = list(names)
    if strategies.LISTENER in names and not strategies.listener_available():
        names.remove(strategies.LISTENER)
        skipped.append(
            {
                "what": strategies.LISTENER,
                "why": "locks.listener does not exist yet; run again once it does",
            }
        )
    if strategies.FLOOR in names and (why := floor.unavailable()):
        names.remove(strategies.FLOOR)
        skipped.append({"what": strategies.FLOOR, "why": why})
    return names


def _run(args: argparse.Namespace, started: float) -> int:
    from bench import (
        chain,
        chain_http,
        client_cpu,
        figures,
        housekeeping,
        plot,
        pooling,
        report,
        selection_strategies,
        web,
    )

    skipped: list[dict[str, str]] = []
    names = _available(args.strategies, skipped)
    for note in skipped:
        say(f"skipping {note['what']}: {note['why']}")
    workloads = [make_workload(name, args) for name in args.workloads]
    harness = Harness(args)
    sections: dict[str, object] = {}
    try:
        points, sections["reference_rounds"] = run_points(harness, workloads, names)
        if args.selection_strategies:
            sections["selection_strategies"] = selection_strategies.run(
                args, harness, make_workload, say
            )
        if args.http_replicas:
            sections["http"], note = web.run_all(args, harness, make_workload, say)
            if note:
                skipped.append({"what": strategies.HTTP, "why": note})
        if args.client_cycles:
            sections["client_cpu"] = client_cpu.run(args.client_cycles, say, args)
        if args.housekeeping:
            sections["housekeeping"] = housekeeping.run(args, harness, say)
        if args.pgbouncer_replicas and args.pgbouncer_workloads:
            if why := pooling.unavailable():
                say(f"skipping the PgBouncer points: {why}")
                skipped.append({"what": "pgbouncer", "why": why})
            else:
                sections["pgbouncer"] = pooling.run(args, harness, make_workload, say)
        if args.chain_payments:
            sections["chain"] = {
                "library": chain.run(
                    harness,
                    strategies.OURS,
                    args.chain_payments,
                    args.chain_processes,
                    args.chain_timeout,
                    args.seed,
                    say,
                    args.chain_wait,
                ),
            }
    finally:
        harness.close()
    if args.chain_payments:
        sections["chain"]["http"] = chain_http.run(args, say)
    data = report.build(points, sections, skipped, vars(args), time.monotonic() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    report_path = report.write(data, args.out / "report.json")
    plot_path = plot.draw(data, args.out / "throughput.png")
    (args.out / "figures.md").write_text(figures.table(data))
    print(report.render(data))
    say(f"report {report_path}, plot {plot_path}")
    if args.write_baseline:
        shutil.copyfile(report_path, args.out / "baseline.json")
        say(f"baseline {args.out / 'baseline.json'}")
    if args.check:
        from bench import confirmation

        return confirmation.compare_with_baseline(args, data, report_path, names)
    return 0 if report.correct(data) else 1
