"""Bad input gets a 4xx in the one error shape, never a 500, and writes nothing."""

from __future__ import annotations

import json

import pytest
from rest_framework import exceptions

from config.exceptions import exception_handler
from sherdlock import FundsLocked, InvalidRequest, SherdlockError, WalletKey
from tests.helpers.api import counts, issue, output, select, token

pytestmark = pytest.mark.django_db

BAD_QUANTITIES = [
    "-1",
    "0",
    "00",
    "1.5",
    "1e3",
    " 1",
    "1 ",
    "1\n",
    "+1",
    "0x10",
    "1_000",
    "\uff11",
    str(2**64),
    "9" * 5000,
    "abc",
    "",
    100,
    1.5,
    None,
    True,
    [],
    {"q": "1"},
]
BAD_STRINGS = ["", "   ", "x" * 129, 123, None, True, ["alice"], {}, "a\x00b", "a\tb", "\ud800"]
BAD_INDEXES = [-1, 2**31, "1", 1.5, None, True]


@pytest.fixture
def selected(api):
    issue(api, token("m", 0, quantity="80"))
    select(api, "pay", "80")
    return api


def issue_body(**field):
    return "/api/v1/tokens/", {"tokens": [{**token("new"), **field}]}, "tokens.0."


def select_body(**field):
    body = {"tx_id": "new-tx", "wallet": "alice", "currency": "USD", "quantity": "1", **field}
    return "/api/v1/selections/", body, ""


def spend_body(**field):
    return (
        "/api/v1/selections/pay/spend/",
        {"outputs": [{**output(0, "bob", "80"), **field}]},
        "outputs.0.",
    )


def assert_refused(
    client, url: str, body: object, field: str | None, status: int = 400, code: str = "invalid"
) -> dict:
    before = counts()
    # Encoded here with escapes: the test client's encoder cannot write a lone surrogate.
    response = client.post(url, json.dumps(body), content_type="application/json")
    assert response.status_code == status, response.content
    payload = response.json()
    assert payload["code"] == code
    assert set(payload) >= {"code", "detail", "fields"}
    if field is not None:
        assert field in payload["fields"], payload
        assert all(isinstance(m, str) for m in payload["fields"][field])
    assert counts() == before
    return payload


@pytest.mark.parametrize("build", [issue_body, select_body, spend_body])
@pytest.mark.parametrize("value", BAD_QUANTITIES, ids=repr)
def test_bad_quantities_are_refused(selected, build, value):
    url, body, prefix = build(quantity=value)
    assert_refused(selected, url, body, f"{prefix}quantity")


@pytest.mark.parametrize(
    "build, field",
    [
        (issue_body, "tx_id"),
        (issue_body, "wallet"),
        (issue_body, "currency"),
        (select_body, "tx_id"),
        (select_body, "wallet"),
        (select_body, "currency"),
        (spend_body, "wallet"),
        (spend_body, "currency"),
    ],
)
@pytest.mark.parametrize("value", BAD_STRINGS, ids=repr)
def test_bad_names_are_refused(selected, build, field, value):
    url, body, prefix = build(**{field: value})
    assert_refused(selected, url, body, f"{prefix}{field}")


@pytest.mark.parametrize("build", [issue_body, select_body])
def test_a_currency_longer_than_32_characters_is_refused(selected, build):
    url, body, prefix = build(currency="C" * 33)
    assert_refused(selected, url, body, f"{prefix}currency")


@pytest.mark.parametrize("build", [issue_body, spend_body])
@pytest.mark.parametrize("value", BAD_INDEXES, ids=repr)
def test_bad_indexes_are_refused(selected, build, value):
    url, body, prefix = build(index=value)
    assert_refused(selected, url, body, f"{prefix}index")


@pytest.mark.parametrize("build", [issue_body, select_body, spend_body])
def test_the_largest_quantity_is_accepted_by_validation(selected, build):
    url, body, _ = build(quantity=str(2**64 - 1))
    response = selected.post(url, body, format="json")
    # Valid input: issue succeeds; select and spend fail on the domain, not on validation.
    assert response.status_code in {201, 409, 422}, response.json()
    assert response.json().get("code") != "invalid"


