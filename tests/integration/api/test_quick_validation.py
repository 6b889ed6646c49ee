"""The quick checks of request serializers agree with DRF's field-by-field validation.

``QuickSerializer.is_valid`` accepts the common valid request with plain checks and sends
everything else through DRF. Whatever the quick way accepts must be exactly what DRF would
validate it to, and the everyday requests must take the quick way.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from common.serializers import SLOW, QuickSerializer, quick
from locks.request_serializers import (
    MAX_EXTEND_SECONDS,
    MAX_WAIT_SECONDS,
    ConsolidateSelectRequestSerializer,
    ExactSelectRequestSerializer,
    ExtendSerializer,
    SelectRequestSerializer,
    SpendSerializer,
)
from sherdlock import MAX_QUANTITY
from tokens.serializers import MAX_INDEX

NAMES = st.one_of(
    st.sampled_from(
        ["alice", "w-1", "USD", " x ", "a/b", "", " ", "\x00", "é", "\u2028", "x" * 200]
    ),
    st.text(max_size=40),
    st.text(alphabet="ab/ \t\n\x7f\x85", max_size=6),
)
QUANTITIES = st.one_of(
    st.integers(0, MAX_QUANTITY + 1).map(str),
    st.sampled_from(["0", "01", "+1", "1.0", "1e3", " 1", "\u0661", str(MAX_QUANTITY), "", "-1"]),
    st.integers(-5, 5),
)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
INTEGERS = st.one_of(
    st.integers(-3, MAX_INDEX + 3),
    st.integers(MAX_INDEX - 3, MAX_INDEX + 3),
    st.sampled_from([0, 1, MAX_WAIT_SECONDS, MAX_WAIT_SECONDS + 1, MAX_EXTEND_SECONDS + 1]),
    st.sampled_from([1.0, 2.5, True, False, "1"]),
)


def value() -> st.SearchStrategy:
    return st.one_of(NAMES, QUANTITIES, INTEGERS, JUNK)


def request_of(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """Requests that carry some of ``fields`` (their own values or any), and maybe others."""
    keys = st.sampled_from([*fields, "extra"])
    junk = st.one_of(st.just({}), st.just({}), st.dictionaries(keys, value(), max_size=1))
    return junk.flatmap(
        lambda base: st.fixed_dictionaries(
            {k: s for k, s in fields.items() if k not in base},
            optional={},
        ).map(lambda filled: {**filled, **base})
    )


def mostly(valid: list, other: st.SearchStrategy) -> st.SearchStrategy:
    """Valid values three times in four, so that requests often pass as a whole."""
    return st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid), other)


NAME = mostly(["alice", "w-1", "USD", "é", "x" * 32], NAMES)
QUANTITY = mostly(["1", "20", str(MAX_QUANTITY)], QUANTITIES)
INTEGER = mostly([0, 1, 30], INTEGERS)
OUTPUT = {"index": INTEGER, "wallet": NAME, "currency": NAME, "quantity": QUANTITY}
SELECT = {"tx_id": NAME, "wallet": NAME, "currency": NAME, "quantity": QUANTITY}
SELECT_WAIT = {**SELECT, "wait": INTEGER}
STRATEGY = mostly(["random", "smallest_first", "fewest_tokens"], NAMES | st.just("exact"))
SELECT_STRATEGY = {**SELECT, "strategy": STRATEGY}
EXACT = {
    **SELECT,
    "strategy": mostly(["exact"], NAMES),
    "max_change": mostly(["0", "3", 0, "00"], QUANTITIES),
    "fallback": mostly([True, False], value()),
}
CONSOLIDATE = {
    **SELECT,
    "strategy": mostly(["consolidate"], NAMES),
    "max_tokens": INTEGER,
    "max_change": mostly(["0"], QUANTITIES),
}
ITEM = request_of(OUTPUT)
OUTPUTS = st.lists(st.one_of(ITEM, ITEM, ITEM, value()), min_size=0, max_size=4)


def drf(cls: type[QuickSerializer], data: object) -> tuple[bool, object]:
    """Validate ``data`` the whole DRF way, bypassing the quick checks."""
    serializer = cls(data=data)
    valid = serializers.Serializer.is_valid(serializer)
    return valid, serializer.validated_data if valid else serializer.errors


def assert_agrees(cls: type[QuickSerializer], data: object) -> object:
    quick_value = quick(cls(data=data), data)
    valid, validated = drf(cls, data)
    if quick_value is not SLOW:
        assert valid, (data, validated)
        assert quick_value == validated
    return quick_value


COMMON = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(st.one_of(request_of(SELECT), request_of(SELECT_WAIT), request_of(SELECT_STRATEGY), value()))
def test_select_request(data):
    assert_agrees(SelectRequestSerializer, data)


@COMMON
@given(st.one_of(request_of(EXACT), value()))
def test_exact_select_request(data):
    assert_agrees(ExactSelectRequestSerializer, data)


@COMMON
@given(st.one_of(request_of(CONSOLIDATE), value()))
def test_consolidate_select_request(data):
    assert_agrees(ConsolidateSelectRequestSerializer, data)


@COMMON
@given(st.one_of(st.fixed_dictionaries({"outputs": OUTPUTS}), request_of({"outputs": OUTPUTS})))
def test_spend_request(data):
    assert_agrees(SpendSerializer, data)


@COMMON
@given(st.one_of(request_of({"seconds": INTEGER}), value()))
def test_extend_request(data):
    assert_agrees(ExtendSerializer, data)


OUTPUT_ITEM = {"index": 0, "wallet": "bob", "currency": "USD", "quantity": "7"}


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (
            SelectRequestSerializer,
            {"tx_id": "t", "wallet": "w", "currency": "USD", "quantity": "5"},
        ),
        (
            SelectRequestSerializer,
            {"tx_id": "t", "wallet": "w", "currency": "USD", "quantity": "5", "wait": 3},
        ),
        (
            SelectRequestSerializer,
            {"tx_id": "t", "wallet": "w", "currency": "USD", "quantity": "5", "strategy": "random"},
        ),
        (
            ExactSelectRequestSerializer,
            {"tx_id": "t", "wallet": "w", "currency": "USD", "quantity": "5", "strategy": "exact"},
        ),
        (SpendSerializer, {"outputs": [OUTPUT_ITEM, {**OUTPUT_ITEM, "index": 1}]}),
        (ExtendSerializer, {}),
        (ExtendSerializer, {"seconds": 30}),
    ],
)
def test_everyday_requests_take_the_quick_way(cls, data):
    assert assert_agrees(cls, data) is not SLOW
    serializer = cls(data=data)
    assert serializer.is_valid()
    assert "fields" not in serializer.__dict__  # DRF never built its fields


@pytest.mark.parametrize(
    ("cls", "data", "field"),
    [
        (SelectRequestSerializer, {"tx_id": "t", "wallet": "w", "currency": "USD"}, "quantity"),
        (
            SelectRequestSerializer,
            {"tx_id": "a/b", "wallet": "w", "currency": "USD", "quantity": "5"},
            "tx_id",
        ),
        (SpendSerializer, {"outputs": [OUTPUT_ITEM, OUTPUT_ITEM]}, "outputs"),
        (ExtendSerializer, {"seconds": 0}, "seconds"),
    ],
)
def test_refused_requests_get_drf_errors(cls, data, field):
    serializer = cls(data=data)
    assert not serializer.is_valid()
    assert field in serializer.errors
