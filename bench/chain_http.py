"""The chain over HTTP: N client threads spread over a few processes, against ``make run``'s server.

Each thread selects 1 (``POST /api/v1/selections/``), spends its selection (1 to the payee,
the change back) and retries ``funds_locked`` (and ``429``, counted) after the ``Retry-After``
header with a little jitter. With ``--chain-wait SECONDS`` each selection also asks the server
to wait that long for the funds instead of answering ``funds_locked`` at once: an RFC 7240
``Prefer: wait=N`` header and a ``wait`` field (servers that do not know them ignore both).
The server runs with the shipped defaults (rate limits and worker count as ``make run``).
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time

from bench import chain, database, strategies
from bench.chain import PAYEE, WALLET, Payment, jittered
from bench.http_client import Api
from bench.strategies import HTTP
from bench.web import API, api_key, outputs, unavailable
from bench.web_server import Server

START_DELAY = 0.2
RETRY_CODES = ("funds_locked",)


def _pay(
    api: Api, number: int, tag: str, wait: float | None, rng: random.Random, end_at: float
) -> Payment:
    tx_id = f"{tag}-{number}"
    body = {"tx_id": tx_id, "wallet": WALLET, "currency": "USD", "quantity": "1"}
    headers = {}
    if wait is not None:
        body["wait"] = wait
        headers["Prefer"] = f"wait={wait:g}"
    started, attempts, locked, limited = time.monotonic(), 0, 0, 0

    def failed(error: str) -> Payment:
        return Payment(
            number, tx_id, started, None, time.monotonic(), attempts, locked, limited, error, ()
        )

    while True:
        if time.monotonic() >= end_at:
            return failed("timed out")
        attempts += 1
        try:
            status, answer, retry = api.post(API, body, headers)
        except OSError as exc:
            return failed(f"connection: {exc!r}"[:300])
        if status in (200, 201):
            break
        if status == 429 or (status == 409 and answer.get("code") in RETRY_CODES):
            if status == 429:
                limited += 1
            else:
                locked += 1
            pause = jittered(retry if retry is not None else 1.0, rng)
            time.sleep(max(0.0, min(pause, end_at - time.monotonic())))
            continue
        return failed(f"{status} {answer.get('code', '')}")
    selected = time.monotonic()
    tokens = tuple(f"{t['tx_id']}:{t['index']}" for t in answer["tokens"])
    spend = outputs(WALLET, "USD", int(answer["total"]), 1, PAYEE)
    status, answer, _ = api.post(f"{API}{tx_id}/spend/", {"outputs": spend})
    if status != 200:
        return failed(f"spend {status} {answer.get('code', '')}")
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
    out: list[Payment] = []
    local_go = threading.Event()

    def thread(share: tuple[int, ...], rng: random.Random) -> None:
        api = Api(port, key)
        local_go.wait()
        start_at = start.value
        time.sleep(max(0.0, start_at - time.monotonic()))
        for number in share:
            out.append(_pay(api, number, tag, wait, rng, start_at + timeout))
        api.close()

    shares = [(n,) for n in numbers] if concurrent else [numbers]
    threads = [
        threading.Thread(
            target=thread, daemon=True, args=(share, random.Random(seed * 100_003 + share[0]))
        )
        for share in shares
        if share
    ]
    for t in threads:
        t.start()
    ready.put(True)
    go.wait()
    local_go.set()
    for t in threads:
        t.join()
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
    supply = database.seed(((WALLET, n),), "USD")
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
