"""The answers' written-out representations equal DRF's field-by-field ones.

The selection serializers write their ``to_representation`` out so that answering builds no
fields; the declared fields still document the schema. Both must say the same thing.
"""

from __future__ import annotations

import pytest
from rest_framework import serializers

from locks import replica
from locks.models import Selection
from locks.serializers import (
    OutputTokenSerializer,
    SelectedTokenSerializer,
    SelectionSerializer,
    SpendResultSerializer,
    selection_body,
    spend_body,
)
from locks.services import (
    get_selection,
    release_selection,
    select_tokens,
    spend_selection,
)
from tests.factories import make_tokens
from tokens.models import Token
from tokens.services import TokenSpec

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_replica():
    replica.reset()
    yield
    replica.reset()


def by_fields(serializer_class, instance) -> dict:
    """Render ``instance`` with the serializer's declared and model fields, as DRF does."""
    return dict(serializers.Serializer.to_representation(serializer_class(), instance))


def selections() -> dict[str, Selection]:
    make_tokens(6, wallet="alice", quantity=7)
    answered: dict[str, Selection] = {}
    answered["locked, as selected"], _ = select_tokens("t-locked", "alice", "USD", 10)
    answered["locked, as read"] = get_selection("t-locked")
    select_tokens("t-released", "alice", "USD", 3)
    answered["released"] = release_selection("t-released").selection
    selected, _ = select_tokens("t-spent", "alice", "USD", 5)
    total = int(selected.total)
    outcome = spend_selection(
        "t-spent",
        [
            TokenSpec("t-spent", 0, "bob", "USD", 5),
            TokenSpec("t-spent", 1, "alice", "USD", total - 5),
        ],
    )
    answered["spent, as answered"] = outcome.selection
    answered["spent, as read"] = get_selection("t-spent")
    return answered


def test_selection_answers_match_the_field_by_field_rendering():
    for situation, selection in selections().items():
        # Spends answer with their outputs; every other answer is a plain selection.
        spent = situation.startswith("spent")
        serializer_class = SpendResultSerializer if spent else SelectionSerializer
        written = dict(serializer_class(selection).data)
        assert written == by_fields(serializer_class, selection), situation
        # The views answer through one shared serializer; it says the same.
        assert (spend_body if spent else selection_body)(selection) == written, situation
        assert written["tokens"], situation  # the comparison saw tokens
        assert not spent or written["outputs"], situation  # and outputs


def test_token_answers_match_the_field_by_field_rendering():
    make_tokens(2, wallet="carol", quantity=2**64 - 1)
    for token in Token.objects.filter(wallet="carol"):
        for serializer_class in (SelectedTokenSerializer, OutputTokenSerializer):
            assert serializer_class(token).data == by_fields(serializer_class, token)


def test_times_follow_the_current_time_zone_as_drf_does():
    from django.utils import timezone

    selection = selections()["spent, as read"]
    with timezone.override("America/Sao_Paulo"):
        written = dict(SelectionSerializer(selection).data)
        assert written == by_fields(SelectionSerializer, selection)
    assert written["created_at"].endswith("-03:00")


def test_the_largest_quantities_are_answered_exactly():
    """Select, release, select again and spend a token of 2**64-1: every answer, read from
    each statement's JSON, names it exactly."""
    big = 2**64 - 1
    make_tokens(2, wallet="dave", quantity=big)
    selected, _ = select_tokens("t-big", "dave", "USD", big)
    released = release_selection("t-big").selection
    select_tokens("t-big-2", "dave", "USD", big)
    spent = spend_selection("t-big-2", [TokenSpec("t-big-2", 0, "erin", "USD", big)]).selection
    for answer in (selection_body(selected), selection_body(released), spend_body(spent)):
        assert answer["total"] == str(big)
        assert [token["quantity"] for token in answer["tokens"]] == [str(big)]
    assert [output["quantity"] for output in spend_body(spent)["outputs"]] == [str(big)]
