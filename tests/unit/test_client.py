"""SherdlockClient against a fake API server: requests, errors (leases: test_client_keep_alive)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sherdlock import (
    FundsLocked,
    InsufficientFunds,
    InvalidRequest,
    NoExactMatch,
    SherdlockError,
    Strategy,
    TooManyInputs,
    WalletKey,
)
from sherdlock.client import ClientError, SherdlockClient
from tests.helpers.fake_api import SELECTED, Answer, error


def test_select_posts_decimal_strings_with_the_api_key(api, client):
    api.script("/api/v1/selections/", Answer(201, SELECTED))
    assert client.select("tx-1", "alice", "USD", 2**64 - 1) == SELECTED
    (request,) = api.calls("/api/v1/selections/")
    assert request["body"] == {
        "tx_id": "tx-1",
        "wallet": "alice",
        "currency": "USD",
        "quantity": "18446744073709551615",
    }
    assert request["headers"]["Authorization"] == "Api-Key prefix.secret"
    assert request["headers"]["Content-Type"] == "application/json"


def test_select_names_the_strategy_and_its_terms(api, client):
    api.script("/api/v1/selections/", Answer(201, SELECTED), Answer(201, SELECTED))
    client.select("tx-1", "alice", "USD", 5, strategy=Strategy("exact", max_change=2**64 - 1))
    client.select("tx-2", "alice", "USD", 5, strategy=Strategy("consolidate", max_tokens=7))
    first, second = (call["body"] for call in api.calls("/api/v1/selections/"))
    assert (first["strategy"], first["max_change"]) == ("exact", "18446744073709551615")
    assert (second["strategy"], second["max_tokens"]) == ("consolidate", 7)
    with pytest.raises(InvalidRequest):
        client.select("tx-3", "alice", "USD", 5, strategy=Strategy("random", max_tokens=1))


def test_select_legs_posts_every_leg_and_names_the_failing_one(api, client):
    api.script(
        "/api/v1/selections/",
        Answer(201, SELECTED),
        error(409, "insufficient_funds", "short", available="3", leg="EUR"),
    )
    assert client.select_legs("tx-1", "alice", {"USD": 5, "EUR": 2**64 - 1}) == SELECTED
    with pytest.raises(InsufficientFunds) as caught:
        client.select_legs("tx-2", "alice", [("USD", 5), ("EUR", 7)], strategy=Strategy("exact"))
    first, second = (call["body"] for call in api.calls("/api/v1/selections/"))
    assert first == {
        "tx_id": "tx-1",
        "wallet": "alice",
        "legs": [
            {"currency": "USD", "quantity": "5"},
            {"currency": "EUR", "quantity": "18446744073709551615"},
        ],
    }
    assert second["strategy"] == "exact" and "currency" not in second
    error_ = caught.value
    assert (error_.leg, error_.key.currency, error_.requested, error_.available) == (
        "EUR",
        "EUR",
        7,
        3,
    )


@pytest.mark.parametrize(
    "code, raised", [("no_exact_match", NoExactMatch), ("max_tokens_exceeded", TooManyInputs)]
)
def test_strategy_refusals_come_back_as_the_cores_errors(api, client, code, raised):
    api.script("/api/v1/selections/", error(409, code, "no set"))
    with pytest.raises(raised) as caught:
        client.select("tx-1", "alice", "USD", 5, strategy=Strategy("exact"))
    assert (caught.value.status, caught.value.code, str(caught.value)) == (409, code, "no set")


@pytest.mark.parametrize("base", ["{url}", "{url}/", "{url}/api/v1", "{url}/api/v1/"])
def test_base_url_may_name_the_server_or_the_api_root(api, base):
    client = SherdlockClient(base.format(url=api.url), "s3cr3t-key")
    assert client.api_root == f"{api.url}/api/v1/"
    assert "s3cr3t" not in repr(client)


def test_fractional_quantities_are_refused_before_sending(api, client):
    with pytest.raises(ValueError, match="whole"):
        client.select("tx-1", "alice", "USD", "1.5")
    assert api.requests == []


def test_insufficient_funds_maps_to_the_core_exception(api, client):
    api.script(
        "/api/v1/selections/",
        error(409, "insufficient_funds", "only 5 in alice/USD", available="5"),
    )
    with pytest.raises(InsufficientFunds) as caught:
        client.select("tx-1", "alice", "USD", 9)
    exc = caught.value
    assert (exc.key, exc.requested, exc.available) == (WalletKey("alice", "USD"), 9, 5)
    assert str(exc) == "only 5 in alice/USD"
    assert (exc.status, exc.code) == (409, "insufficient_funds")


def test_funds_locked_carries_the_retry_after_header(api, client):
    api.script(
        "/api/v1/selections/",
        error(409, "funds_locked", "held by others", headers={"Retry-After": "3"}, available="4"),
    )
    with pytest.raises(FundsLocked) as caught:
        client.select("tx-1", "alice", "USD", 9)
    assert (caught.value.retry_after, caught.value.available) == (3.0, 4)


def test_the_exact_retry_after_of_the_body_wins_over_the_rounded_header(api, client):
    api.script(
        "/api/v1/selections/",
        error(409, "funds_locked", headers={"Retry-After": "1"}, retry_after=0.04),
    )
    with pytest.raises(FundsLocked) as caught:
        client.select("tx-1", "alice", "USD", 9)
    assert caught.value.retry_after == 0.04


def test_funds_locked_is_retried_with_jitter_for_as_long_as_asked(api, client):
    api.script(
        "/api/v1/selections/",
        error(409, "funds_locked", retry_after=0.5),
        error(409, "funds_locked", retry_after=0.5),
        Answer(201, SELECTED),
    )
    now, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    client._clock, client._sleep = (lambda: now[0]), sleep
    assert client.select("tx-1", "alice", "USD", 9, retry_for=5)["fence"] == 42
    assert len(slept) == 2 and all(0.25 <= s <= 0.75 for s in slept)
    assert len(set(slept)) == 2  # jittered, not a fixed pause
    api.script("/api/v1/selections/", error(409, "funds_locked", retry_after=0.5))
    slept.clear()
    with pytest.raises(FundsLocked):
        client.select("tx-2", "alice", "USD", 9, retry_for=1)
    assert sum(slept) <= 1  # gives up before its budget would be overrun


def test_a_selection_may_ask_the_server_to_wait(api, client):
    api.script("/api/v1/selections/", Answer(201, SELECTED))
    client.select("tx-1", "alice", "USD", 9, wait=20)
    assert api.calls("/api/v1/selections/")[-1]["body"]["wait"] == 20


def test_funds_locked_without_a_header_still_suggests_a_wait(api, client):
    api.script("/api/v1/selections/", error(409, "funds_locked"))
    with pytest.raises(FundsLocked) as caught:
        client.select("tx-1", "alice", "USD", 9)
    assert caught.value.retry_after > 0 and caught.value.available is None


def test_other_errors_become_client_errors_with_status_code_and_fields(api, client):
    api.script(
        "/api/v1/selections/",
        error(400, "invalid", "bad quantity", fields={"quantity": ["too big"]}),
    )
    with pytest.raises(ClientError) as caught:
        client.select("tx-1", "alice", "USD", 9)
    exc = caught.value
    assert isinstance(exc, SherdlockError)
    assert (exc.status, exc.code, exc.detail) == (400, "invalid", "bad quantity")
    assert exc.fields == {"quantity": ["too big"]} and exc.body["code"] == "invalid"


def test_throttling_keeps_its_retry_after(api, client):
    api.script(
        "/api/v1/selections/tx-1/extend/",
        error(429, "rate_limited", "slow down", headers={"Retry-After": "7"}),
    )
    with pytest.raises(ClientError) as caught:
        client.extend("tx-1")
    assert (caught.value.status, caught.value.retry_after) == (429, 7.0)


def test_an_error_page_that_is_not_json_still_raises_a_client_error(api, client):
    api.script("/api/v1/selections/", Answer(502, raw=b"<html>Bad Gateway</html>"))
    with pytest.raises(ClientError) as caught:
        client.select("tx-1", "alice", "USD", 9)
    assert (caught.value.status, caught.value.code) == (502, "http_error")
    assert "Bad Gateway" in caught.value.detail


def test_an_unreachable_server_raises_a_client_error_without_status():
    with pytest.raises(ClientError) as caught:
        SherdlockClient("http://127.0.0.1:9", "k", timeout=2).release("tx-1")
    assert (caught.value.status, caught.value.code) == (None, "unreachable")


def test_spend_release_and_extend_post_to_the_selection(api, client):
    @dataclass(frozen=True)
    class Output:
        index: int
        wallet: str
        currency: str
        quantity: int

    for action in ("spend", "release", "extend"):
        api.script(f"/api/v1/selections/tx%2F1/{action}/", Answer(200, {"tx_id": "tx/1"}))
    outputs = [
        {"index": 0, "wallet": "bob", "currency": "USD", "quantity": 5},
        Output(1, "alice", "USD", 2),
    ]
    assert client.spend("tx/1", outputs) == {"tx_id": "tx/1"}
    assert client.release("tx/1") == {"tx_id": "tx/1"}
    assert client.extend("tx/1", seconds=30) == {"tx_id": "tx/1"}
    bodies = [r["body"] for r in api.requests]
    assert bodies[0] == {
        "outputs": [
            {"index": 0, "wallet": "bob", "currency": "USD", "quantity": "5"},
            {"index": 1, "wallet": "alice", "currency": "USD", "quantity": "2"},
        ]
    }
    assert bodies[1:] == [{}, {"seconds": 30}]
