"""Gunicorn settings of every way the web server starts (``-c python:config.gunicorn``)."""

from __future__ import annotations

import mmap
import os
import time

from gunicorn import glogging  # type: ignore[import-untyped]  # gunicorn ships no types

# Threaded workers: a request waiting for held funds (Prefer: wait) parks a thread, not a
# process, and threads share their process's replica cache and API-key cache. The thread count
# bounds how many requests may wait at once (WAIT_SLOTS, 8 fewer); threads start only as
# requests need them, and a parked one costs neither CPU nor a database session.
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "128"))

# The longest request line gunicorn reads (its maximum); longer ones get 414 before Django sees
# them. A legitimate request stays well under it: names of 128 characters, percent-encoded
# UTF-8, in the path and in three filters take about 4 KB, gunicorn's default limit.
limit_request_line = 8190
MAX_REQUEST_LINE = limit_request_line

# The access log (WEB_ACCESS_LOG=1) is gunicorn's default line plus the request's id as
# answered (config.request_id), which the application's own lines name too.
access_log_format = (
    '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %({x-request-id}o)s'
)


class Logger(glogging.Logger):
    """Gunicorn's logger, writing JSON objects like the application's with LOG_FORMAT=json.

    Only the formatters of its handlers change, as it sets them up (at start and after a reload,
    before its first line): a ``logconfig_dict`` would make gunicorn format an access line for
    every request even with the access log off.
    """

    def setup(self, cfg) -> None:
        super().setup(cfg)
        if os.environ.get("LOG_FORMAT", "").strip().lower() != "json":
            return
        from pythonjsonlogger.json import JsonFormatter

        formatter = JsonFormatter(
            "%(asctime)s %(levelname)s %(process)d %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                handler.setFormatter(formatter)


logger_class = Logger


# A kept-alive connection stays with the worker that accepted it, and a worker that is idle
# when a few clients connect may take them all, leaving the other worker's core idle for as
# long as they stay connected. So every REBALANCE_REQUESTS-th request of a connection, if its
# worker holds more than its share of all the workers' connections, is answered "Connection:
# close": the client reconnects, as HTTP clients do, and the less busy worker tends to accept.
# A worker at its share never closes, so an even split stays put. A hundred requests move an
# uneven split within a second or two of a busy client's traffic, while a reconnect (a TCP
# handshake) in a hundred costs nothing a client notices.
REBALANCE_REQUESTS = 100

# Each worker's connection count, where every worker can read it: shared memory made before
# the workers fork, a slot per worker (by its spawn number, ``worker.age``) holding its count
# and when it wrote it (CLOCK_MONOTONIC, one clock for every process). A slot is written only by
# its worker, as it serves a request, and zeroed when the worker exits. A worker that served
# nothing for FRESH_SECONDS counts as holding nothing: its count may be stale (connections it
# closed while idle), and its core is free for a connection moved its way.
SLOTS = 256
FRESH_SECONDS = 2.0
_counts = memoryview(mmap.mmap(-1, 8 * SLOTS)).cast("q")
_written = memoryview(mmap.mmap(-1, 8 * SLOTS)).cast("q")  # milliseconds
# How many workers the server runs now: the setting, or what TTIN/TTOU made of it since
# (written by the main process, ``nworkers_changed``; 0 until it has said).
_live_workers = memoryview(mmap.mmap(-1, 8)).cast("q")


def _slot(worker) -> int:
    return int(worker.age) % SLOTS


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def note_connections(slot: int, count: int, now_ms: int) -> None:
    """Record that the worker of ``slot`` holds ``count`` connections as of ``now_ms``."""
    _counts[slot] = count
    _written[slot] = now_ms


def connections_held(now_ms: int) -> int:
    """Return the connections of every worker that served a request within FRESH_SECONDS."""
    fresh = now_ms - int(FRESH_SECONDS * 1000)
    return sum(count for count, at in zip(_counts, _written, strict=True) if count and at > fresh)


def over_share(mine: int, everyone: int, workers: int) -> bool:
    """Tell whether a worker holding ``mine`` of ``everyone``'s connections holds too many."""
    return mine > -(-everyone // max(workers, 1))  # more than the even split, rounded up


def pre_request(worker, req) -> None:
    """Move this request's connection if its worker holds more than its share (see above)."""
    worker.log.debug("%s %s", req.method, req.path)  # what gunicorn's own hook does
    mine = getattr(worker, "nr_conns", None)  # the threaded worker's count of its connections
    if mine is None:
        return
    now = _now_ms()
    note_connections(_slot(worker), mine, now)
    number = getattr(req, "req_number", 0)  # HTTP/1.1: the request's place on its connection
    if (
        REBALANCE_REQUESTS
        and number
        and number % REBALANCE_REQUESTS == 0
        and over_share(mine, connections_held(now), _live_workers[0] or worker.cfg.workers)
    ):
        req.must_close = True


def nworkers_changed(server, new_value, old_value) -> None:
    """Tell the workers how many of them there are (at start, and after TTIN or TTOU)."""
    _live_workers[0] = int(new_value)


def post_fork(server, worker) -> None:
    """Tell the worker's app how many threads it really has (``--threads`` may override the
    setting above): its wait slots never take them all (``locks.wait_slots.wait_slots``).

    Say so if the worker keeps no count of its connections (another worker class, or a
    gunicorn release that renamed ``nr_conns``): no connection would ever be moved.
    """
    os.environ["WEB_THREADS"] = str(worker.cfg.threads)
    if not hasattr(worker, "nr_conns"):
        worker.log.warning(
            "%s workers keep no count of their connections (nr_conns): none is moved to a "
            "worker holding fewer",
            type(worker).__name__,
        )


def child_exit(server, worker) -> None:
    """Forget a finished worker's connections; let its metrics stop counting as live (gauges)."""
    note_connections(_slot(worker), 0, 0)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
