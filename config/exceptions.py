"""Every API error as data: its status and code in one table, and the handler that answers.

This is the only place that knows how Sherdlock's errors map to HTTP. ``ERRORS`` names, for
each error class a view may raise, the status and the stable snake_case ``code`` clients see,
and what the answer adds (body keys such as ``available``, headers such as ``Retry-After``).
An error is answered by the first class of its hierarchy (its MRO, most derived first) that
the table names; an error the table does not name is a bug, left to Django, which logs it and
answers 500 (``config.views.server_error``). Every error class of the project is either in
``ERRORS`` or in ``NEVER_ANSWERED`` (tests/integration/api/test_error_table.py checks it).

The body is always ``{"code", "detail", "fields"}`` (``common.errors``); ``fields`` maps a
field path (``tokens.3.quantity``) to its messages for validation errors and is ``{}``
otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from clients.throttling import RateLimited
from common.errors import error_body
from config.embedded_db import EmbeddedDatabaseError
from config.outage import (
    BUSY_RETRY_AFTER,
    UNAVAILABLE_RETRY_AFTER,
    is_connection_loss,
    is_overload,
    note_connection_loss,
    note_overload,
)
from config.parsers import RequestTooLarge
from locks.errors import (
    AlreadySpent,
    LeaseLost,
    NotLocked,
    OutputConflict,
    SelectionError,
    SelectionNotFound,
    TxIdConflict,
    ValueNotConserved,
)
from locks.store import TxIdTaken
from locks.wait_loop import QueueFull
from sherdlock import (
    ClaimRefused,
    FundsLocked,
    InsufficientFunds,
    InvalidRequest,
    NoExactMatch,
    NoMatch,
    SelectionTooLarge,
    SherdlockError,
    TooManyInputs,
)
from tokens.services import TokenConflict, TxIdInUse


class ServiceUnavailable(exceptions.APIException):
    """A dependency (the database) cannot be reached."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable."


