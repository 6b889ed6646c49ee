"""The client's exceptions: one class per error code of the API, and the failures to reach it."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any


class ClientError(Exception):
    """The root of every exception the client raises."""

    code = "client_error"
    status: int | None = None

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# -- No answer ---------------------------------------------------------------------------------


class TransportError(ClientError):
    """No usable answer arrived."""

    code = "transport_error"


class Unreachable(TransportError):
    """The server could not be reached: nothing was sent, so nothing happened."""

    code = "unreachable"


class AnswerLost(TransportError):
    """The request was sent but its answer was lost (dropped connection or read timeout).

    The server may have acted on it; a call that a transaction id makes idempotent can be
    sent again and is answered as the first one was.
    """

    code = "answer_lost"


class BadAnswer(TransportError):
    """The answer is not the API's (not HTTP/1.1, not JSON, or not the expected shape)."""

    code = "bad_answer"


# -- The API's answers ------------------------------------------------------------------------


class ApiError(ClientError):
    """The API refused the request: its HTTP ``status``, error ``code`` and ``detail``."""

    code = "api_error"

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.body = dict(body or {})  # the whole error document, extra keys included
        fields = self.body.get("fields")
        self.fields: dict[str, list[str]] = dict(fields) if isinstance(fields, dict) else {}
        self.retry_after = retry_after  # seconds, when the answer says when to come back
        leg = self.body.get("leg")
        self.leg: str | None = leg if isinstance(leg, str) else None

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.detail}"


class Invalid(ApiError):
    """400 invalid: the request breaks a rule; ``fields`` says which."""


class MalformedJson(ApiError):
    """400 malformed_json."""


class NotAuthenticated(ApiError):
    """401 not_authenticated: no API key was sent."""


class AuthenticationFailed(ApiError):
    """401 authentication_failed: the API key is unknown or revoked."""


class PermissionDenied(ApiError):
    """403 permission_denied: the key may not do this, or not in this wallet."""


class NotFound(ApiError):
    """404 not_found: no such selection (or not the caller's), or no such URL."""


class MethodNotAllowed(ApiError):
    """405 method_not_allowed."""


class NotAcceptable(ApiError):
    """406 not_acceptable."""


class RequestTooLarge(ApiError):
    """413 request_too_large."""


class UnsupportedMediaType(ApiError):
    """415 unsupported_media_type."""


class RateLimited(ApiError):
    """429 rate_limited: too many selections for the key or wallet; see ``retry_after``."""


class DatabaseUnavailable(ApiError):
    """503 database_unavailable: the server cannot reach its database; see ``retry_after``."""


class DatabaseBusy(ApiError):
    """503 database_busy: the database cancelled the statement (a timeout, a deadlock, a
    serialization failure); nothing was done, retry after ``retry_after``."""


class ServerError(ApiError):
    """500 server_error: a defect of the server."""


class Conflict(ApiError):
    """409: the request conflicts with the state of the tokens or the selection."""


class InsufficientFunds(Conflict):
    """409 insufficient_funds: the wallet's free tokens cannot cover it; see ``available``."""

    @property
    def available(self) -> int | None:
        """Return the quantity available now, when the server says."""
        return _whole(self.body.get("available"))


class FundsLocked(InsufficientFunds):
    """409 funds_locked: other transactions hold the funds; retry after ``retry_after``."""


class NoMatch(Conflict):
    """409: the free tokens cover the quantity but no set of them meets the strategy."""


class NoExactMatch(NoMatch):
    """409 no_exact_match: no set of tokens within ``max_change`` (strategy exact)."""


class MaxTokensExceeded(NoMatch):
    """409 max_tokens_exceeded: more than ``max_tokens`` needed (strategy consolidate)."""


class SelectionTooLarge(Conflict):
    """409 selection_too_large: covering the quantity would take more tokens than one selection
    may examine (``limit``), or more than the wallet holds."""

    @property
    def limit(self) -> int | None:
        """Return the most tokens one selection may examine, when the server says."""
        return _whole(self.body.get("limit"))


class TxIdConflict(Conflict):
    """409 tx_id_conflict: the transaction id already names something else."""


class TokenConflict(Conflict):
    """409 token_conflict: a token of this identity exists with other content."""


class AlreadySpent(Conflict):
    """409 already_spent."""


class NotLocked(Conflict):
    """409 not_locked: the selection was released."""


class LeaseLost(Conflict):
    """409 lease_lost: the selection's locks expired and were taken over."""


class OutputConflict(Conflict):
    """409 output_conflict: an output token of this identity exists."""


class ValueNotConserved(ApiError):
    """422 value_not_conserved: the outputs do not add up to the selection's total."""


# Every error code of the API and its class.
BY_CODE: dict[str, type[ApiError]] = {
    "invalid": Invalid,
    "malformed_json": MalformedJson,
    "not_authenticated": NotAuthenticated,
    "authentication_failed": AuthenticationFailed,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "not_acceptable": NotAcceptable,
    "request_too_large": RequestTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "rate_limited": RateLimited,
    "database_unavailable": DatabaseUnavailable,
    "database_busy": DatabaseBusy,
    "server_error": ServerError,
    "insufficient_funds": InsufficientFunds,
    "funds_locked": FundsLocked,
    "no_exact_match": NoExactMatch,
    "max_tokens_exceeded": MaxTokensExceeded,
    "selection_too_large": SelectionTooLarge,
    "tx_id_conflict": TxIdConflict,
    "token_conflict": TokenConflict,
    "already_spent": AlreadySpent,
    "not_locked": NotLocked,
    "lease_lost": LeaseLost,
    "output_conflict": OutputConflict,
    "value_not_conserved": ValueNotConserved,
}


def _whole(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def api_error(status: int, body: object, retry_after: float | None, text: str = "") -> ApiError:
    """Return the exception for an error answer: its code's class, else ``ApiError``."""
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        # Not the API's error shape (a proxy's page, the web server's 414).
        return ApiError(
            status, "http_error", text.strip()[:200] or f"HTTP {status}", {}, retry_after
        )
    code = body["code"]
    detail = body.get("detail")
    cls = BY_CODE.get(code, ApiError)
    if code == "funds_locked":
        # The body's value is exact; the header rounds it up to whole seconds.
        exact = body.get("retry_after")
        if isinstance(exact, int | float | Decimal) and not isinstance(exact, bool) and exact >= 0:
            retry_after = float(exact)
    return cls(
        status, code, detail if isinstance(detail, str) else f"HTTP {status}", body, retry_after
    )
