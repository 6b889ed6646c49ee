"""Other processes: the database's URL, a child's environment, a module run, waiting for news."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent.parent  # the project

# Server sessions the test PgBouncer lends out per database, fewer than the replica processes
# the pooled tests start: clients must wait their turn for a session, as at scale.
POOL_SIZE = 10

# Seconds any change awaited from another process may take before the test fails.
WAIT = 20.0


def database_url(settings_dict: dict) -> str:
    """Return a DATABASE_URL for a Django connection's settings (socket hosts percent-encoded)."""
    host = quote(str(settings_dict.get("HOST") or "127.0.0.1"), safe="")
    port = settings_dict.get("PORT") or 5432
    user = quote(settings_dict.get("USER") or "postgres", safe="")
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}" if password else user
    return f"postgresql://{auth}@{host}:{port}/{settings_dict['NAME']}"


def child_env(db_url: str) -> dict[str, str]:
    """Return the environment of a child process that uses the database at ``db_url``."""
    env = dict(os.environ)
    env["DATABASE_URL"] = db_url
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def manage(*args: str, env: dict[str, str], timeout: float = 300) -> str:
    """Run ``manage.py args`` in a child process with ``env``; fail on an error; return stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def run_module(
    module: str, *argv: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """Run ``python -m module argv...`` in the project, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def wait_for(predicate: Callable[[], T], what: str, timeout: float = WAIT) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value
