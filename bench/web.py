"""The HTTP path: gunicorn with R workers under a small multi-process load generator.

Each client process keeps one ``http.client`` connection, selects through
``POST /api/v1/selections/`` and then spends (``/spend/``, paying the tokens back to the wallet)
or releases (``/release/``), as the replica processes do in-process. Tokens are named by
``tx_id:index`` here, the identity the API exposes.
"""

from __future__ import annotations

import http.client
import json
import math
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import database, verify
from bench.strategies import HTTP
from bench.worker import Record
from bench.workloads import Workload

BASE_DIR = Path(__file__).resolve().parent.parent
API = "/api/v1/selections/"
READY_TIMEOUT = 60.0
WARM_UP = 3  # select-and-release cycles per client before the clock starts


def unavailable() -> str | None:
    """Return why the HTTP path cannot be measured, or None when it can."""
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("selection-list")
        reverse("selection-spend", args=["x"])
        reverse("selection-release", args=["x"])
        from clients.models import ApiKey  # noqa: F401
    except (NoReverseMatch, ImportError) as exc:
        return f"the REST API is not there yet ({exc})"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.read().decode()


def _start(workers: int, port: int, metrics_dir: str, log) -> subprocess.Popen:
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics_dir,
               # Rate limits would measure the limiter, not selection.
               SHERDLOCK_RATE_SELECTIONS_PER_KEY="off", SHERDLOCK_RATE_SELECTIONS_PER_WALLET="off")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi:application",
         "-c", str(BASE_DIR / "config" / "gunicorn.py"), "--workers", str(workers),
         "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "5"],
        cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            if _get(port, "/readyz")[0] == 200:
                return process
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("gunicorn did not become ready; see its log")
        time.sleep(0.2)


def client(port: int, key: str, workload: Workload, index: int, seed: int, barrier,
           duration: float, results) -> None:  # pragma: no cover - runs in a client process
    """Select, then spend or release, until ``duration`` has passed; put the records."""
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Api-Key {key}", "Content-Type": "application/json"}

    def post(path: str, body: dict | None = None) -> tuple[int, dict]:
        conn.request("POST", path, json.dumps(body or {}), headers)
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else {}

    # Warm the workers (imports, connections, selector) outside the measured window.
    for k in range(WARM_UP):
        warm = f"warm-{index}-{k}"
        if post(API, {"tx_id": warm, "wallet": workload.pick_wallet(rng),
                      "currency": workload.currency,
                      "quantity": str(workload.min_quantity)})[0] == 201:
            post(f"{API}{warm}/release/")
    records = []
    barrier.wait()
    end_at = time.monotonic() + duration
    n = 0
    while (started := time.monotonic()) < end_at:
        n += 1
        tx_id, wallet = f"http-{index}-{n}", workload.pick_wallet(rng)
        quantity = rng.randint(workload.min_quantity, workload.max_quantity)
        status, body = post(API, {"tx_id": tx_id, "wallet": wallet,
                                  "currency": workload.currency, "quantity": str(quantity)})
        finished = time.monotonic()
        tokens, action, ended, error = (), "", finished, ""
        if status == 201:
            outcome = "selected"
            held = body["tokens"]
            tokens = tuple(f"{t['tx_id']}:{t['index']}" for t in held)
            if workload.hold:
                time.sleep(rng.uniform(0, 2 * workload.hold))
            if rng.random() < workload.spend_ratio:
                outputs = [{"index": i, "wallet": wallet, "currency": workload.currency,
                            "quantity": t["quantity"]} for i, t in enumerate(held)]
                status, body = post(f"{API}{tx_id}/spend/", {"outputs": outputs})
                action, ended = ("spent", math.inf) if status == 200 else ("spend_failed",
                                                                           time.monotonic())
            else:
                ended = time.monotonic()
                status, body = post(f"{API}{tx_id}/release/")
                action = "released" if status == 200 else "release_failed"
        elif status == 409 and body.get("code") in ("insufficient_funds", "funds_locked"):
            outcome = body["code"]
        else:
            outcome, error = "error", f"{status} {body.get('code', '')}"
        records.append(Record(tx_id, wallet, quantity, started, finished - started, outcome,
                              tokens, finished, ended, action, None, error))
    conn.close()
    results.put(records)


def _metrics(port: int) -> dict[str, float]:
    """Read the selection outcome counters from /metrics (summed over workers)."""
    _, text = _get(port, "/metrics")
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("sherdlock_selections_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = counts.get(outcome, 0) + float(line.rsplit(" ", 1)[1])
    return counts


def measure(workload: Workload, workers: int, duration: float, key: str, seed: int,
            log) -> dict:
    """Measure one HTTP point on freshly reset data."""
    database.reset()
    port = _free_port()
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as metrics_dir:
        server = _start(workers, port, metrics_dir, log)
        try:
            barrier, results = context.Barrier(workers + 1), context.Queue()
            clients = [context.Process(target=client, daemon=True, args=(
                port, key, workload, i, seed * 1000 + i, barrier, duration, results))
                for i in range(workers)]
            for process in clients:
                process.start()
            barrier.wait(timeout=READY_TIMEOUT)
            records = [r for _ in clients for r in results.get(timeout=duration + 120)]
            for process in clients:
                process.join(timeout=10)
            metrics = _metrics(port)
        finally:
            server.terminate()
            server.wait(timeout=30)
    point = {"workload": workload.name, "strategy": HTTP, "replicas": workers,
             "duration_s": duration}
    point.update(verify.figures(records, duration, workload.supply()))
    stored = database.spent_tokens(by_identity=True)
    point["double_spends"] = verify.overlapping_holds(records) + verify.spent_twice(records,
                                                                                    stored)
    point["leaked_locks"] = database.leaked_locks()
    point["supply_conserved"] = database.unspent_by_wallet() == workload.supply()
    point["metrics"] = metrics
    return point


def run_all(args, workload: Workload, say) -> tuple[list[dict], str | None]:
    """Measure the HTTP path at every ``--http-replicas`` count; or say why it cannot."""
    if note := unavailable():
        say(f"skipping {HTTP}: {note}")
        return [], note
    from clients.models import ApiKey

    _, key = ApiKey.objects.create_key(name="bench", all_wallets=True, can_select=True,
                                       can_issue=True, can_read=True)
    say(f"seeding {workload.title} for the HTTP path")
    database.seed(workload.tokens, workload.currency)
    points = []
    log_path = args.out / "gunicorn.log"
    args.out.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        for workers in args.http_replicas:
            point = measure(workload, workers, args.duration, key, args.seed, log)
            points.append(point)
            say(f"[http] {workload.name} R={workers} {HTTP}: "
                f"{point['selections_per_s'] or 0:.1f} sel/s, p99 "
                f"{point['latency_ms']['p99'] or 0:.1f} ms, /metrics {point['metrics']}")
    return points, None
