"""Housekeeping points: what a million expired lock rows cost selections, and removing them.

On a large workload (1000 wallets x 2000 tokens by default, generated in the database) ours
runs at 8 replicas three times, on the same tokens:
  (a) without lock rows;
  (b) with 1M expired lock rows of crashed spenders planted on every other unspent token
      (lease ended an hour ago, far past the grace), and no housekeeping;
  (c) with the same rows planted again, while a housekeeper process runs
      ``locks.housekeeping.run_housekeeping()`` in a loop from the start until they are gone.
(c)/(b) p99 is what housekeeping costs selections; (b)/(a) selections/s is what the leftover
rows cost them. Each point lasts ``--housekeeping-duration`` seconds (8 by default, whatever the
selection points last): the clean-up takes about 50 s, and a 3-s window of it, whose p99 is its
27th slowest selection, put (c)/(b) anywhere between 0.85 and 1.44 for the same code.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback

from bench import expired_locks, seeding, strategies
from bench.strategies import OURS
from bench.workloads import large

HOUSEKEEPER_TIMEOUT = 900.0


def parse_size(text: str) -> tuple[int, int, int] | None:
    """Parse ``WALLETSxTOKENS:EXPIRED`` (e.g. ``1000x2000:1000000``); ``off`` gives None."""
    if text.strip().lower() in ("", "0", "off", "no", "none"):
        return None
    try:
        grid, expired = text.split(":")
        wallets, tokens = grid.lower().split("x")
        size = int(wallets), int(tokens), int(expired)
    except ValueError:
        raise ValueError(
            f"{text!r} is not WALLETSxTOKENS:EXPIRED, e.g. 1000x2000:1000000"
        ) from None
    if min(size) < 1:
        raise ValueError(f"{text!r}: sizes must be positive")
    return size


def housekeeper(go, start, results) -> None:  # pragma: no cover - runs in its own process
    """From the common start, run housekeeping passes until no planted expired row is left."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    from locks.housekeeping import run_housekeeping

    try:
        connection.ensure_connection()
        results.put(("ready", None))
        go.wait()
        start_at = start.value
        time.sleep(max(0.0, start_at - time.monotonic()))
        passes = []
        while time.monotonic() - start_at < HOUSEKEEPER_TIMEOUT:
            began = time.monotonic()
            run = run_housekeeping()
            passes.append(
                {
                    "started_s": round(began - start_at, 3),
                    "ended_s": round(time.monotonic() - start_at, 3),
                    "expired_removed": run.expired_removed,
                    "spent_removed": run.spent_removed,
                    "skipped": run.skipped,
                }
            )
            if expired_locks.expired_left() == 0:
                break
        results.put(("done", passes))
    except BaseException:
        results.put(("error", traceback.format_exc()))


class Housekeeper:
    """A housekeeper process, started ahead and released at the point's start."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.go, self.start = context.Event(), context.Value("d", 0.0)
        self.results = context.Queue()
        env = strategies.environment(OURS)  # the shipped settings, as deployed
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            self.process = context.Process(
                target=housekeeper, daemon=True, args=(self.go, self.start, self.results)
            )
            self.process.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        kind, detail = self.results.get(timeout=120)
        if kind != "ready":
            raise RuntimeError(f"the housekeeper did not start: {detail}")

    def release(self, start_at: float, _end_at: float) -> None:
        """Start housekeeping at ``start_at`` (the replicas' start)."""
        self.start.value = start_at
        self.go.set()

    def finish(self) -> list[dict]:
        """Wait until the housekeeper is done; return its passes."""
        kind, detail = self.results.get(timeout=HOUSEKEEPER_TIMEOUT + 60)
        self.process.join(timeout=10)
        if kind != "done":
            raise RuntimeError(f"the housekeeper failed: {detail}")
        return detail


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def run(args, harness, say) -> dict:
    """Measure the three points; return them with the housekeeper's passes and the ratios."""
    from common.knobs import knobs

    wallets, per_wallet, expired = args.housekeeping
    replicas, duration = args.housekeeping_replicas, args.housekeeping_duration
    lease = knobs().lease_seconds
    workload = large(wallets, per_wallet, spend_ratio=args.spend_ratio, hold=args.hold)
    started = time.monotonic()
    say(f"seeding {workload.title} in the database")
    supply = seeding.seed_generated("large-", wallets, per_wallet, workload.currency, args.seed)
    workload.check(supply)
    say(f"seeded in {time.monotonic() - started:.1f} s")
    out: dict[str, object] = {
        "workload": workload.title,
        "replicas": replicas,
        "strategy": OURS,
        "expired_rows": expired,
    }

    def point(tag: str, on_start=None) -> dict:
        result = harness.measure(
            workload,
            OURS,
            replicas,
            supply,
            tag=tag,
            reset=False,
            on_start=on_start,
            duration=duration,
        )
        say(
            f"[housekeeping] {tag}: {result['selections_per_s'] or 0:.1f} sel/s, p99 "
            f"{result['latency_ms']['p99'] or 0:.1f} ms"
        )
        return result

    out["no_rows"] = point("hk-a")
    say(f"planting {expired} expired lock rows")
    began = time.monotonic()
    planted = expired_locks.plant_expired_locks(expired, lease)
    say(f"planted {planted} in {time.monotonic() - began:.1f} s")
    out["planted"] = planted
    out["rows_left"] = point("hk-b")
    say(f"{expired_locks.top_up_expired_locks(planted, lease)} expired lock rows for (c)")
    keeper = Housekeeper()
    out["housekeeping"] = point("hk-c", on_start=keeper.release)
    say("waiting for the housekeeper to remove the rest")
    passes = keeper.finish()
    finished = max((p["ended_s"] for p in passes), default=0.0)
    out["housekeeper"] = {
        "passes": len(passes),
        "expired_removed": sum(p["expired_removed"] for p in passes),
        "seconds": finished,
        "expired_left": expired_locks.expired_left(),
        # Share of the measured window during which housekeeping was running.
        "window_covered": round(min(1.0, finished / duration), 3),
        "pass_log": passes,
    }
    say(
        f"[housekeeping] housekeeper: {out['housekeeper']['expired_removed']} removed in "
        f"{finished:.1f} s, {len(passes)} passes, {out['housekeeper']['expired_left']} left"
    )
    a, b, c = out["no_rows"], out["rows_left"], out["housekeeping"]
    out["ratios"] = {
        "housekeeping_p99": _ratio(c["latency_ms"]["p99"], b["latency_ms"]["p99"]),
        "housekeeping_selections_per_s": _ratio(c["selections_per_s"], b["selections_per_s"]),
        "leftover_rows_selections_per_s": _ratio(b["selections_per_s"], a["selections_per_s"]),
        "leftover_rows_p99": _ratio(b["latency_ms"]["p99"], a["latency_ms"]["p99"]),
    }
    return out
