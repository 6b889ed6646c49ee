"""SherdlockClient against a fake API server (stdlib http.server): requests, errors, leases."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sherdlock import (
    FundsLocked,
    InsufficientFunds,
    InvalidRequest,
    LeaseKeeper,
    NoExactMatch,
    SherdlockError,
    Strategy,
    TooManyInputs,
    WalletKey,
)
from sherdlock.client import ClientError, SherdlockClient

WAIT = 5.0  # bound on every wait; each returns as soon as its condition holds
SELECTED = {
    "tx_id": "tx-1",
    "tokens": [{"id": 1, "quantity": "7"}],
    "total": "7",
    "expires_at": "2030-01-01T00:00:00Z",
    "fence": 42,
}


@dataclass
class Answer:
    status: int = 200
    body: object = None
    headers: dict[str, str] | None = None
    raw: bytes | None = None


class FakeApi:
    """Record requests; answer each path from a script of Answers (the last one repeats)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.scripts: dict[str, list[Answer]] = {}
        self.lock = threading.Condition()

    def script(self, path: str, *answers: Answer) -> None:
        self.scripts[path] = list(answers)

    def answer(self, path: str) -> Answer:
        script = self.scripts.get(path)
        if not script:
            return Answer(404, {"code": "not_found", "detail": f"no route {path}", "fields": {}})
        answer = script.pop(0) if len(script) > 1 else script[0]
        return answer() if callable(answer) else answer

    def record(self, request: dict) -> None:
        with self.lock:
            self.requests.append(request)
            self.lock.notify_all()

    def calls(self, path: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def wait_for(self, path: str, count: int) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: len(self.calls(path)) >= count, WAIT)


@pytest.fixture
def api():
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            fake.record(
                {
                    "method": "POST",
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": json.loads(raw) if raw else None,
                }
            )
            answer = fake.answer(self.path)
            payload = answer.raw if answer.raw is not None else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (answer.headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def client(api) -> SherdlockClient:
    return SherdlockClient(api.url, "prefix.secret", timeout=WAIT)


def error(status: int, code: str, detail: str = "no", fields=None, headers=None, **extra) -> Answer:
    body = {"code": code, "detail": detail, "fields": fields or {}, **extra}
    return Answer(status, body, headers)


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


def test_keep_alive_extends_until_the_server_says_the_lease_is_lost(api, client):
    path = "/api/v1/selections/tx-1/extend/"
    api.script(
        path, Answer(200, SELECTED), Answer(200, SELECTED), error(409, "lease_lost", "taken over")
    )
    lost = threading.Event()
    keeper = client.keep_alive("tx-1", 0.02, on_lost=lost.set)
    assert isinstance(keeper, LeaseKeeper) and not keeper.running
    with keeper:
        assert lost.wait(WAIT)
    assert keeper.lost and keeper.renewals == 2
    assert len(api.calls(path)) == 3
    assert client._keepers == {}  # a lost keeper is not kept around


def test_keep_alive_rides_out_transient_failures(api, client):
    path = "/api/v1/selections/tx-1/extend/"
    api.script(path, error(503, "unavailable"), Answer(200, SELECTED))
    keeper = client.keep_alive("tx-1", 0.02, max_failures=3).start()
    try:
        assert api.wait_for(path, 4)
        assert not keeper.lost and keeper.running
    finally:
        keeper.stop(WAIT)


def test_release_stops_keeping_the_lease(api, client):
    extend = "/api/v1/selections/tx-1/extend/"
    api.script(extend, Answer(200, SELECTED))
    api.script("/api/v1/selections/tx-1/release/", Answer(200, {"status": "released"}))
    keeper = client.keep_alive("tx-1", 0.02).start()
    assert api.wait_for(extend, 2)
    client.release("tx-1")
    assert not keeper.running and not keeper.lost
    settled = len(api.calls(extend))
    time.sleep(0.1)  # five intervals: a live keeper would have renewed again
    assert len(api.calls(extend)) == settled


def test_spend_stops_keeping_the_lease_only_when_it_succeeds(api, client):
    extend, spend = "/api/v1/selections/tx-1/extend/", "/api/v1/selections/tx-1/spend/"
    api.script(extend, Answer(200, SELECTED))
    api.script(spend, error(400, "value_not_conserved"), Answer(200, {"status": "spent"}))
    keeper = client.keep_alive("tx-1", 0.02).start()
    outputs = [{"index": 0, "wallet": "bob", "currency": "USD", "quantity": 7}]
    with pytest.raises(ClientError):
        client.spend("tx-1", outputs)
    assert keeper.running
    client.spend("tx-1", outputs)
    assert not keeper.running and not keeper.lost


def test_a_renewal_answered_after_our_own_spend_is_not_a_lost_lease(api, client):
    extend, spend = "/api/v1/selections/tx-1/extend/", "/api/v1/selections/tx-1/spend/"
    spent = threading.Event()
    late = []

    def renew() -> Answer:
        if spent.is_set():
            late.append(1)
            return error(409, "already_spent")
        return Answer(200, SELECTED)

    def slow_spend() -> Answer:
        spent.set()
        api.wait_for(extend, len(api.calls(extend)) + 2)  # renewals arrive mid-spend
        return Answer(200, {"status": "spent"})

    api.script(extend, renew)
    api.script(spend, slow_spend)
    lost = threading.Event()
    keeper = client.keep_alive("tx-1", 0.02, on_lost=lost.set).start()
    assert api.wait_for(extend, 1)
    client.spend("tx-1", [{"index": 0, "wallet": "bob", "currency": "USD", "quantity": 7}])
    assert late, "no renewal raced the spend"
    assert not keeper.running and not keeper.lost and not lost.is_set()
