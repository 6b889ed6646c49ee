"""The chain: N concurrent payments of 1 out of one token, each giving the change back.

The wallet starts with one token of N. Each payment selects 1, spends its selection (1 to a
payee wallet, the change back to the wallet as a new token) and retries "funds locked" after
the retry-after it was given, with a little jitter; so the payments can only succeed one at a
time, each on the change of the one before. Reported: the completion time of all N, divided by
the time of the same N select-and-spend cycles run one after another by one client (measured
in the same run), the errors, and the waits (first attempt to successful selection).

In the library, the payments run as threads of ``--chain-processes`` replica processes (one
selector per process, shared by its threads, which borrow database connections from the
process's pool as the service's request threads do), all started at the same instant. Over
HTTP (``bench.chain_http``) the same with client threads.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from bench import books, database, seeding, strategies, verify
from bench.worker import Record

WALLET, PAYEE = "chain", "chain-payee"
JITTER = 0.1  # retries sleep retry-after x (1 + uniform(0, JITTER))
CONNECT_TIMEOUT = 60.0


class Payment(NamedTuple):
    """One payment of the chain: when it started, was selected and spent, and how it went."""

    number: int
    tx_id: str
    started: float  # first attempt
    selected: float | None
    finished: float  # spend committed, or the payment given up
    attempts: int  # selection requests made
    funds_locked: int
    rate_limited: int
    error: str
    tokens: tuple[object, ...]


def jittered(seconds: float, rng: random.Random) -> float:
    """Return ``seconds`` stretched by up to JITTER."""
    return seconds * (1 + rng.uniform(0, JITTER))


@dataclass(frozen=True)
class ChainTask:
    """One replica process's share of the payments (threads at once, or one after another)."""

    strategy: str
    payments: tuple[int, ...]
    seed: int
    tag: str
    concurrent: bool
    wallet: str = WALLET
    payee: str = PAYEE
    currency: str = "USD"
    wait: float | None = None  # seconds a selection may wait its turn (strategies that can)

    def prepare(self, strategy) -> Callable[[float, float], list[Payment]]:
        """Connect the threads (before the clock starts); return the function that runs them."""
        if not self.concurrent:
            return lambda start_at, end_at: self._in_sequence(strategy, start_at, end_at)
        connected = threading.Barrier(len(self.payments) + 1)
        go = threading.Event()
        window: list[tuple[float, float]] = []
        results: list[Payment] = []

        def thread(number: int) -> None:
            from django.db import connection

            from common import db

            try:
                connection.ensure_connection()
                # With a pool (the default) threads borrow connections as they need them, as
                # the service's request threads do; without one each keeps its own.
                db.release()
                connected.wait(CONNECT_TIMEOUT)
                go.wait()
                start_at, end_at = window[0]
                time.sleep(max(0.0, start_at - time.monotonic()))
                rng = random.Random(self.seed * 100_003 + number)
                results.append(self._pay(strategy, number, rng, end_at))
            finally:
                connection.close()

        threads = [threading.Thread(target=thread, args=(n,), daemon=True) for n in self.payments]
        for t in threads:
            t.start()
        connected.wait(CONNECT_TIMEOUT)

        def run(start_at: float, end_at: float) -> list[Payment]:
            window.append((start_at, end_at))
            go.set()
            for t in threads:
                t.join()
            return results

        return run

    def _in_sequence(self, strategy, start_at: float, end_at: float) -> list[Payment]:
        rng = random.Random(self.seed)
        time.sleep(max(0.0, start_at - time.monotonic()))
        return [self._pay(strategy, n, rng, end_at) for n in self.payments]

    def _pay(self, strategy, number: int, rng: random.Random, end_at: float) -> Payment:
        from bench.strategies import payment, spend
        from sherdlock import FundsLocked, InsufficientFunds, WalletKey

        key, tx_id = WalletKey(self.wallet, self.currency), f"{self.tag}-{number}"
        started, attempts, locked = time.monotonic(), 0, 0

        def failed(error: str) -> Payment:
            return Payment(
                number, tx_id, started, None, time.monotonic(), attempts, locked, 0, error, ()
            )

        while True:
            if time.monotonic() >= end_at:
                return failed("timed out")
            attempts += 1
            try:
                if self.wait and hasattr(strategy, "select_waiting"):
                    picked = strategy.select_waiting(tx_id, key, 1, self.wait)
                else:
                    picked = strategy.select(tx_id, key, 1)
            except FundsLocked as exc:
                locked += 1
                time.sleep(max(0.0, min(jittered(exc.retry_after, rng), end_at - time.monotonic())))
                continue
            except InsufficientFunds:
                return failed("insufficient_funds")
            except Exception as exc:
                return failed(repr(exc)[:300])
            selected = time.monotonic()
            try:
                outputs = payment(picked.total, 1, self.wallet, self.payee)
                created, error = spend(picked, outputs), ""
            except Exception as exc:
                created, error = None, repr(exc)[:300]
            if created is None:
                with contextlib.suppress(Exception):  # the audit counts a lock left behind
                    strategy.release(picked)
                return failed(error or "spend failed: lock lost")
            strategy.spent(picked, created)
            return Payment(
                number,
                tx_id,
                started,
                selected,
                time.monotonic(),
                attempts,
                locked,
                0,
                "",
                tuple(picked.token_ids),
            )


