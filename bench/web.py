"""The HTTP path: the web server as ``make run`` starts it (``bench.web_server``), under a
multi-process load generator.

Each client process calls through the API's client (``sherdlock_client.Client``, its
connection kept alive), selects through
``POST /api/v1/selections/`` and then spends (``/spend/``: the requested quantity and the change
back to the wallet) or releases (``/release/``), as the replica processes do in-process. Tokens
are named by ``tx_id:index`` here, the identity the API exposes. The server runs with the
shipped defaults, rate limits included: the client retries a 429 after its ``Retry-After``,
and one it gives up on is counted.
"""

from __future__ import annotations

import math
import multiprocessing
import random
import time
from typing import TYPE_CHECKING

from bench import books, cpu, database, seeding, strategies, verify, web_server
from bench.strategies import HTTP, OURS
from bench.worker import Record
from bench.workloads import Workload

# The load's code lives in client processes only; the harness imports this module without it.
if TYPE_CHECKING:
    from sherdlock_client import Client

API = "/api/v1/selections/"
WARM_UP = 2  # select-and-release cycles per client before the clock starts
FRAMEWORK_SECONDS = 3.0  # the longest a point spends measuring what the web stack allows


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


def api_key() -> str:
    """Create an API key for every wallet with every right; return it."""
    from clients.models import ApiKey

    _, key = ApiKey.objects.create_key(
        name="bench", all_wallets=True, can_select=True, can_issue=True, can_read=True
    )
    return key


def outputs(
    wallet: str, currency: str, total: int, quantity: int, payee: str | None = None
) -> list[dict]:
    """Return the spend outputs: ``quantity`` to ``payee`` (default: the wallet), change back."""
    from bench.strategies import payment

    return [
        {"index": i, "wallet": w, "currency": currency, "quantity": str(q)}
        for i, (w, q) in enumerate(payment(total, quantity, wallet, payee))
    ]


def client(
    port: int,
    key: str,
    workload: Workload,
    index: int,
    seed: int,
    barrier,
    duration: float,
    results,
) -> None:  # pragma: no cover - runs in a client process
    """Select, then spend or release, until ``duration`` has passed; put the records."""
    from sherdlock_client import ClientError, InsufficientFunds, Output, RateLimited

    rng = random.Random(seed)
    api = connect(port, key)
    # Warm the workers (imports, connections, selector) outside the measured window.
    for k in range(WARM_UP):
        warm = f"warm-{index}-{k}"
        try:
            api.select(warm, workload.pick_wallet(rng), workload.currency, workload.min_quantity)
            api.release(warm)
        except ClientError:
            pass
    records = []
    barrier.wait()
    end_at = time.monotonic() + duration
    n = 0
    while (started := time.monotonic()) < end_at:
        n += 1
        tx_id, wallet = f"http-{index}-{n}", workload.pick_wallet(rng)
        quantity = rng.randint(workload.min_quantity, workload.max_quantity)
        tokens, action, error, total = (), "", "", 0
        try:
            selection = api.select(tx_id, wallet, workload.currency, quantity)
        except InsufficientFunds as refused:  # funds_locked is one too
            outcome = refused.code
        except RateLimited:
            outcome = "rate_limited"
        except ClientError as failure:
            outcome, error = "error", f"{failure.status} {failure.code}"
        else:
            outcome = "selected"
        finished = time.monotonic()
        ended = finished
        if outcome == "selected":
            tokens = tuple(f"{t.tx_id}:{t.index}" for t in selection.tokens)
            total = selection.total
            if workload.hold:
                time.sleep(rng.uniform(0, 2 * workload.hold))
            try:
                if rng.random() < workload.spend_ratio:
                    action = "spend_failed"
                    spend = outputs(wallet, workload.currency, total, quantity)
                    api.spend(tx_id, [Output(**o) for o in spend])
                    action, ended = "spent", math.inf
                else:
                    ended, action = time.monotonic(), "release_failed"
                    api.release(tx_id)
                    action = "released"
            except ClientError as failure:
                if action == "spend_failed":
                    ended = time.monotonic()
                error = f"{failure.status} {failure.code}"
        records.append(
            Record(
                tx_id,
                wallet,
                quantity,
                started,
                finished - started,
                outcome,
                tokens,
                finished,
                ended,
                action,
                None,
                error,
                total,
            )
        )
    api.close()
    results.put(records)


