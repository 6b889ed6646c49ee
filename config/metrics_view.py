"""Serve Prometheus metrics: this process's, or every gunicorn worker's when multiprocess."""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)

# Importing the modules registers their metrics, so the first scrape lists every series.
from clients import throttling  # noqa: F401
from common import pool_metrics  # noqa: F401
from locks import metrics  # noqa: F401


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Return the metrics in the Prometheus text format."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker writes its samples to files in that directory; a scrape reaches one
        # worker, which must aggregate all of them, so read the files, not its own registry.
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