@pytest.mark.parametrize(
    "url", ["/api/v1/tokens/", "/api/v1/selections/", "/api/v1/selections/pay/spend/"]
)
@pytest.mark.parametrize("body", [[], "text", 7, None, {"tokens": {}, "outputs": {}}])
def test_bodies_of_the_wrong_shape_are_refused(selected, url, body):
    assert_refused(selected, url, body, None)


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/tokens/",
        "/api/v1/selections/",
        "/api/v1/selections/pay/spend/",
        "/api/v1/selections/pay/extend/",
    ],
)
def test_malformed_json_is_refused(selected, url):
    before = counts()
    response = selected.post(url, '{"tokens": [', content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {
        "code": "malformed_json",
        "detail": response.json()["detail"],
        "fields": {},
    }
    assert counts() == before


def test_a_body_that_is_not_json_is_415(selected):
    before = counts()
    response = selected.post("/api/v1/tokens/", "tokens=1", content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert counts() == before


def test_an_unsupported_method_is_405(api):
    response = api.delete("/api/v1/tokens/")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_unknown_fields_are_ignored(selected):
    url, body, _ = select_body(quantity="1", tx_id="extra", colour="blue")
    issue(selected, token("more", 0, quantity="5"))
    assert selected.post(url, body, format="json").status_code == 201


def test_an_unknown_api_path_is_a_json_404(api):
    response = api.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "Not found.", "fields": {}}


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/wallets/%00/balances/",
        "/api/v1/wallets/" + "w" * 200 + "/balances/",
        "/api/v1/selections/%00/",
        "/api/v1/selections/%00/spend/",
    ],
)
def test_unusable_names_in_the_path_are_404(selected, path):
    before = counts()
    response = (
        selected.post(path, {"outputs": []}, format="json")
        if "spend" in path
        else selected.get(path)
    )
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert counts() == before


@pytest.mark.parametrize("query", ["wallet=%00", "currency=" + "c" * 40, "spent=yes"])
def test_bad_filters_are_400(api, query):
    response = api.get(f"/api/v1/tokens/?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


def test_a_crash_is_a_json_500(api, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("tokens.views.balances", boom)
    api.raise_request_exception = False
    response = api.get("/api/v1/wallets/alice/balances/")
    assert response.status_code == 500
    assert response.json() == {
        "code": "server_error",
        "detail": "Internal server error.",
        "fields": {},
    }


def test_a_non_api_404_stays_html(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert "json" not in response["Content-Type"]


def test_list_errors_are_reported_at_the_list_path(api):
    response = api.post(
        "/api/v1/tokens/", {"tokens": [token("t", i) for i in range(1001)]}, format="json"
    )
    assert list(response.json()["fields"]) == ["tokens"]
    bad = api.post(
        "/api/v1/tokens/", {"tokens": [token(), {**token("t", 1), "quantity": 1}]}, format="json"
    )
    assert list(bad.json()["fields"]) == ["tokens.1.quantity"]
    assert bad.json()["detail"].startswith("Invalid input: tokens.1.quantity: ")


@pytest.mark.parametrize(
    "exc, status, code, retry_after",
    [
        (InvalidRequest("bad"), 400, "invalid", None),
        (FundsLocked(WalletKey("a", "USD"), 5, 2, retry_after=2.2), 409, "funds_locked", "3"),
        (FundsLocked(WalletKey("a", "USD"), 5, 2, retry_after=0.01), 409, "funds_locked", "1"),
        (exceptions.Throttled(wait=0.2), 429, "rate_limited", "1"),
        (exceptions.NotAcceptable(), 406, "not_acceptable", None),
    ],
)
def test_the_handler_maps_every_error_to_a_status_and_code(exc, status, code, retry_after):
    response = exception_handler(exc, {})
    assert (response.status_code, response.data["code"]) == (status, code)
    assert response.data["fields"] == {}
    assert response.headers.get("Retry-After") == retry_after


@pytest.mark.parametrize("exc", [RuntimeError("bug"), SherdlockError("odd")], ids=repr)
def test_the_handler_leaves_unexpected_errors_to_django(exc):
    assert exception_handler(exc, {}) is None
