"""POST/GET /api/v1/tokens/: issuing (idempotent, atomic) and listing (filtered, paginated)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.factories import make_token
from tests.helpers.api import counts, issue, token
from tokens.models import Token

pytestmark = pytest.mark.django_db

URL = "/api/v1/tokens/"


def test_issue_creates_tokens_and_returns_them_with_string_quantities(api):
    big = str(2**64 - 1)
    response = issue(api, token("mint", 0, quantity="100"), token("mint", 1, "bob", "EUR", big))
    body = response.json()
    assert body["created"] == 2
    assert [
        (t["tx_id"], t["index"], t["wallet"], t["currency"], t["quantity"], t["spent"])
        for t in body["tokens"]
    ] == [("mint", 0, "alice", "USD", "100", False), ("mint", 1, "bob", "EUR", big, False)]
    stored = Token.objects.get(tx_id="mint", index=1)
    assert stored.quantity == Decimal(2**64 - 1)


def test_resending_identical_tokens_is_a_no_op_answering_200(api):
    issue(api, token("mint", 0))
    again = issue(api, token("mint", 0), expect=200)
    assert again.json()["created"] == 0
    assert Token.objects.count() == 1


def test_a_batch_with_anything_new_answers_201_and_counts_only_the_new(api):
    issue(api, token("mint", 0))
    response = issue(api, token("mint", 0), token("mint", 1), expect=201)
    assert response.json()["created"] == 1
    assert Token.objects.count() == 2


def test_same_identity_different_content_is_a_conflict_and_writes_nothing(api):
    issue(api, token("mint", 0, quantity="100"))
    before = counts()
    response = issue(api, token("mint", 5), token("mint", 0, quantity="101"), expect=409)
    assert response.json()["code"] == "token_conflict"
    assert response.json()["fields"] == {}
    assert counts() == before
    assert not Token.objects.filter(tx_id="mint", index=5).exists()


def test_duplicate_identities_within_one_request_are_refused(api):
    response = issue(api, token("mint", 0), token("mint", 0, quantity="7"), expect=400)
    assert response.json()["code"] == "invalid"
    assert "tokens" in response.json()["fields"]
    assert Token.objects.count() == 0


@pytest.mark.parametrize("size, status", [(0, 400), (1000, 201), (1001, 400)])
def test_a_batch_holds_1_to_1000_tokens(api, size, status):
    response = issue(api, *[token("mint", i) for i in range(size)], expect=status)
    assert Token.objects.count() == (size if status == 201 else 0)
    if status == 400:
        assert response.json()["code"] == "invalid"


def test_list_filters_by_wallet_currency_and_spent(api):
    make_token("alice", "USD", 1, tx_id="a-usd")
    make_token("alice", "EUR", 2, tx_id="a-eur")
    make_token("bob", "USD", 3, tx_id="b-usd")
    spent = make_token("alice", "USD", 4, tx_id="a-spent")
    Token.objects.filter(pk=spent.pk).update(spent_by="x", spent_at=spent.created_at)

    def ids(query: str) -> set[str]:
        response = api.get(f"{URL}?{query}")
        assert response.status_code == 200, response.json()
        return {t["tx_id"] for t in response.json()["results"]}

    assert ids("wallet=alice") == {"a-usd", "a-eur", "a-spent"}
    assert ids("wallet=alice&currency=USD") == {"a-usd", "a-spent"}
    assert ids("wallet=alice&spent=false") == {"a-usd", "a-eur"}
    assert ids("spent=true") == {"a-spent"}
    assert ids("currency=USD") == {"a-usd", "b-usd", "a-spent"}


def test_an_unknown_spent_value_is_an_error_not_ignored(api):
    response = api.get(f"{URL}?spent=maybe")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "spent" in response.json()["fields"]


def test_list_pages_with_a_cursor_newest_first(api):
    for i in range(5):
        make_token("alice", tx_id=f"t{i}")
    first = api.get(f"{URL}?page_size=2").json()
    assert [t["tx_id"] for t in first["results"]] == ["t4", "t3"]
    second = api.get(first["next"]).json()
    assert [t["tx_id"] for t in second["results"]] == ["t2", "t1"]
    third = api.get(second["next"]).json()
    assert [t["tx_id"] for t in third["results"]] == ["t0"]
    assert third["next"] is None


def test_a_forged_cursor_is_a_404(api):
    response = api.get(f"{URL}?cursor=garbage")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
