"""The web server of the HTTP points, started as ``make run`` starts it, and read over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from bench import strategies
from bench.strategies import HTTP

BASE_DIR = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.read().decode()


class Server:
    """The web server of ``make run`` (``config.serve.web_command``), with the shipped settings.

    ``workers`` sets ``WEB_CONCURRENCY`` as an operator would; None keeps ``make run``'s default.
    """

    def __init__(self, workers: int | None, log) -> None:
        from config.serve import web_command

        self.port = _free_port()
        self._metrics = tempfile.TemporaryDirectory(prefix="bench-metrics-")
        env = strategies.environment(HTTP)
        env.pop("WEB_CONCURRENCY", None)
        # It logs at the shipped level, as `make run` does; the harness quiets only its own lines
        # and the replicas' (bench.runner), whose output is the progress report.
        env.pop("LOG_LEVEL", None)
        if workers is not None:
            env["WEB_CONCURRENCY"] = str(workers)
        env["PROMETHEUS_MULTIPROC_DIR"] = self._metrics.name
        self.process = subprocess.Popen(
            web_command(sys.executable, "127.0.0.1", self.port, env),
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                if _get(self.port, "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the web server did not become ready; see its log")
            time.sleep(0.2)

    def metrics(self) -> dict[str, float]:
        """Read the selection outcome counters from /metrics (summed over workers)."""
        _, text = _get(self.port, "/metrics")
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("sherdlock_selections_total{"):
                outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
                counts[outcome] = counts.get(outcome, 0) + float(line.rsplit(" ", 1)[1])
        return counts

    def connections_per_worker(self) -> list[int]:
        """Return how many client connections each worker holds, most first.

        A kept-alive connection stays with the worker that accepted it until a worker holding
        more than its share closes it (``config.gunicorn.REBALANCE_REQUESTS``), so a few load
        processes can start split unevenly between the workers, which moves a point's figures
        until the workers even the split out. Empty where the workers cannot be read.
        """
        try:
            workers = psutil.Process(self.process.pid).children()
        except psutil.Error:
            return []
        counts = []
        for worker in workers:
            try:
                sockets = worker.net_connections(kind="tcp")
            except psutil.Error:
                return []
            counts.append(
                sum(
                    1
                    for s in sockets
                    if s.status == psutil.CONN_ESTABLISHED and s.laddr and s.laddr.port == self.port
                )
            )
        return sorted(counts, reverse=True)

    def stop(self) -> None:
        """Stop the server and its workers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._metrics.cleanup()


def describe_split(counts: list[int] | None) -> str:
    """Write ``connections_per_worker`` as "3/1" ("-" when unknown)."""
    return "/".join(map(str, counts or [])) or "-"
