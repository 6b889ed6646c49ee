"""Errors as the Sherdlock API answers them, for its HTTP client (``sherdlock.client``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import FundsLocked, InsufficientFunds, NoExactMatch, SherdlockError, TooManyInputs
from .types import WalletKey

# Without a Retry-After header, wait this long before retrying locked funds.
DEFAULT_RETRY_AFTER = 1.0


class ClientError(SherdlockError):
    """The Sherdlock API refused the request or could not be reached."""

    def __init__(
        self,
        status: int | None,
        code: str,
        detail: str,
        fields: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        body: Mapping[str, Any] | None = None,
    ):
        super().__init__(f"{status or 'no answer'} {code}: {detail}")
        self.status = status  # None when no HTTP answer arrived
        self.code = code
        self.detail = detail
        self.fields = dict(fields or {})
        self.retry_after = retry_after
        self.body = dict(body or {})  # the whole error document, extra keys included


class _Answer:
    """The HTTP status and error code of the API's answer, as ``ClientError`` has them."""

    status: int | None
    code: str


class AnsweredInsufficientFunds(_Answer, InsufficientFunds):
    """``InsufficientFunds`` as the API answered it."""


class AnsweredFundsLocked(_Answer, FundsLocked):
    """``FundsLocked`` as the API answered it."""


class AnsweredNoExactMatch(_Answer, NoExactMatch):
    """``NoExactMatch`` as the API answered it."""


class AnsweredTooManyInputs(_Answer, TooManyInputs):
    """``TooManyInputs`` as the API answered it."""


# The strategies' refusals, by code.
NO_MATCH: dict[str, tuple[type[AnsweredNoExactMatch | AnsweredTooManyInputs], str]] = {
    "no_exact_match": (AnsweredNoExactMatch, "exact"),
    "max_tokens_exceeded": (AnsweredTooManyInputs, "consolidate"),
}


def _whole(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def selector_error(exc: ClientError, key: WalletKey, requested: int) -> SherdlockError:
    """Return the core's error an API error answer means, else the answer itself."""
    available = _whole(exc.body.get("available"))  # None when the server does not say
    error: SherdlockError
    if exc.code in NO_MATCH:
        cls, name = NO_MATCH[exc.code]
        error = cls(key, requested, name)
    elif exc.code == "insufficient_funds":
        error = AnsweredInsufficientFunds(key, requested, available)
    elif exc.code == "funds_locked":
        retry = exc.retry_after if exc.retry_after is not None else DEFAULT_RETRY_AFTER
        error = AnsweredFundsLocked(key, requested, available, retry)
    else:
        return exc
    error.args = (exc.detail,)  # the server's words, not a guess at the numbers
    assert isinstance(error, _Answer)
    error.status, error.code = exc.status, exc.code
    return error