class DatabaseBusy(exceptions.APIException):
    """The database gave up on a statement: a deadlock, a serialization failure, a timeout."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is busy; nothing was changed. Try again shortly."


def busy_response(request, exc: BaseException) -> Response:
    """Answer 503 database_busy with Retry-After, logged once."""
    note_overload(request, exc)
    response = error_response(DatabaseBusy(), ERRORS[DatabaseBusy])
    response._has_been_logged = True  # type: ignore[attr-defined]  # as unavailable_response
    return response


def unavailable_response(request, exc: BaseException) -> Response:
    """Answer 503 database_unavailable with Retry-After, logged once."""
    note_connection_loss(request, exc)
    response = error_response(ServiceUnavailable(), ERRORS[ServiceUnavailable])
    # Read by django.utils.log.log_response (else it adds an error line); not in django-stubs.
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def _retry_after(seconds: float | None) -> str:
    """Whole seconds for a Retry-After header: at least 1, rounded up."""
    return str(max(1, math.ceil(seconds or 0)))


@dataclass(frozen=True)
class HttpError:
    """How an error class is answered: status, code, and what the answer adds."""

    status: int
    code: str
    # Keys the body carries beside code, detail and fields.
    extra: Callable[[Any], dict[str, object]] | None = None
    headers: Callable[[Any], dict[str, str]] | None = None


def _leg(exc: Exception) -> dict[str, object]:
    # The failing leg of a multi-currency selection (sherdlock.legs), named by its currency.
    leg = getattr(exc, "leg", None)
    return {} if leg is None else {"leg": leg}


def _available(exc: InsufficientFunds) -> dict[str, object]:
    return {"available": str(exc.available), **_leg(exc)}


def _available_and_retry(exc: FundsLocked) -> dict[str, object]:
    return {"available": str(exc.available), "retry_after": round(exc.retry_after, 3), **_leg(exc)}


def _too_large(exc: SelectionTooLarge) -> dict[str, object]:
    return {"limit": exc.limit, **_leg(exc)}


RATE_LIMITED = HttpError(
    429, "rate_limited", headers=lambda exc: {"Retry-After": _retry_after(exc.wait)}
)

ERRORS: dict[type[Exception], HttpError] = {
    # The request itself and its caller (DRF's classes and ours).
    exceptions.ValidationError: HttpError(400, "invalid"),
    exceptions.ParseError: HttpError(400, "malformed_json"),
    exceptions.NotAuthenticated: HttpError(401, "not_authenticated"),
    exceptions.AuthenticationFailed: HttpError(401, "authentication_failed"),
    exceptions.PermissionDenied: HttpError(403, "permission_denied"),
    exceptions.NotFound: HttpError(404, "not_found"),
    exceptions.MethodNotAllowed: HttpError(405, "method_not_allowed"),
    exceptions.NotAcceptable: HttpError(406, "not_acceptable"),
    RequestTooLarge: HttpError(413, "request_too_large"),
    exceptions.UnsupportedMediaType: HttpError(415, "unsupported_media_type"),
    exceptions.Throttled: RATE_LIMITED,
    # Refused by the statement that would have locked (clients.throttling.charging).
    RateLimited: RATE_LIMITED,
    ServiceUnavailable: HttpError(
        503, "database_unavailable", headers=lambda exc: {"Retry-After": UNAVAILABLE_RETRY_AFTER}
    ),
    DatabaseBusy: HttpError(
        503, "database_busy", headers=lambda exc: {"Retry-After": BUSY_RETRY_AFTER}
    ),
    # Selecting (the core, sherdlock).
    InvalidRequest: HttpError(400, "invalid"),
    InsufficientFunds: HttpError(409, "insufficient_funds", extra=_available),
    FundsLocked: HttpError(
        409,
        "funds_locked",
        extra=_available_and_retry,
        headers=lambda exc: {"Retry-After": _retry_after(exc.retry_after)},
    ),
    # The free tokens cover the quantity, but no set of them meets the request's strategy.
    NoExactMatch: HttpError(409, "no_exact_match", extra=_leg),
    TooManyInputs: HttpError(409, "max_tokens_exceeded", extra=_leg),
    # Covering the quantity would take more tokens than a selection examines (MAX_EXAMINED).
    SelectionTooLarge: HttpError(409, "selection_too_large", extra=_too_large),
    # Issuing tokens (tokens.services).
    TxIdInUse: HttpError(409, "tx_id_conflict"),
    TokenConflict: HttpError(409, "token_conflict"),
    # A selection's life after it is made (locks.errors).
    SelectionNotFound: HttpError(404, "not_found"),
    TxIdConflict: HttpError(409, "tx_id_conflict"),
    AlreadySpent: HttpError(409, "already_spent"),
    NotLocked: HttpError(409, "not_locked"),
    LeaseLost: HttpError(409, "lease_lost"),
    OutputConflict: HttpError(409, "output_conflict"),
    ValueNotConserved: HttpError(422, "value_not_conserved"),
}

# The answer to an error the table does not name, given by Django (config.views.server_error).
SERVER_ERROR = HttpError(500, "server_error")

# The project's error classes no view lets out, each named (not its subclasses: a new error
# must be placed in one table or the other). Should one reach the handler, it is a bug and
# answered 500 like any error the table does not name.
NEVER_ANSWERED: frozenset[type[Exception]] = frozenset(
    {
        SherdlockError,  # the root of the hierarchy; only its subclasses are raised
        SelectionError,  # the root of locks.errors
        NoMatch,  # the root of the strategies' failures; only its subclasses are raised
        ClaimRefused,  # a store refusing a taken tx id: the repeated selection or TxIdConflict
        TxIdTaken,  # the PostgreSQL store's ClaimRefused
        QueueFull,  # a wallet's wait queue is full: the request is answered without waiting
        EmbeddedDatabaseError,  # the embedded PostgreSQL did not start
    }
)


def resolve(error_class: type[BaseException]) -> HttpError | None:
    """Return the table's entry for the most derived class of ``error_class`` it names."""
    for cls in error_class.__mro__:
        found = ERRORS.get(cls)
        if found is not None:
            return found
    return None


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


def detail_of(exc: BaseException, fields: dict[str, list[str]]) -> str:
    """Return the ``detail`` of the answer: a summary of ``fields``, DRF's detail or the message."""
    if isinstance(exc, exceptions.ValidationError):
        return _summary(fields)
    if isinstance(exc, exceptions.APIException):
        return str(exc.detail if isinstance(exc.detail, str) else exc.default_detail)
    return str(exc)


def error_response(exc: BaseException, error: HttpError) -> Response:
    """Answer ``exc`` as the table says."""
    fields = flatten(exc.detail) if isinstance(exc, exceptions.ValidationError) else {}
    headers: dict[str, str] = {}
    if auth_header := getattr(exc, "auth_header", None):  # set by DRF on 401s
        headers["WWW-Authenticate"] = auth_header
    if error.headers is not None:
        headers.update(error.headers(exc))
    extra = error.extra(exc) if error.extra is not None else {}
    body = error_body(error.code, detail_of(exc, fields), fields, **extra)
    return Response(body, status=error.status, headers=headers)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """Return the JSON error response for ``exc``, or None to let Django answer 500."""
    # Django's own exceptions become DRF's first, as DRF's default handler does.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):  # Django's own check, when DRF reads request.body
        exc = RequestTooLarge()
    # A lost or busy database is told by the driver's error code, not by a class of its own.
    if is_connection_loss(exc):
        response = unavailable_response(context.get("request"), exc)
    elif is_overload(exc):
        response = busy_response(context.get("request"), exc)
    elif (error := resolve(type(exc))) is not None:
        response = error_response(exc, error)
    else:
        return None
    set_rollback()
    return response