def summary(payments: list[Payment]) -> dict:
    """Return completion time, waits and errors of one run of the chain."""
    done = [p for p in payments if not p.error]
    waits = [p.selected - p.started for p in done]
    start = min((p.started for p in payments), default=0.0)
    end = max((p.finished for p in payments), default=start)
    mean = statistics.fmean(waits) if waits else None
    errors: dict[str, int] = {}
    for p in payments:
        if p.error:
            errors[p.error] = errors.get(p.error, 0) + 1
    return {
        "payments": len(payments),
        "completed": len(done),
        "errors": len(payments) - len(done),
        "error_kinds": errors,
        "elapsed_s": round(end - start, 3),
        "wait_ms": {
            "mean": _ms(mean),
            "p50": _ms(verify.percentile(waits, 0.5)),
            "p99": _ms(verify.percentile(waits, 0.99)),
            "max": _ms(max(waits or [0])),
        },
        "worst_over_mean_wait": round(max(waits) / mean, 3) if mean else None,
        "attempts": sum(p.attempts for p in payments),
        "funds_locked": sum(p.funds_locked for p in payments),
        "rate_limited": sum(p.rate_limited for p in payments),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def audit(payments: list[Payment], n: int, by_identity: bool, prefix: str) -> dict:
    """Check the books after a run: no token held twice or spent twice, value conserved."""
    records = [
        Record(
            p.tx_id,
            WALLET,
            1,
            p.started,
            0.0,
            "selected",
            p.tokens,
            p.selected,
            math.inf,
            "spent",
            None,
        )
        for p in payments
        if not p.error
    ]
    stored = books.spent_tokens(by_identity=by_identity, prefix=prefix)
    balances = books.unspent_by_wallet()
    done = sum(not p.error for p in payments)
    return {
        "double_spends": verify.overlapping_holds(records) + verify.spent_twice(records, stored),
        "leaked_locks": books.leaked_locks(),
        "supply_conserved": (sum(balances.values()) == n and balances.get(PAYEE, 0) == done),
    }


def run(
    harness,
    strategy: str,
    n: int,
    processes: int,
    timeout: float,
    seed: int,
    say,
    wait: float | None = None,
) -> dict:
    """Run the chain in the library: N payments in sequence, then N at once.

    With ``wait``, a selection that finds the funds held waits its turn in the key's queue
    (as the service's ``Prefer: wait`` does) instead of answering funds locked at once.
    """
    supply = seeding.seed(((WALLET, n),), "USD")
    out: dict[str, object] = {
        "strategy": strategy,
        "payments": n,
        "processes": processes,
        "wait": wait,
    }
    pool = harness.pool(strategy)
    for mode in ("sequential", "concurrent"):
        database.reset()
        strategies.deploy(strategy)
        numbers = tuple(range(n))
        if mode == "sequential":
            tasks = [ChainTask(strategy, numbers, seed, "seq", False, wait=wait)]
        else:
            tasks = [
                ChainTask(strategy, numbers[i::processes], seed + i, "chain", True, wait=wait)
                for i in range(min(processes, n))
            ]
        payments, _ = pool.run(tasks, timeout)
        result = summary(payments)
        result.update(
            audit(payments, sum(supply.values()), False, "seq" if mode == "sequential" else "chain")
        )
        out[mode] = result
        say(
            f"[chain] library {strategy} {mode}: {result['completed']}/{n} in "
            f"{result['elapsed_s']:.2f} s, errors {result['errors']}, worst wait "
            f"{result['wait_ms']['max']} ms (mean {result['wait_ms']['mean']} ms)"
        )
    out["completion_over_sequential"] = ratio(out)
    return out


def ratio(out: dict) -> float | None:
    """Return concurrent completion time over sequential time.

    None when the sequential run did not complete; a lower bound when the concurrent one did
    not (its payments gave up at the timeout).
    """
    concurrent, sequential = out.get("concurrent") or {}, out.get("sequential") or {}
    if sequential.get("errors") or not sequential.get("elapsed_s") or not concurrent:
        return None
    return round(concurrent["elapsed_s"] / sequential["elapsed_s"], 3)
