"""A target as the report records, judges and prints it."""

from __future__ import annotations

from bench.render import target_lines
from bench.target_record import target


def judged(value: float) -> dict:
    return target("selection", "selections/s >= 1.0x", "spread", 8, value, 1.0, at_least=True)


def test_a_target_is_judged_on_the_value_it_records():
    assert (judged(0.99949)["value"], judged(0.99949)["met"]) == (0.999, False)
    # Recorded as 1.0, so met: the report never prints a met value beside "NOT MET".
    assert (judged(0.99951)["value"], judged(0.99951)["met"]) == (1.0, True)


def test_a_target_prints_the_value_it_was_judged_on():
    [line] = target_lines([judged(0.99949)])[2:]
    assert "NOT MET" in line and ": 0.999 (threshold 1.0)" in line
    [line] = target_lines([judged(1.0004)])[2:]
    assert "MET" in line and "NOT" not in line and ": 1.000 (threshold 1.0)" in line
