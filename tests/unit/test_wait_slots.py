"""Each client's share of a process's wait slots (``locks.wait_slots.Slots``)."""

from __future__ import annotations

import pytest

from locks.wait_slots import Slots, client_cap


@pytest.mark.parametrize(
    "left,cap",
    [
        (0, 0),
        (1, 1),  # one slot cannot be shared
        (2, 1),
        (4, 3),
        (120, 90),
    ],
)
def test_a_client_may_hold_most_but_never_all_of_the_slots_left_to_it(left, cap):
    assert client_cap(left) == cap


def take_all(slots: Slots, client: str) -> int:
    taken = 0
    while slots.take(client):
        taken += 1
    return taken


def test_every_newcomer_finds_a_share_of_what_the_others_left():
    slots = Slots(120)
    assert [take_all(slots, c) for c in "abcd"] == [90, 23, 6, 1]
    assert not slots.take("e")  # only that many clients, each taking all it may, fill them
    slots.give_back("a")
    assert take_all(slots, "e") == 1
    assert slots.held("a") == 89 and slots.held("e") == 1


def test_a_client_alone_takes_its_share_again_once_the_others_leave():
    slots = Slots(4)
    assert take_all(slots, "a") == 3
    assert take_all(slots, "b") == 1
    for _ in range(3):
        slots.give_back("a")
    slots.give_back("b")
    assert slots.held("a") == slots.held("b") == 0
    assert take_all(slots, "b") == 3


def test_no_slots_none_taken():
    assert not Slots(0).take("a")
