"""Hostile requests: deep nesting, oversized bodies, forged cursors, bad query parameters.

Each is a 4xx in the one error shape and writes nothing.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.factories import make_lock, make_token
from tests.helpers.api import counts, issue, output, select, token

pytestmark = pytest.mark.django_db

POSTS = [
    "/api/v1/tokens/",
    "/api/v1/selections/",
    "/api/v1/selections/pay/spend/",
    "/api/v1/selections/pay/extend/",
]
LISTS = ["/api/v1/tokens/", "/api/v1/selections/", "/api/v1/locks/"]


@pytest.fixture
def selected(api):
    issue(api, token("m", 0, quantity="80"))
    select(api, "pay", "80")
    return api


def post_raw(client, url: str, body: str | bytes):
    return client.post(url, body, content_type="application/json")


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:500]
    payload = response.json()
    assert payload["code"] == code
    assert set(payload) >= {"code", "detail", "fields"}
    return payload


@pytest.mark.parametrize("url", POSTS)
@pytest.mark.parametrize(
    "body",
    [
        "[" * 1000,
        "[" * 1000 + "]" * 1000,
        "[" * 100_000,
        '{"a":' * 1000 + "1" + "}" * 1000,
        '{"tokens": ' + "[" * 5000 + "]" * 5000 + "}",
    ],
    ids=["open-1000", "closed-1000", "open-100000", "objects-1000", "inside-a-field"],
)
def test_deeply_nested_json_is_malformed_json(selected, url, body):
    before = counts()
    assert_error(post_raw(selected, url, body), 400, "malformed_json")
    assert counts() == before


@pytest.mark.parametrize("url", POSTS)
def test_nesting_the_parser_accepts_is_still_refused_as_invalid(selected, url):
    before = counts()
    assert_error(post_raw(selected, url, "[" * 900 + "]" * 900), 400, "invalid")
    assert counts() == before


@pytest.mark.parametrize(
    "body",
    [b'{"tokens": "\xff\xfe"}', b"NaN", b'{"a": Infinity}'],
    ids=["not-utf8", "nan", "infinity"],
)
def test_other_unparseable_bodies_are_malformed_json(selected, body):
    assert_error(post_raw(selected, "/api/v1/tokens/", body), 400, "malformed_json")


@pytest.mark.parametrize("url", POSTS)
def test_a_body_over_the_limit_is_413_and_not_read(selected, settings, url):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    before = counts()
    body = json.dumps({"tokens": [token("big", i) for i in range(40)]})
    assert len(body) > 2000
    assert_error(post_raw(selected, url, body), 413, "request_too_large")
    assert counts() == before


def test_the_largest_legitimate_issue_fits_the_default_limit(api, make_key, client_for):
    wallet = "w" * 128
    _, raw = make_key(wallets=[wallet])
    tokens = [
        {
            "tx_id": f"{i:0>128}",
            "index": 2**31 - 1,
            "wallet": wallet,
            "currency": "C" * 32,
            "quantity": str(2**64 - 1),
        }
        for i in range(1000)
    ]
    response = client_for(raw).post("/api/v1/tokens/", {"tokens": tokens}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["created"] == 1000


def test_an_anonymous_oversized_body_is_refused_before_it_is_read(anon, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = post_raw(anon, "/api/v1/tokens/", "[" * 1000)
    assert_error(response, 401, "not_authenticated")


def forged(query: str) -> str:
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "cursor",
    [
        forged("p=abc"),
        forged("p="),
        forged("p=1.5"),
        forged("p=-1"),
        forged("p= 1"),
        forged("p=" + "9" * 30),
        forged("p=9223372036854775808"),
        forged("r=x&p=1"),
        forged("o=-1&p=1"),
        "garbage",
        "\u00e9t\u00e9",
    ],
)
def test_a_forged_cursor_is_404_on_every_listing(api, url, cursor):
    make_lock(make_token("alice", tx_id="t"), "s")
    response = api.get(url, {"cursor": cursor})
    assert_error(response, 404, "not_found")


@pytest.mark.parametrize("url", LISTS)
def test_a_cursor_the_server_wrote_still_pages(api, url):
    for i in range(3):
        make_token("alice", quantity=1, tx_id=f"t{i}")
    for i in range(3):
        select(api, f"sel-{i}", "1")
    first = api.get(url, {"page_size": "1"})
    assert first.status_code == 200, first.json()
    second = api.get(first.json()["next"])
    assert second.status_code == 200 and len(second.json()["results"]) == 1


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "size", ["0", "1001", "-1", "abc", "", "1.5", " 5", "5 ", "+5", "99999999999", "\u0665"]
)
def test_page_size_outside_1_to_1000_is_400(api, url, size):
    payload = assert_error(api.get(url, {"page_size": size}), 400, "invalid")
    assert "page_size" in payload["fields"]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("size", ["1", "1000", "0010"])
def test_page_size_within_bounds_is_used(api, url, size):
    assert api.get(url, {"page_size": size}).status_code == 200


@pytest.mark.parametrize(
    "url, name, value",
    [
        ("/api/v1/tokens/", "spent", ""),
        ("/api/v1/tokens/", "spent", "True"),
        ("/api/v1/selections/", "status", ""),
        ("/api/v1/selections/", "status", "LOCKED"),
        ("/api/v1/locks/", "state", ""),
        ("/api/v1/locks/", "state", "alive"),
        ("/api/v1/tokens/", "wallet", ""),
        ("/api/v1/tokens/", "wallet", "a\tb"),
        ("/api/v1/tokens/", "wallet", "   "),
        ("/api/v1/tokens/", "currency", ""),
        ("/api/v1/tokens/", "currency", "C" * 33),
        ("/api/v1/selections/", "wallet", ""),
        ("/api/v1/selections/", "currency", "\u0085"),
        ("/api/v1/locks/", "spender_tx_id", ""),
        ("/api/v1/locks/", "spender_tx_id", "x" * 129),
        ("/api/v1/locks/", "wallet", ""),
        ("/api/v1/wallets/alice/balances/", "currency", ""),
        ("/api/v1/wallets/alice/balances/", "currency", "\u2003"),
    ],
)
def test_a_given_filter_must_be_valid_never_ignored(api, url, name, value):
    payload = assert_error(api.get(url, {name: value}), 400, "invalid")
    assert name in payload["fields"]


def test_empty_outputs_are_invalid_not_a_conservation_error(selected):
    before = counts()
    response = selected.post("/api/v1/selections/pay/spend/", {"outputs": []}, format="json")
    payload = assert_error(response, 400, "invalid")
    assert "outputs" in payload["fields"]
    assert counts() == before


@pytest.mark.parametrize("quantity", ["01", "007", "0" * 30 + "1"])
def test_quantities_with_leading_zeros_are_refused(selected, quantity):
    before = counts()
    response = selected.post(
        "/api/v1/tokens/", {"tokens": [token("z", quantity=quantity)]}, format="json"
    )
    assert "tokens.0.quantity" in assert_error(response, 400, "invalid")["fields"]
    response = selected.post(
        "/api/v1/selections/pay/spend/", {"outputs": [output(0, "bob", quantity)]}, format="json"
    )
    assert "outputs.0.quantity" in assert_error(response, 400, "invalid")["fields"]
    assert counts() == before


@pytest.mark.parametrize(
    "url, query",
    [
        ("/api/v1/tokens/", "page_size=5&page_size=7"),
        ("/api/v1/tokens/", "wallet=alice&wallet=bob"),
        ("/api/v1/selections/", "status=locked&status=spent"),
        ("/api/v1/locks/", "state=live&state=live"),
        ("/api/v1/locks/", "cursor=a&cursor=b"),
        ("/api/v1/wallets/alice/balances/", "currency=USD&currency=EUR"),
    ],
)
def test_a_query_parameter_given_twice_is_400(api, url, query):
    payload = assert_error(api.get(f"{url}?{query}"), 400, "invalid")
    assert query.split("=")[0] in payload["fields"]
