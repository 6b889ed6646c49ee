"""Serve Prometheus metrics: this process's, or every web worker's when multiprocess."""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)

# Importing the module registers the metrics, so the first scrape lists every series.
from locks import metrics  # noqa: F401


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Return the metrics in the Prometheus text format."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker writes its samples to files in that directory; a scrape reaches one
        # worker, which must aggregate all of them, so read the files, not its own registry.
        forget_dead_workers(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


# A live gauge's file of one process: gauge_livesum_1234.db, gauge_liveall_1234.db, ...
LIVE_GAUGE = re.compile(r"gauge_live[a-z]*_(\d+)\.db")


def forget_dead_workers(directory: str) -> list[int]:
    """Stop counting the live gauges of processes that have exited; return their pids.

    A worker the server replaced (it died, or was restarted) leaves its files behind: its
    counters must keep counting, but its live gauges (requests in flight, waiting requests)
    describe a process that is gone. Every scrape checks the pids those files name.
    """
    dead = []
    for path in Path(directory).glob("gauge_live*_*.db"):
        match = LIVE_GAUGE.fullmatch(path.name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            dead.append(pid)
        except PermissionError:  # alive, owned by someone else
            continue
    for pid in set(dead):
        multiprocess.mark_process_dead(pid, directory)
    return sorted(set(dead))
