"""Real servers for end-to-end tests: gunicorn serving the project on a free port."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.test_serve import free_port, wait_for
from tests.helpers.processes import ROOT


@dataclass
class Gunicorn:
    """A running gunicorn: its base URL, master process and log file."""

    base: str
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str], log: Path, workers: int = 2, args: tuple[str, ...] = ()
) -> Iterator[Gunicorn]:
    """Serve the project with gunicorn (configured as ``make run`` does); stop it afterwards."""
    port = free_port()
    with log.open("w+") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "-c",
                str(ROOT / "config" / "gunicorn.py"),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(workers),
                "--graceful-timeout",
                "5",
                *args,
            ],
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
            yield Gunicorn(base, process, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
