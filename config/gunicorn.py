"""Gunicorn settings shared by every way the web server is started (``-c config/gunicorn.py``)."""

from __future__ import annotations

import os

# Threaded workers: a request waiting for held funds (Prefer: wait) parks a thread, not a
# process, and threads share their process's replica cache and API-key cache. README, "Running
# it", gives the measurements behind the defaults. The thread count bounds how many requests
# may wait at once (WAIT_SLOTS, 8 fewer); threads start only as requests need them, and a
# parked one costs neither CPU nor a database session.
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "128"))

# The longest request line gunicorn reads (its maximum); longer ones get 414 before Django sees
# them. A legitimate request stays well under it: names of 128 characters, percent-encoded
# UTF-8, in the path and in three filters take about 4 KB, gunicorn's default limit.
limit_request_line = 8190
MAX_REQUEST_LINE = limit_request_line


def post_fork(server, worker) -> None:
    """Tell the worker's app how many threads it really has (``--threads`` may override the
    setting above): its wait slots never take them all (``locks.waiting.wait_slots``)."""
    os.environ["WEB_THREADS"] = str(worker.cfg.threads)


def child_exit(server, worker) -> None:
    """Let the metrics of a finished worker stop counting as live (gauges) once it exits."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