def connect(port: int, key: str) -> Client:
    """Return the API's client for the server on ``port``."""
    from sherdlock_client import Client

    return Client(f"http://127.0.0.1:{port}", key)


def probe_client(port: int, barrier, duration: float, results) -> None:  # pragma: no cover
    """Ask ``GET /healthz`` twice per cycle until ``duration`` has passed; put the cycles."""
    api = connect(port, "")
    api.alive()
    barrier.wait()
    end_at, cycles = time.monotonic() + duration, 0
    while time.monotonic() < end_at:
        if not (api.alive() and api.alive()):
            raise RuntimeError("/healthz did not answer 200")
        cycles += 1
    api.close()
    results.put(cycles)


def framework_cycles(port: int, clients: int, duration: float) -> float:
    """Return the cycles/s of ``clients`` load processes asking a view that does nothing.

    Each cycle is two requests to ``/healthz`` (a DRF view without authentication or database),
    as a selection cycle is two requests: what the web server and Django allow on this machine
    before any of our work, measured with the same load processes.
    """
    counts = run_load(probe_client, [(port,)] * clients, duration, timeout=duration + 60)
    return sum(counts) / duration


def run_load(
    target,
    leading: list[tuple],
    duration: float,
    timeout: float,
    on_start=None,
    before_start=None,
) -> list:
    """Run one load process per ``leading`` arguments, start them together, return their puts.

    Each process calls ``target(*leading[i], barrier, duration, results)``, waits at the
    barrier, then puts one result. ``before_start(pids)``, if given, is called with the load
    processes' PIDs once all of them wait at the barrier, before their clocks start: what it
    costs the cores is not taken from the load. ``on_start(pids)``, if given, is called as they
    pass the barrier, when their clocks start.
    """
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(len(leading) + 1), context.Queue()
    processes = [
        context.Process(target=target, daemon=True, args=(*args, barrier, duration, results))
        for args in leading
    ]
    for process in processes:
        process.start()
    if before_start is not None:
        deadline = time.monotonic() + web_server.READY_TIMEOUT
        while barrier.n_waiting < len(processes) and time.monotonic() < deadline:
            time.sleep(0.005)
        before_start([process.pid for process in processes])
    barrier.wait(timeout=web_server.READY_TIMEOUT)
    if on_start is not None:
        on_start([process.pid for process in processes])
    out = [results.get(timeout=timeout) for _ in processes]
    for process in processes:
        process.join(timeout=10)
    return out


def server_errors(records) -> int:
    """Count answers with a 5xx status (selections, spends and releases)."""
    return sum(r.error[:1] == "5" for r in records)


