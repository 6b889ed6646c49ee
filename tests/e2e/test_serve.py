"""`make run`'s supervisor: serves on the embedded servers and leaves nothing behind on Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from config import embedded_db
from tests.helpers.processes import ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def descendants(pid: int) -> set[int]:
    """Return the pids of every live process whose ancestry includes ``pid``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (an unreaped zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.mark.timeout(180)
def test_serve_starts_everything_and_ctrl_c_stops_everything(tmp_path):
    data_dir = tmp_path / "data"
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "SHERDLOCK_TEST_DB"}
    }
    env.update(SHERDLOCK_DATA_DIR=str(data_dir), PORT=str(port), WEB_CONCURRENCY="1")
    log = (tmp_path / "serve.log").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "config.serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        assert wait_for(f"http://127.0.0.1:{port}/admin/login/", timeout=120) == 200
        children = descendants(process.pid)
        assert embedded_db.is_running(data_dir / "postgres")
        deadline = time.monotonic() + 60
        while "ready." not in (tmp_path / "serve.log").read_text():  # the Celery worker
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.5)
        output = (tmp_path / "serve.log").read_text()
        assert f"http://127.0.0.1:{port}/admin/" in output
        assert "beat: Starting" in output
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    output = (tmp_path / "serve.log").read_text()
    assert code == 0, output[-3000:]
    assert "embedded PostgreSQL stopped" in output
    assert not embedded_db.is_running(data_dir / "postgres")
    deadline = time.monotonic() + 15  # a child may still be on its way out
    while alive := [pid for pid in children if running(pid)]:
        assert time.monotonic() < deadline, f"orphans left behind: {alive}"
        time.sleep(0.1)
