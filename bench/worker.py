"""Replica processes: a pool of spawned OS processes that run one strategy per measured point.

Each process sets Django up once, then serves tasks over a pipe: build the strategy, report
ready, wait for the common start time, select (then spend or release) until the common end
time, and send back one record per selection. Start and end are CLOCK_MONOTONIC instants, one
clock for every process on the machine, so all replicas start together and stop together.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, TypeVar

from bench.workloads import Workload

T = TypeVar("T")

START_DELAY = 0.1  # seconds between "all ready" and the start: time for the go message


@dataclass(frozen=True)
class Task:
    """One replica's part of a measured point."""

    strategy: str
    workload: Workload  # without its token rows: replicas only need the request shape
    replica: int
    seed: int
    tag: str = ""  # prefix of the point's tx ids (default: the strategy's name)


class Record(NamedTuple):
    """One selection: what was asked, what came of it, and when its tokens were held."""

    tx_id: str
    wallet: str
    quantity: int
    started: float
    latency: float
    outcome: str  # selected, insufficient_funds, funds_locked, no_match, error
    tokens: tuple[object, ...]  # token ids (or "tx_id:index" over HTTP)
    acquired: float
    ended: float  # when the locks were let go; inf once spent (a spent token is never free)
    action: str  # spent, released, spend_failed, or "" when nothing was selected
    attempts: int | None  # token rows offered to lock statements
    error: str = ""
    total: int = 0  # the selected tokens' sum (0 when nothing was selected)


def _request(workload, rng: random.Random):
    """Draw the next request of ``workload``: its wallet key and quantity."""
    from sherdlock import WalletKey

    return WalletKey(workload.pick_wallet(rng), workload.currency), rng.randint(
        workload.min_quantity, workload.max_quantity
    )


def drive(task: Task, strategy, start_at: float, end_at: float) -> list[Record]:
    """Select from the workload until ``end_at``; spend or release every selection.

    A spend pays the requested quantity and gives the change (if any) back, both to the
    selection's own wallet: the wallet's supply never changes.
    """
    from bench.strategies import payment, spend
    from sherdlock import FundsLocked, InsufficientFunds, NoMatch

    workload, rng = task.workload, random.Random(task.seed)
    records: list[Record] = []
    time.sleep(max(0.0, start_at - time.monotonic()))
    n = 0
    while (started := time.monotonic()) < end_at:
        n += 1
        tx_id = f"{task.tag or task.strategy}-{task.replica}-{n}"
        key, quantity = _request(workload, rng)
        before = strategy.lock_attempts
        picked, error = None, ""
        try:
            picked = strategy.select(tx_id, key, quantity)
            outcome = "selected"
        except InsufficientFunds:
            outcome = "insufficient_funds"
        except FundsLocked:
            outcome = "funds_locked"
        except NoMatch:  # a strategy's terms cannot be met (bench.selection_strategies)
            outcome = "no_match"
        except Exception as exc:
            outcome, error = "error", repr(exc)[:300]
        finished = time.monotonic()
        attempts = None if before is None else strategy.lock_attempts - before
        acquired = ended = finished
        action = ""
        if picked is not None:
            if workload.hold:
                time.sleep(rng.uniform(0, 2 * workload.hold))
            if rng.random() < workload.spend_ratio:
                outputs = payment(picked.total, quantity, key.wallet)
                # A strategy on tables of its own (the reference) spends with its own statement.
                spender = getattr(strategy, "spend", spend)
                created, error = _twice(partial(spender, picked, outputs), error)
                if created:
                    strategy.spent(picked, created)
                    action, ended = "spent", math.inf
                else:
                    action, ended = "spend_failed", time.monotonic()
                    _twice(partial(_release, strategy, picked), error)
            else:
                ended = time.monotonic()
                ok, error = _twice(partial(_release, strategy, picked), error)
                action = "released" if ok else "release_failed"
        records.append(
            Record(
                tx_id,
                key.wallet,
                quantity,
                started,
                finished - started,
                outcome,
                tuple(picked.token_ids) if picked else (),
                acquired,
                ended,
                action,
                attempts,
                error,
                picked.total if picked else 0,
            )
        )
    return records