def measure(
    workload: Workload,
    clients: int,
    duration: float,
    key: str,
    seed: int,
    supply: dict[str, int],
    log,
    workers: int | None = None,
) -> dict:
    """Measure one HTTP point: ``clients`` load processes against the web server.

    ``workers``: its worker processes; None runs it as ``make run`` does.
    """
    database.reset()
    strategies.deploy(HTTP)
    server = web_server.Server(workers, log)
    windows = []

    split: list[int] = []

    def waiting(load: list[int]) -> None:
        # Counting takes tens of milliseconds of CPU on a loaded host: done while the load
        # processes wait at the barrier, after their warm-up, it slows none of their requests.
        split.extend(server.connections_per_worker())

    def started(load: list[int]) -> None:
        # The CPU window's end must come before the load processes exit, as they stop
        # ``duration`` after the barrier.
        if cpu.available():
            groups = {
                "web": lambda: cpu.with_descendants(server.process.pid),
                "load": lambda: load,
            }
            end_at = time.monotonic() + duration
            windows.append(cpu.Window({**groups, **cpu.server_groups()}, end_at))

    try:
        puts = run_load(
            client,
            [(server.port, key, workload, i, seed * 1000 + i) for i in range(clients)],
            duration,
            timeout=duration + 120,
            on_start=started,
            before_start=waiting,
        )
        records = [r for put in puts for r in put]
        metrics = server.metrics()
        framework = framework_cycles(server.port, clients, min(duration, FRAMEWORK_SECONDS))
    finally:
        server.stop()
    point = {
        "workload": workload.name,
        "strategy": HTTP,
        "replicas": clients,
        "server_workers": workers,
        "duration_s": duration,
    }
    point.update(verify.figures(records, duration, supply))
    stored = books.spent_tokens(by_identity=True, prefix="http-")
    point["double_spends"] = verify.overlapping_holds(records) + verify.spent_twice(records, stored)
    point["leaked_locks"] = books.leaked_locks()
    point["supply_conserved"] = books.unspent_by_wallet() == supply
    point["rate_limited"] = point["outcomes"]["rate_limited"]
    point["server_errors"] = server_errors(records)
    point["metrics"] = metrics
    point["framework_cycles_per_s"] = round(framework, 1)
    point["cpu_ms_per_selection"] = windows[0].result(point["selections"]) if windows else {}
    point["connections_per_worker"] = split
    return point


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def run_all(args, harness, make_workload, say) -> tuple[list[dict], str | None]:
    """Measure ours-http and ours (library) at every ``--http-replicas`` on each HTTP workload.

    Each pair runs back to back on the same data, so the ratio compares like with like.
    """
    if note := unavailable():
        say(f"skipping {HTTP}: {note}")
        return [], note
    key = api_key()
    pairs = []
    log_path = args.out / "web.log"
    args.out.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        for name in args.http_workloads:
            workload = make_workload(name, args)
            say(f"seeding {workload.title} for the HTTP path")
            supply = seeding.seed(workload.tokens, workload.currency)
            for replicas in args.http_replicas:
                library = harness.measure(workload, OURS, replicas, supply, tag="lib")
                point = measure(
                    workload,
                    replicas,
                    args.duration,
                    key,
                    args.seed,
                    supply,
                    log,
                    workers=args.http_workers,
                )
                pair = {
                    "workload": name,
                    "replicas": replicas,
                    "library": library,
                    "http": point,
                    "ratios": {
                        "selections_per_s": _ratio(
                            point["selections_per_s"], library["selections_per_s"]
                        ),
                        "p99": _ratio(point["latency_ms"]["p99"], library["latency_ms"]["p99"]),
                        "of_framework": _ratio(
                            point["selections_per_s"], point["framework_cycles_per_s"]
                        ),
                    },
                }
                pairs.append(pair)
                say(
                    f"[http] {name:<10} R={replicas:<3} {HTTP}: "
                    f"{point['selections_per_s'] or 0:.1f} sel/s (ours "
                    f"{library['selections_per_s'] or 0:.1f}), p99 "
                    f"{point['latency_ms']['p99'] or 0:.1f} ms (ours "
                    f"{library['latency_ms']['p99'] or 0:.1f}), 429: {point['rate_limited']}, "
                    f"5xx: {point['server_errors']}; /healthz cycles/s "
                    f"{point['framework_cycles_per_s']:.1f}; "
                    f"connections per worker "
                    f"{web_server.describe_split(point['connections_per_worker'])}; "
                    f"cpu ms/sel: {cpu.describe(point['cpu_ms_per_selection'])} (library: "
                    f"{cpu.describe(library.get('cpu_ms_per_selection', {}))})"
                )
    return pairs, None
