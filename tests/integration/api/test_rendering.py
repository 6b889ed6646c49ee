"""The API's JSON renderer writes what DRF's renderer writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import renderers

from config.renderers import JSONRenderer

DRF = renderers.JSONRenderer()
OURS = JSONRenderer()

# What answers hold: names (any Unicode, U+2028 and U+2029 included), integers of at most
# 64 bits, datetimes, booleans, None, nested in lists and objects. (Amounts are strings of
# digits; numbers with fractions are below.)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text()
    | st.sampled_from(["\u2028", "a\u2029b", "é", "\U0001f600", "</script>"])
    | st.datetimes(timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=-3))]))
)
ANSWERS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(ANSWERS)
def test_answers_are_written_byte_for_byte_as_drf_writes_them(data):
    assert OURS.render(data, "application/json") == DRF.render(data, "application/json")


@pytest.mark.parametrize(
    "data",
    [
        {"over 64 bits": 2**64},  # orjson refuses it: DRF's renderer writes it
        {1: "a key that is not a string"},
        [Decimal("1.50"), datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)],
        None,
    ],
)
def test_what_orjson_does_not_write_is_written_as_drf_writes_it(data):
    assert OURS.render(data, "application/json") == DRF.render(data, "application/json")


def test_an_indented_answer_is_indented_as_drf_indents_it():
    data = {"tokens": [{"tx_id": "t", "index": 0}]}
    wanted = "application/json; indent=4"
    assert OURS.render(data, wanted) == DRF.render(data, wanted)
    assert b"\n    " in OURS.render(data, wanted)


@settings(max_examples=100, deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(allow_nan=False, allow_infinity=False)
)
def test_numbers_with_fractions_read_back_as_drf_writes_them(number):
    # DRF's encoder turns a Decimal into a float; orjson may write a float's exponent
    # differently (1e16, not 1e+16, 0.00009999, not 9.999e-05): the same number.
    assert json.loads(OURS.render([number])) == json.loads(DRF.render([number]))
