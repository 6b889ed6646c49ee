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


def requests_per_connection(value: str | None) -> int:
    """Read ``WEB_KEEPALIVE_REQUESTS``: requests served on one connection before it is closed."""
    text = (value or "100").strip()
    if not text.isdigit():
        raise ValueError(
            f"WEB_KEEPALIVE_REQUESTS={value!r}: give a number of requests, or 0 never to close"
        )
    return int(text)


# A kept-alive connection stays with the worker that accepted it, and a worker that is idle
# when a few clients connect may take them all, leaving the other worker's core idle for as
# long as they stay connected (README, "Running it"). After this many requests a connection is
# answered "Connection: close" and its client reconnects, as HTTP clients do; the worker whose
# thread is free accepts first, so a lopsided split evens out within seconds under load. As
# nginx's keepalive_requests; 0 keeps a connection for as long as its client does.
KEEPALIVE_REQUESTS = requests_per_connection(os.environ.get("WEB_KEEPALIVE_REQUESTS"))


def pre_request(worker, req) -> None:
    """Close the connection after this request if it is its ``KEEPALIVE_REQUESTS``-th."""
    worker.log.debug("%s %s", req.method, req.path)  # what gunicorn's own hook does
    number = getattr(req, "req_number", 0)  # HTTP/1.1 only: a request's place on its connection
    if KEEPALIVE_REQUESTS and number and number % KEEPALIVE_REQUESTS == 0:
        req.must_close = True


def post_fork(server, worker) -> None:
    """Tell the worker's app how many threads it really has (``--threads`` may override the
    setting above): its wait slots never take them all (``locks.waiting.wait_slots``)."""
    os.environ["WEB_THREADS"] = str(worker.cfg.threads)


def child_exit(server, worker) -> None:
    """Let the metrics of a finished worker stop counting as live (gauges) once it exits."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
