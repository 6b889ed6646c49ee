"""Translate every API error to one JSON shape: ``{"code", "detail", "fields"}``.

This is the only place that knows how Sherdlock's errors map to HTTP. ``code`` is stable and
snake_case; ``fields`` maps a field path (``tokens.3.quantity``) to its messages for
validation errors and is ``{}`` otherwise. Some errors add a key (``available``).
"""

from __future__ import annotations

import math

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from common.errors import error_body
from config.outage import UNAVAILABLE_RETRY_AFTER, is_connection_loss, note_connection_loss
from config.parsers import RequestTooLarge
from locks.errors import SelectionInProgress, SelectionNotFound, ValueNotConserved
from sherdlock import FundsLocked, InsufficientFunds, InvalidRequest, SherdlockError

# DRF's own codes where they differ from ours.
DRF_CODES = {
    exceptions.ValidationError: "invalid",
    exceptions.ParseError: "malformed_json",
    exceptions.Throttled: "rate_limited",
}


class ServiceUnavailable(exceptions.APIException):
    """A dependency (the database) cannot be reached."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable."
    default_code = "database_unavailable"


def unavailable_response(request, exc: BaseException) -> Response:
    """Answer 503 database_unavailable with Retry-After, logged once."""
    note_connection_loss(request, exc)
    response = Response(
        error_body(ServiceUnavailable.default_code, str(ServiceUnavailable.default_detail)),
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": UNAVAILABLE_RETRY_AFTER},
    )
    response._has_been_logged = True  # Django's request logger would add an error line
    return response


def flatten(detail: object, prefix: str = "") -> dict[str, list[str]]:
    """Flatten DRF's nested validation detail into ``{"a.0.b": [messages]}``."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            # A list's own error ("too many items") belongs to the list's path.
            if key == "non_field_errors" and prefix:
                out.update(flatten(value, prefix))
            else:
                out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return {prefix or "non_field_errors": [str(item) for item in detail]} if detail else {}
        out = {}
        for position, item in enumerate(detail):
            out.update(flatten(item, f"{prefix}.{position}" if prefix else str(position)))
        return out
    return {prefix or "non_field_errors": [str(detail)]}


def _summary(fields: dict[str, list[str]]) -> str:
    if not fields:
        return "Invalid input."
    path, messages = next(iter(fields.items()))
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    return f"Invalid input: {path}: {messages[0]}{more}"


def _retry_after(seconds: float | None) -> str:
    return str(max(1, math.ceil(seconds or 0)))


def sherdlock_response(exc: SherdlockError) -> Response:
    """Map a domain error to its status and body."""
    headers: dict[str, str] = {}
    extra: dict[str, object] = {}
    code = getattr(exc, "code", None)
    if isinstance(exc, InsufficientFunds):
        status_code, code, extra = 409, "insufficient_funds", {"available": str(exc.available)}
    elif isinstance(exc, FundsLocked):
        status_code, code = 409, "funds_locked"
        extra = {"available": str(exc.available), "retry_after": round(exc.retry_after, 3)}
        headers["Retry-After"] = _retry_after(exc.retry_after)
    elif isinstance(exc, InvalidRequest):
        status_code, code = 400, "invalid"
    elif isinstance(exc, ValueNotConserved):
        status_code = 422
    elif isinstance(exc, SelectionNotFound):
        status_code = 404
    else:
        status_code = 409
        if isinstance(exc, SelectionInProgress):
            headers["Retry-After"] = "1"
    body = error_body(code or "conflict", str(exc), **extra)
    return Response(body, status=status_code, headers=headers)


def api_exception_response(exc: exceptions.APIException) -> Response:
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if isinstance(exc, exceptions.Throttled):
        headers["Retry-After"] = _retry_after(exc.wait)
    elif isinstance(exc, ServiceUnavailable):
        headers["Retry-After"] = UNAVAILABLE_RETRY_AFTER
    code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), exc.default_code)
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten(exc.detail)
        return Response(error_body(code, _summary(fields), fields), status=exc.status_code)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.default_detail)
    return Response(error_body(code, str(detail)), status=exc.status_code, headers=headers)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Return the JSON error response for ``exc``, or None to let Django answer 500."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):  # Django's own check, when DRF reads request.body
        exc = RequestTooLarge()
    if is_connection_loss(exc):
        response = unavailable_response(context.get("request"), exc)
    elif isinstance(exc, SherdlockError):
        response = sherdlock_response(exc)
    elif isinstance(exc, exceptions.APIException):
        response = api_exception_response(exc)
    else:
        return None
    set_rollback()
    return response
