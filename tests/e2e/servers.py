"""Real servers for end-to-end tests: the web server serving the project on a free port."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from config.serve import web_command
from tests.e2e.test_serve import free_port, wait_for
from tests.helpers.processes import ROOT


@dataclass
class WebServer:
    """A running web server: its base URL, main process (its workers' parent) and log file."""

    base: str
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def web_server(
    env: dict[str, str], log: Path, workers: int = 2, args: tuple[str, ...] = ()
) -> Iterator[WebServer]:
    """Serve the project as ``make run`` does (``config.serve.web_command``); stop it afterwards."""
    port = free_port()
    env = {**env, "WEB_CONCURRENCY": str(workers)}
    with log.open("w+") as out:
        process = subprocess.Popen(
            [*web_command(sys.executable, "127.0.0.1", port, env), *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            try:
                assert wait_for(f"{base}/healthz", timeout=60) == 200
            except OSError:
                pytest.fail(log.read_text()[-3000:])
            yield WebServer(base, process, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
