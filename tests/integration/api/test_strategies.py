"""POST /api/v1/selections/ with a strategy: what each locks, its answers, its bad input."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from locks.models import FailedSelection, Selection, TokenLock
from tests.helpers.api import counts, issue, output, spend, token

pytestmark = pytest.mark.django_db

URL = "/api/v1/selections/"


def choose(client, tx_id: str, quantity: str, expect: int | None = 201, **terms):
    body = {"tx_id": tx_id, "wallet": "alice", "currency": "USD", "quantity": quantity, **terms}
    response = client.post(URL, body, format="json")
    if expect is not None:
        assert response.status_code == expect, response.json()
    return response


def quantities(response) -> list[str]:
    return sorted((t["quantity"] for t in response.json()["tokens"]), key=int)


@pytest.fixture
def small_and_large(api):
    issue(api, token("m", 0, quantity="1"), token("m", 1, quantity="200"))
    return api


@pytest.mark.parametrize("strategy", ["smallest_first", "exact"])
def test_a_small_payment_takes_the_small_token(small_and_large, strategy):
    body = choose(small_and_large, "tx", "1", strategy=strategy).json()
    assert [t["quantity"] for t in body["tokens"]] == ["1"]
    assert (body["change"], body["inputs"], body["strategy"]) == ("0", 1, strategy)
    assert Selection.objects.get(tx_id="tx").strategy == strategy
    assert TokenLock.objects.get().quantity == 1


def test_fewest_tokens_takes_the_large_token(small_and_large):
    body = choose(small_and_large, "tx", "1", strategy="fewest_tokens").json()
    assert (body["change"], body["inputs"]) == ("199", 1)


def test_the_default_is_random_and_says_so(small_and_large):
    body = choose(small_and_large, "tx", "150").json()
    assert body["strategy"] == "random" and body["inputs"] == len(body["tokens"])
    assert Selection.objects.get().strategy == "random"


def test_exact_answers_no_exact_match_unless_it_may_fall_back(api):
    issue(api, token("m", 0, quantity="7"), token("m", 1, quantity="12"))
    body = choose(api, "tx", "10", expect=409, strategy="exact").json()
    assert body["code"] == "no_exact_match"
    assert counts()[1:] == (0, 0)
    failed = FailedSelection.objects.get()
    assert (failed.outcome, failed.strategy) == ("no_match", "exact")
    body = choose(api, "tx", "10", strategy="exact", max_change="2").json()
    assert (body["total"], body["change"]) == ("12", "2")
    body = choose(api, "tx-2", "5", strategy="exact", fallback=True).json()
    assert body["strategy"] == "random" and body["total"] == "7"


def test_an_exact_selection_spends_and_releases_like_any(api):
    issue(api, *[token("m", i, quantity=q) for i, q in enumerate(["5", "3", "9", "4"])])
    body = choose(api, "tx", "12", strategy="exact").json()
    assert body["total"] == "12"
    spent = spend(api, "tx", [output(0, "bob", "12")]).json()
    assert spent["strategy"] == "exact" and spent["status"] == "spent"
    assert api.get(f"{URL}tx/").json()["strategy"] == "exact"


def test_consolidate_sweeps_small_tokens_within_max_tokens(api):
    issue(api, *[token("m", i, quantity=q) for i, q in enumerate(["1", "2", "1", "50", "3"])])
    response = choose(api, "tx", "2", strategy="consolidate", max_tokens=4)
    assert quantities(response) == ["1", "1", "2", "3"]
    api.post(f"{URL}tx/release/")
    body = choose(api, "tx-2", "54", expect=409, strategy="consolidate", max_tokens=2).json()
    assert body["code"] == "max_tokens_exceeded"
    assert TokenLock.objects.count() == 0


@pytest.mark.parametrize(
    "terms, field",
    [
        ({"strategy": "cheapest"}, "strategy"),
        ({"strategy": 3}, "strategy"),
        ({"max_change": "1"}, "max_change"),
        ({"strategy": "smallest_first", "max_tokens": 3}, "max_tokens"),
        ({"strategy": "exact", "max_tokens": 3}, "max_tokens"),
        ({"strategy": "consolidate", "max_change": "0"}, "max_change"),
        ({"strategy": "consolidate", "fallback": True}, "fallback"),
        ({"strategy": "exact", "max_change": "-1"}, "max_change"),
        ({"strategy": "exact", "max_change": 5}, "max_change"),
        ({"strategy": "exact", "max_change": "18446744073709551616"}, "max_change"),
        ({"strategy": "exact", "fallback": "true"}, "fallback"),
        ({"strategy": "consolidate", "max_tokens": 0}, "max_tokens"),
        ({"strategy": "consolidate", "max_tokens": 1001}, "max_tokens"),
        ({"strategy": "consolidate", "max_tokens": "5"}, "max_tokens"),
    ],
)
def test_bad_terms_are_refused_before_anything_is_locked(small_and_large, terms, field):
    before = counts()
    body = choose(small_and_large, "tx", "1", expect=400, **terms).json()
    assert body["code"] == "invalid" and field in body["fields"], body
    assert counts() == before and not FailedSelection.objects.exists()


def test_edge_terms_are_accepted(small_and_large):
    choose(small_and_large, "a", "1", strategy="exact", max_change="18446744073709551615")
    choose(small_and_large, "b", "1", strategy="consolidate", max_tokens=1000)


@pytest.mark.django_db(transaction=True)
def test_statements_per_strategy(small_and_large):
    # Ordered strategies lock in one statement (which takes the rate limit's units), as random
    # does; choosing ones read a window first.
    expected = {"smallest_first": 1, "fewest_tokens": 1, "exact": 2, "consolidate": 2}
    for n, (strategy, statements) in enumerate(expected.items()):
        with CaptureQueriesContext(connection) as captured:
            choose(small_and_large, f"tx-{n}", "1", strategy=strategy)
        assert len(captured) == statements, [q["sql"][:80] for q in captured]
        small_and_large.post(f"{URL}tx-{n}/release/")
