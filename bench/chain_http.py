"""The chain over HTTP: N client threads spread over a few processes, against ``make run``'s server.

Each thread selects 1 (``POST /api/v1/selections/``), spends its selection (1 to the payee,
the change back), through the API's client (``sherdlock_client.Client``, one per process,
shared by its threads), which retries ``funds_locked`` (and ``429``, counted) after the
server's hint with a little jitter. With ``--chain-wait SECONDS`` each selection also asks the
server to wait that long for the funds instead of answering ``funds_locked`` at once (the
request's ``wait``, as RFC 7240's ``Prefer: wait=N``).
The server runs with the shipped defaults (rate limits and worker count as ``make run``).
"""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

from bench import chain, database, seeding, strategies
from bench.chain import PAYEE, WALLET, Payment
from bench.strategies import HTTP
from bench.web import api_key, outputs, unavailable
from bench.web_server import Server

if TYPE_CHECKING:
    from sherdlock_client import Client, Retry

START_DELAY = 0.2
# A payment retries until its deadline, however many times that takes.
ATTEMPTS = 1_000_000


class Retries(threading.local):
    """The retries of each thread's current payment, by reason (the client's hook)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, retry: Retry) -> None:
        self.counts[retry.reason] += 1


def _pay(
    api: Client, retries: Retries, number: int, tag: str, wait: float | None, end_at: float
) -> Payment:
    from sherdlock_client import ClientError, FundsLocked, Output, RateLimited

    tx_id = f"{tag}-{number}"
    started = time.monotonic()
    retries.counts.clear()

    def failed(error: str) -> Payment:
        locked, limited = retries.counts["funds_locked"], retries.counts["rate_limited"]
        attempts = 1 + retries.counts.total()
        return Payment(
            number, tx_id, started, None, time.monotonic(), attempts, locked, limited, error, ()
        )

    left = max(0.0, end_at - started)
    try:
        selection = api.select(
            tx_id,
            WALLET,
            "USD",
            1,
            wait=math.ceil(wait or 0),
            retry_locked_for=left,
            retry_for=left,
        )
    except (FundsLocked, RateLimited):
        return failed("timed out")  # the next retry would start after the deadline
    except ClientError as exc:
        return failed(f"{exc.status or 'connection'} {exc.code}: {exc.detail}"[:300])
    selected = time.monotonic()
    locked, limited = retries.counts["funds_locked"], retries.counts["rate_limited"]
    attempts = 1 + retries.counts.total()
    tokens = tuple(f"{t.tx_id}:{t.index}" for t in selection.tokens)
    spend = outputs(WALLET, "USD", selection.total, 1, PAYEE)
    try:
        api.spend(tx_id, [Output(**o) for o in spend])
    except ClientError as exc:
        return failed(f"spend {exc.status} {exc.code}")
    return Payment(
        number, tx_id, started, selected, time.monotonic(), attempts, locked, limited, "", tokens
    )


def client(
    port: int,
    key: str,
    numbers: tuple[int, ...],
    tag: str,
    concurrent: bool,
    wait: float | None,
    seed: int,
    timeout: float,
    ready,
    go,
    start,
    results,
) -> None:  # pragma: no cover - runs in a client process
    """Run this process's payments (a thread each, or in sequence); put the payments."""
    from sherdlock_client import Client, RetryPolicy

    out: list[Payment] = []
    local_go = threading.Event()
    retries = Retries()
    api = Client(
        f"http://127.0.0.1:{port}",
        key,
        retries=RetryPolicy(retry_for=timeout, attempts=ATTEMPTS, jitter=chain.JITTER),
        on_retry=retries,
    )

    def thread(share: tuple[int, ...]) -> None:
        local_go.wait()
        start_at = start.value
        time.sleep(max(0.0, start_at - time.monotonic()))
        for number in share:
            out.append(_pay(api, retries, number, tag, wait, start_at + timeout))

    shares = [(n,) for n in numbers] if concurrent else [numbers]
    threads = [
        threading.Thread(target=thread, daemon=True, args=(share,)) for share in shares if share
    ]
    for t in threads:
        t.start()
    ready.put(True)
    go.wait()
    local_go.set()
    for t in threads:
        t.join()
    api.close()
    results.put(out)


def _run(
    server: Server,
    key: str,
    n: int,
    processes: int,
    tag: str,
    concurrent: bool,
    wait: float | None,
    seed: int,
    timeout: float,
) -> list[Payment]:
    context = multiprocessing.get_context("spawn")
    ready, results, go = context.Queue(), context.Queue(), context.Event()
    start = context.Value("d", 0.0)
    numbers = tuple(range(n))
    shares = [numbers[i::processes] for i in range(min(processes, n))] if concurrent else [numbers]
    procs = [
        context.Process(
            target=client,
            daemon=True,
            args=(
                server.port,
                key,
                share,
                tag,
                concurrent,
                wait,
                seed + i,
                timeout,
                ready,
                go,
                start,
                results,
            ),
        )
        for i, share in enumerate(shares)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=chain.CONNECT_TIMEOUT)
    start.value = time.monotonic() + START_DELAY
    go.set()
    payments = [p for _ in procs for p in results.get(timeout=timeout + 120)]
    for p in procs:
        p.join(timeout=10)
    return payments


def run(args, say) -> dict:
    """Run the chain over HTTP: N payments by one client in sequence, then N at once."""
    if note := unavailable():
        return {"skipped": note}
    n = args.chain_payments
    supply = seeding.seed(((WALLET, n),), "USD")
    key = api_key()
    out: dict[str, object] = {
        "strategy": "ours-http",
        "payments": n,
        "processes": args.chain_processes,
        "wait": args.chain_wait,
    }
    args.out.mkdir(parents=True, exist_ok=True)  # the chain may be the only section measured
    with (args.out / "web-chain.log").open("w") as log:
        for mode in ("sequential", "concurrent"):
            database.reset()  # keeps the API key: the reset empties only the selection tables
            strategies.deploy(HTTP)
            say(f"[chain] http {mode}: {n} payments (at most {args.chain_timeout:g} s)")
            server = Server(None, log)
            try:
                payments = _run(
                    server,
                    key,
                    n,
                    args.chain_processes,
                    mode[:3],
                    mode == "concurrent",
                    args.chain_wait,
                    args.seed,
                    args.chain_timeout,
                )
            finally:
                server.stop()
            result = chain.summary(payments)
            result.update(chain.audit(payments, sum(supply.values()), True, mode[:3]))
            out[mode] = result
            say(
                f"[chain] http {mode}: {result['completed']}/{n} in {result['elapsed_s']:.2f} s,"
                f" errors {result['errors']}, 429: {result['rate_limited']}, worst wait "
                f"{result['wait_ms']['max']} ms (mean {result['wait_ms']['mean']} ms)"
            )
    out["completion_over_sequential"] = chain.ratio(out)
    return out
