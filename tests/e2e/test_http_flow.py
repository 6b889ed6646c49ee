"""The API through real HTTP: web server serving the test database, driven by its client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sherdlock_client import (
    AuthenticationFailed,
    Client,
    InsufficientFunds,
    NewToken,
    Output,
)

from tests.e2e.servers import web_server
from tests.e2e.test_serve import wait_for


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
    client = Client(server, raw)
    assert wait_for(f"{server}/readyz", timeout=10) == 200

    issued = client.issue(
        NewToken("mint", i, "alice", "USD", q) for i, q in enumerate([50, 30, 20])
    )
    assert issued.created == 3

    selection = client.select("pay-1", "alice", "USD", 70)
    assert selection.created and selection.total >= 70 and selection.status == "locked"
    again = client.select("pay-1", "alice", "USD", 70)
    assert not again.created and again.tokens == selection.tokens

    outputs = [Output(0, "bob", "USD", 70)]
    if selection.change:
        outputs.append(Output(1, "alice", "USD", selection.change))
    spent = client.spend("pay-1", outputs)
    assert spent.selection.status == "spent" and len(spent.outputs) == len(outputs)

    assert client.balances("alice").balances == client.balances("alice", "USD").balances
    alice = client.balances("alice")["USD"]
    assert (alice.unspent, alice.locked, alice.available) == (30, 0, 30)
    assert client.balances("bob")["USD"].unspent == 70

    with pytest.raises(InsufficientFunds) as refused:
        client.select("pay-2", "alice", "USD", 31)
    assert (refused.value.status, refused.value.code, refused.value.available) == (
        409,
        "insufficient_funds",
        30,
    )
    with pytest.raises(AuthenticationFailed):
        next(Client(server, "wrong.key").tokens())


@pytest.mark.timeout(180)
def test_concurrent_selections_over_http_never_share_a_token(server):
    from concurrent.futures import ThreadPoolExecutor

    from clients.models import ApiKey

    _, raw = ApiKey.objects.create_key(
        name="e2e", wallets=["alice", "bob"], can_issue=True, can_select=True
    )
    # One client shared by the threads, as a wallet backend's threads share it.
    client = Client(server, raw)
    assert client.issue(NewToken("mint", i, "alice", "USD", 10) for i in range(20)).created == 20

    def pay(n: int) -> str:
        try:
            selection = client.select(f"pay-{n}", "alice", "USD", 20)
        except InsufficientFunds as refused:  # FundsLocked too
            return refused.code
        client.spend(f"pay-{n}", [Output(0, "bob", "USD", selection.total)])
        return "spent"

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(pay, range(16)))
    assert set(answers) <= {"spent", "funds_locked", "insufficient_funds"}, answers
    spent = [s for s in client.selections(wallet="alice", status="spent")]
    assert len(spent) == answers.count("spent")
    inputs = [(t.tx_id, t.index) for s in spent for t in s.tokens]
    assert len(inputs) == len(set(inputs)), "a token was spent by two transactions"
    paid = sum(s.total for s in spent)
    assert (client.balances("alice")["USD"].unspent, client.balances("bob")["USD"].unspent) == (
        200 - paid,
        paid,
    )
    assert paid == 20 * len(spent)
    assert client.connections_opened <= 8  # one per thread at most, kept alive
