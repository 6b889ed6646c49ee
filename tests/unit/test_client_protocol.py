"""The client's protocol rules without a server: error codes, retry decisions, answer framing."""

from __future__ import annotations

import random

import pytest
from sherdlock_client import (
    BY_CODE,
    AnswerLost,
    ApiError,
    DatabaseUnavailable,
    FundsLocked,
    InsufficientFunds,
    Invalid,
    RateLimited,
    RetryPolicy,
    Unreachable,
)
from sherdlock_client._http import CHUNKED, Answer, framing, parse_head, refusal
from sherdlock_client.models import quantity
from sherdlock_client.retries import Attempts


def test_every_error_code_of_the_api_has_its_class():
    from config.exceptions import ERRORS, SERVER_ERROR

    table = {(error.status, error.code) for error in [*ERRORS.values(), SERVER_ERROR]}
    for status, code in table:
        cls = BY_CODE[code]
        assert (cls.__doc__ or "").startswith(f"{status} {code}"), cls
    assert set(BY_CODE) == {code for _, code in table}


def error_answer(status: int, body: bytes, **fields: str) -> Answer:
    return Answer(status, fields, body)


def test_an_error_answer_becomes_its_class_with_the_servers_words():
    body = b'{"code":"funds_locked","detail":"held","fields":{},"available":"7","retry_after":0.25}'
    error = refusal(error_answer(409, body, **{"retry-after": "1"}))
    assert isinstance(error, FundsLocked) and isinstance(error, InsufficientFunds)
    assert (error.status, error.code, error.detail, error.available) == (
        409,
        "funds_locked",
        "held",
        7,
    )
    assert error.retry_after == 0.25  # the body's exact hint, not the header's whole seconds
    invalid = refusal(error_answer(400, b'{"code":"invalid","detail":"x","fields":{"q":["bad"]}}'))
    assert isinstance(invalid, Invalid) and invalid.fields == {"q": ["bad"]}
    page = refusal(error_answer(502, b"<html>bad gateway</html>"))
    assert type(page) is ApiError and page.status == 502 and "bad gateway" in page.detail


def test_an_answer_is_framed_by_length_or_chunks():
    answer = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close")
    assert (answer.status, framing(answer, "POST"), answer.keep_alive) == (200, 12, False)
    chunked = parse_head(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked")
    assert framing(chunked, "POST") == CHUNKED and chunked.keep_alive


def test_quantities_are_whole_and_exact():
    assert quantity(2**64 - 1) == "18446744073709551615"
    assert quantity("18446744073709551615") == "18446744073709551615"
    for bad in ("1.5", -1, True, 1.0):
        with pytest.raises((ValueError, TypeError)):
            quantity(bad)  # type: ignore[arg-type]


def attempts(idempotent: bool, **policy) -> Attempts:
    return Attempts(
        RetryPolicy(**policy),
        "POST",
        "/api/v1/selections/",
        idempotent=idempotent,
        now=0.0,
        rng=random.Random(1),
    )


def limited(status: int, retry_after: float) -> ApiError:
    cls = RateLimited if status == 429 else DatabaseUnavailable
    return cls(status, cls.__name__, "busy", {}, retry_after)


def test_429_and_503_wait_their_retry_after_with_jitter_until_the_deadline():
    calls = attempts(True, retry_for=10.0, jitter=0.25)
    assert 3.0 <= calls.after(limited(429, 3), now=0.0) <= 3.75
    assert 2.0 <= calls.after(limited(503, 2), now=4.0) <= 2.5
    with pytest.raises(RateLimited):
        calls.after(limited(429, 5), now=6.0)  # would start after the deadline


def test_a_lost_answer_is_retried_only_when_the_call_is_idempotent():
    assert attempts(True).after(AnswerLost("dropped"), now=0.0) == 0.0
    with pytest.raises(AnswerLost):
        attempts(False).after(AnswerLost("dropped"), now=0.0)
    # Nothing was sent: any call may be retried.
    assert attempts(False).after(Unreachable("refused"), now=0.0) == 0.0


def test_funds_locked_is_retried_only_when_the_caller_asks():
    locked = FundsLocked(409, "funds_locked", "held", {}, 0.5)
    with pytest.raises(FundsLocked):
        attempts(True).after(locked, now=0.0)
    calls = Attempts(RetryPolicy(), "POST", "/", idempotent=True, now=0.0, retry_locked_for=5.0)
    assert 0.25 <= calls.after(locked, now=0.0) <= 0.75


def test_retries_stop_at_the_most_attempts():
    calls = attempts(True, attempts=3)
    calls.after(AnswerLost("1"), now=0.0)
    calls.after(AnswerLost("2"), now=0.0)
    with pytest.raises(AnswerLost):
        calls.after(AnswerLost("3"), now=0.0)
