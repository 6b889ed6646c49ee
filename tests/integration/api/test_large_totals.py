"""The largest selections the limits allow: totals of many tokens of the largest quantity."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from locks.models import Selection, TokenLock
from sherdlock.strategies import MAX_TOKENS
from tests.factories import make_tokens
from tests.helpers.api import counts, issue, output, spend, token
from tokens.models import Token

pytestmark = pytest.mark.django_db

URL = "/api/v1/selections/"
LARGEST = 2**64 - 1


def fund(client, count: int, currency: str = "USD", first: int = 0) -> None:
    """Issue ``count`` tokens of the largest quantity to alice, in batches the API accepts."""
    for start in range(0, count, 500):
        batch = range(first + start, first + min(start + 500, count))
        issue(client, *[token("m", i, currency=currency, quantity=str(LARGEST)) for i in batch])


def change_outputs(count: int, currency: str = "USD", first: int = 0) -> list[dict]:
    """Return outputs that pay a total of ``count`` largest tokens back, one output each."""
    return [output(first + i, "bob", str(LARGEST), currency) for i in range(count)]


def test_consolidating_sixty_of_the_largest_tokens_answers_their_exact_total(api):
    fund(api, 60)
    body = {"tx_id": "tx", "wallet": "alice", "currency": "USD", "quantity": "1"}
    response = api.post(URL, {**body, "strategy": "consolidate"}, format="json")
    assert response.status_code == 201, response.json()
    selected = response.json()
    assert (selected["total"], selected["inputs"]) == (str(60 * LARGEST), 60)
    assert selected["change"] == str(60 * LARGEST - 1)
    assert Selection.objects.get().total == 60 * LARGEST
    assert api.get(f"{URL}tx/").json()["total"] == str(60 * LARGEST)
    spent = spend(api, "tx", change_outputs(60)).json()
    assert spent["status"] == "spent" and len(spent["outputs"]) == 60
    assert TokenLock.objects.count() == 0


def test_the_most_tokens_a_selection_may_take_of_the_largest_quantity_fit(api):
    fund(api, MAX_TOKENS)
    terms = {"strategy": "consolidate", "max_tokens": MAX_TOKENS}
    body = {"tx_id": "tx", "wallet": "alice", "currency": "USD", "quantity": "1", **terms}
    response = api.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["total"] == str(MAX_TOKENS * LARGEST)
    spend(api, "tx", change_outputs(MAX_TOKENS))
    assert Token.objects.filter(wallet="bob").count() == MAX_TOKENS
    assert counts()[2] == 0


def test_a_consolidating_leg_of_the_largest_tokens_answers_its_exact_total(api):
    fund(api, 60)
    fund(api, 60, currency="EUR", first=60)
    legs = [{"currency": "USD", "quantity": "1"}, {"currency": "EUR", "quantity": "1"}]
    body = {"tx_id": "tx", "wallet": "alice", "legs": legs, "strategy": "consolidate"}
    response = api.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    totals = {leg["currency"]: leg["total"] for leg in response.json()["legs"]}
    assert totals == {"EUR": str(60 * LARGEST), "USD": str(60 * LARGEST)}
    outputs = change_outputs(60) + change_outputs(60, currency="EUR", first=60)
    assert spend(api, "tx", outputs).json()["status"] == "spent"


def test_seeded_selections_take_no_more_tokens_than_a_selection_may():
    make_tokens(2, quantity=LARGEST)
    with pytest.raises(CommandError, match="at most"):
        call_command("seed_locks", "--count", "2", "--tokens-per-tx", str(MAX_TOKENS + 1))
    assert counts()[1:] == (0, 0)
