"""The API through real HTTP: web server serving the test database, driven with urllib."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.e2e.servers import web_server
from tests.e2e.test_serve import wait_for


class Http:
    """A tiny JSON client for one base URL and API key."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key

    def __call__(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Api-Key {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())


@pytest.fixture(params=["direct", "pgbouncer"])
def server(request, subprocess_env, tmp_path) -> Iterator[str]:
    """Serve the project with web server (two workers) on a free port; stop it afterwards.

    Once on the test database directly, once through PgBouncer pooling transactions.
    """
    env = (
        request.getfixturevalue("pooled_env") if request.param == "pgbouncer" else (subprocess_env)
    )
    with web_server(env, tmp_path / "web.log") as served:
        yield served.base


@pytest.mark.timeout(120)
def test_issue_select_spend_and_balance_over_http(server):
    from clients.models import ApiKey

    _, raw = ApiKey.objects.create_key(
        name="e2e", wallets=["alice", "bob"], can_issue=True, can_select=True
    )
    http = Http(server + "/api/v1", raw)
    assert wait_for(f"{server}/readyz", timeout=10) == 200

    status, body = http(
        "POST",
        "/tokens/",
        {
            "tokens": [
                {"tx_id": "mint", "index": i, "wallet": "alice", "currency": "USD", "quantity": q}
                for i, q in enumerate(["50", "30", "20"])
            ]
        },
    )
    assert (status, body["created"]) == (201, 3)

    status, selection = http(
        "POST",
        "/selections/",
        {"tx_id": "pay-1", "wallet": "alice", "currency": "USD", "quantity": "70"},
    )
    assert status == 201, selection
    total = int(selection["total"])
    assert total >= 70 and selection["status"] == "locked"
    assert http(
        "POST",
        "/selections/",
        {"tx_id": "pay-1", "wallet": "alice", "currency": "USD", "quantity": "70"},
    ) == (200, selection)

    outputs = [{"index": 0, "wallet": "bob", "currency": "USD", "quantity": "70"}]
    if total > 70:
        outputs.append(
            {"index": 1, "wallet": "alice", "currency": "USD", "quantity": str(total - 70)}
        )
    status, spent = http("POST", "/selections/pay-1/spend/", {"outputs": outputs})
    assert status == 200, spent
    assert spent["status"] == "spent" and len(spent["outputs"]) == len(outputs)

    status, alice = http("GET", "/wallets/alice/balances/")
    assert status == 200
    assert alice["balances"] == [
        {"currency": "USD", "unspent": "30", "locked": "0", "available": "30"}
    ]
    status, bob = http("GET", "/wallets/bob/balances/")
    assert bob["balances"][0]["unspent"] == "70"

    status, error = http(
        "POST",
        "/selections/",
        {"tx_id": "pay-2", "wallet": "alice", "currency": "USD", "quantity": "31"},
    )
    assert (status, error["code"], error["available"]) == (409, "insufficient_funds", "30")
    status, error = Http(server + "/api/v1", "wrong.key")("GET", "/tokens/")
    assert (status, error["code"]) == (401, "authentication_failed")


@pytest.mark.timeout(180)
def test_concurrent_selections_over_http_never_share_a_token(server):
    from concurrent.futures import ThreadPoolExecutor

    from clients.models import ApiKey

    _, raw = ApiKey.objects.create_key(
        name="e2e", wallets=["alice", "bob"], can_issue=True, can_select=True
    )
    http = Http(server + "/api/v1", raw)
    status, _ = http(
        "POST",
        "/tokens/",
        {
            "tokens": [
                {
                    "tx_id": "mint",
                    "index": i,
                    "wallet": "alice",
                    "currency": "USD",
                    "quantity": "10",
                }
                for i in range(20)
            ]
        },
    )
    assert status == 201

    def pay(n: int) -> tuple[int, dict]:
        status, body = http(
            "POST",
            "/selections/",
            {"tx_id": f"pay-{n}", "wallet": "alice", "currency": "USD", "quantity": "20"},
        )
        if status != 201:
            return status, body
        outputs = [{"index": 0, "wallet": "bob", "currency": "USD", "quantity": body["total"]}]
        return http("POST", f"/selections/pay-{n}/spend/", {"outputs": outputs})

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(pay, range(16)))
    spent = [body for status, body in results if status == 200]
    refused = [body["code"] for status, body in results if status != 200]
    assert set(refused) <= {"funds_locked", "insufficient_funds"}, refused
    inputs = [(t["tx_id"], t["index"]) for body in spent for t in body["tokens"]]
    assert len(inputs) == len(set(inputs)), "a token was spent by two transactions"
    paid = sum(int(body["total"]) for body in spent)
    _, alice = http("GET", "/wallets/alice/balances/")
    _, bob = http("GET", "/wallets/bob/balances/")
    left = int(alice["balances"][0]["unspent"]) if alice["balances"] else 0
    assert (left, int(bob["balances"][0]["unspent"])) == (200 - paid, paid)
    assert paid == 20 * len(spent)
