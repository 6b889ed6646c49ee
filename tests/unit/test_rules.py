"""The patterns the schema publishes mean what the server checks."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from common.rules import BLANK_CHARS, CONTROL_CHARS, QUANTITY_PATTERN, at_most, is_identifier
from sherdlock import MAX_QUANTITY


def in_range(text: str, limit: int) -> bool:
    return text.isascii() and text.isdigit() and not text.startswith("0") and int(text) <= limit


@given(limit=st.integers(1, 10**25), number=st.integers(0, 10**26))
def test_at_most_matches_exactly_the_numbers_up_to_the_limit(limit, number):
    pattern = re.compile(at_most(limit))
    for text in (str(number), str(limit), str(limit + 1), str(limit - 1), f"0{number}"):
        assert bool(pattern.fullmatch(text)) == in_range(text, limit), (limit, text)


def test_the_quantity_pattern_spans_1_to_2_64_minus_1():
    pattern = re.compile(QUANTITY_PATTERN)
    for text in ("1", "9", str(MAX_QUANTITY), str(MAX_QUANTITY - 1), "10000000000000000000"):
        assert pattern.fullmatch(text), text
    for text in ("0", "00", "01", str(MAX_QUANTITY + 1), "9" * 20, "1" + "0" * 20, "-1", ""):
        assert not pattern.fullmatch(text), text


def test_the_blank_class_is_every_whitespace_that_is_not_a_control_character():
    forbidden, blank = re.compile(f"[{CONTROL_CHARS}]"), re.compile(f"[{BLANK_CHARS}]")
    for code in range(0x110000):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF or forbidden.match(char):
            continue
        assert bool(blank.match(char)) == char.isspace(), hex(code)


@given(st.text(max_size=12))
def test_a_name_is_what_the_rule_says(text):
    expected = (
        0 < len(text) <= 128
        and not text.isspace()
        and not any(
            ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0xD800 <= ord(c) <= 0xDFFF for c in text
        )
    )
    assert is_identifier(text) == expected
    assert is_identifier(text, path=True) == (expected and "/" not in text)
