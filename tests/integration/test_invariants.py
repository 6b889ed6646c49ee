"""The after-run invariants (tests/helpers/invariants.py) find what they are meant to find."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from locks import services
from locks.models import Selection
from tests.factories import make_selection, make_tokens
from tests.helpers.invariants import check_invariants
from tokens.services import TokenSpec

pytestmark = pytest.mark.django_db


def test_rows_of_a_real_run_pass():
    make_tokens(4, wallet="w", quantity=5)
    services.select_tokens("spent", "w", "USD", 5)
    services.spend_selection("spent", [TokenSpec("spent", 0, "w", "USD", 5)])
    services.select_tokens("released", "w", "USD", 5)
    services.release_selection("released")
    services.select_tokens("held", "w", "USD", 5)
    report = check_invariants(issued=Decimal(20), recorded_supply=True)
    assert report == {"selections": 3, "spent": 1, "live_locks": 1}


def test_a_second_grant_during_a_live_lease_is_found():
    """However briefly each holder says it held the token, the rows overlap."""
    (token,) = make_tokens(1, wallet="w")
    make_selection([token], "first")
    make_selection([token], "second", lock=False)
    with pytest.raises(AssertionError, match=r"first and second held token .* at once"):
        check_invariants()


def test_a_grant_after_the_lease_ran_out_is_no_overlap():
    (token,) = make_tokens(1, wallet="w")
    make_selection([token], "first", ttl=-5, lock=False)
    make_selection([token], "second")
    check_invariants()


def test_a_spend_after_its_lease_is_found():
    (token,) = make_tokens(1, wallet="w", quantity=10)
    selection = make_selection([token], "late", ttl=-5, lock=False)
    mark_spent(selection, spent_at=timezone.now())
    with pytest.raises(AssertionError, match=r"late spent at .* its lease ended"):
        check_invariants()


def test_a_token_held_after_its_spend_is_found():
    (token,) = make_tokens(1, wallet="w", quantity=10)
    first = make_selection([token], "first", ttl=-5, lock=False)
    mark_spent(first, spent_at=first.expires_at - timedelta(seconds=1))
    make_selection([token], "second", lock=False)
    with pytest.raises(AssertionError, match=r"second held token .* after first spent it"):
        check_invariants()


def test_a_spend_that_creates_value_is_found():
    (token,) = make_tokens(1, wallet="w", quantity=10)
    selection = make_selection([token], "mint", lock=False)
    mark_spent(selection, spent_at=timezone.now(), output=11)
    with pytest.raises(AssertionError, match="outputs differ from their inputs"):
        check_invariants()


def test_a_lost_value_is_found():
    make_tokens(2, wallet="w", quantity=10)
    with pytest.raises(AssertionError, match="unspent supply 20 != issued 21"):
        check_invariants(issued=Decimal(21))


def mark_spent(selection: Selection, spent_at, output: int | None = None) -> None:
    """Mark ``selection`` and its tokens spent at ``spent_at``, with one output token."""
    from tokens.models import Token

    tokens = Token.objects.filter(pk__in=selection.token_ids)
    value = sum(t.quantity for t in tokens)
    tokens.update(spent_by=selection.tx_id, spent_at=spent_at)
    Selection.objects.filter(pk=selection.pk).update(status="spent", spent_at=spent_at)
    Token.objects.create(
        tx_id=selection.tx_id,
        index=0,
        wallet=selection.wallet,
        currency=selection.currency,
        quantity=value if output is None else Decimal(output),
    )
