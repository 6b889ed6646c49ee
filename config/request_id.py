"""The request id: taken from ``X-Request-ID`` when it is safe to log, else generated.

Each request gets one; its answer carries it back in ``X-Request-ID`` and every log line
written while it is served names it (``RequestIdFilter``), so a client's report, the proxy's
access log and the service's logs meet on one value. A header that is too long or holds
anything but letters, digits and ``-_.:/+=@`` is replaced, never logged: a client must not be
able to forge log lines or fill them.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar

HEADER = "X-Request-ID"
META_KEY = "HTTP_X_REQUEST_ID"

# What a proxy or client id looks like (a UUID, a trace id, a load balancer's id): printable,
# no spaces, short enough for one log field.
VALID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")

# The id of the request this thread serves; "-" outside a request (start-up, Celery tasks).
NONE = "-"
current: ContextVar[str] = ContextVar("sherdlock_request_id", default=NONE)


def request_id(header: str | None) -> str:
    """Return ``header`` if it is a valid request id, else a new one."""
    if header is not None and VALID.fullmatch(header):
        return header
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """First in ``MIDDLEWARE``: give the request its id, and its answer the same id back."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        value = request_id(request.META.get(META_KEY))
        request.request_id = value
        token = current.set(value)
        try:
            response = self.get_response(request)
        finally:
            current.reset(token)
        response[HEADER] = value
        return response


class RequestIdFilter(logging.Filter):
    """Add ``request_id`` to every record (``-`` outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            # Django logs a 4xx or 5xx answer (django.request) after the middleware returned,
            # with the request in the record.
            request = getattr(record, "request", None)
            record.request_id = getattr(request, "request_id", None) or current.get()
        return True