def warm_up(task: Task, strategy) -> None:
    """Make one selection of the point's kind and release it, before the clock starts.

    Each point starts on tables the harness has just restored (``database.reset``: TRUNCATE,
    then ANALYZE), which drops every plan the replicas' connections had cached. Without a
    warm-up, the first statements of every replica are planned again at the same moment, and
    a replica whose statements cost more to plan pays for it in the point's first fraction of
    a second. A running service does not plan all its statements again at once. The HTTP
    points' load processes warm up the same way (``bench.web.WARM_UP``). The warm-up changes no
    token (a release leaves the supply as it was) and is not recorded; a warm-up that fails is
    ignored, as the point will meet its cause.
    """
    key, quantity = _request(task.workload, random.Random(-1 - task.seed))
    try:
        picked = strategy.select(f"{task.tag or task.strategy}-{task.replica}-warm", key, quantity)
    except Exception:
        return
    _twice(partial(_release, strategy, picked), "")


def _release(strategy, picked) -> bool:
    strategy.release(picked)
    return True


def _twice(step: Callable[[], T], error: str) -> tuple[T | None, str]:
    """Run ``step`` (a falsy result: failed), once more if it raised; keep the first error seen.

    A transient database error (a deadlock) in a spend or release must not end the run: it
    is recorded, retried, and shows up in the point's errors and leaked-lock count.
    """
    for _ in range(2):
        try:
            return step(), error
        except Exception as exc:
            error = error or repr(exc)[:300]
    return None, error


def serve(conn) -> None:  # pragma: no cover - runs in the replica process
    """Serve tasks from the parent until it sends None."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    from bench.strategies import build
    from common.knobs import knobs

    conn.send(("booted", None))
    while (task := conn.recv()) is not None:
        try:
            strategy = build(task.strategy, task.seed)
            connection.ensure_connection()  # connect before the clock starts
            if isinstance(task, Task):
                warm_up(task, strategy)
                run = partial(drive, task, strategy)
            else:  # a chain of payments (bench.chain), which readies its own threads first
                run = task.prepare(strategy)
            conn.send(
                (
                    "ready",
                    {
                        "listening": getattr(strategy, "listening", None),
                        "settings": knobs().setting(),
                    },
                )
            )
            go = conn.recv()
            if go is None:
                conn.send(("cancelled", None))
                continue
            records = run(*go)
            # An idle replica must not keep working (a listener applying notifications)
            # while the next point is measured.
            getattr(strategy, "close", lambda: None)()
            conn.send(("done", records))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class ReplicaError(RuntimeError):
    """A replica process failed."""


class Pool:
    """``size`` replica processes started once, with ``env`` as their whole environment."""

    def __init__(self, size: int, env: dict[str, str] | None = None) -> None:
        context = multiprocessing.get_context("spawn")
        self.conns, self.processes = [], []
        saved = dict(os.environ)
        if env is not None:  # a spawned child copies the parent's environment
            os.environ.clear()
            os.environ.update(env)
        try:
            for _ in range(size):
                parent, child = context.Pipe()
                process = context.Process(target=serve, args=(child,), daemon=True)
                process.start()
                child.close()
                self.conns.append(parent)
                self.processes.append(process)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        # Booting processes compete for the CPU: measure nothing until all have finished.
        for conn in self.conns:
            kind, detail = self._receive(conn)
            if kind != "booted":
                raise ReplicaError(f"a replica process did not boot: {detail}")

    @property
    def size(self) -> int:
        return len(self.processes)

    def run(self, tasks: list, duration: float, on_start=None) -> tuple[list, list[dict]]:
        """Run ``tasks`` on the first len(tasks) processes at once.

        ``on_start(start_at, end_at)``, if given, is called once every replica is ready, just
        before they are told to go. Return every record, and what each replica said about
        itself when ready.
        """
        conns = self.conns[: len(tasks)]
        for conn, task in zip(conns, tasks, strict=True):
            conn.send(task)
        replies = [self._receive(conn) for conn in conns]
        failed = [detail for kind, detail in replies if kind == "error"]
        ready = [conn for conn, (kind, _) in zip(conns, replies, strict=True) if kind == "ready"]
        start_at = time.monotonic() + START_DELAY
        if on_start is not None and not failed:
            on_start(start_at, start_at + duration)
        for conn in ready:
            conn.send(None if failed else (start_at, start_at + duration))
        results = [self._receive(conn) for conn in ready]
        failed += [detail for kind, detail in results if kind == "error"]
        if failed:
            raise ReplicaError(failed[0])
        infos = [info for kind, info in replies if kind == "ready"]
        return [record for _, records in results for record in records], infos

    def _receive(self, conn) -> tuple[str, object]:
        # A replica that died (killed, out of memory) must not hang the run.
        while not conn.poll(1.0):
            if not all(process.is_alive() for process in self.processes):
                raise ReplicaError("a replica process died")
        return conn.recv()

    def close(self) -> None:
        """Stop every replica process."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
