"""Gunicorn settings shared by every way the web server is started (``-c config/gunicorn.py``)."""

from __future__ import annotations

import os


def child_exit(server, worker) -> None:
    """Let the metrics of a finished worker stop counting as live (gauges) once it exits."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
