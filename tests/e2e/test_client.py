"""The client distribution (client/, sherdlock_client) against a real web server and database.

Every method of both variants runs one scenario (an adapter awaits the blocking client's
calls too), and the distribution installs and works alone. Its retries and connections under
faults are in ``tests/e2e/test_client_retries.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from datetime import datetime

import pytest
from sherdlock_client import (
    AlreadySpent,
    AsyncClient,
    AuthenticationFailed,
    Balance,
    Client,
    FundsLocked,
    InsufficientFunds,
    Invalid,
    MaxTokensExceeded,
    NoExactMatch,
    NotFound,
    NotLocked,
    Output,
    PermissionDenied,
    RetryPolicy,
    Strategy,
    TxIdConflict,
    Unreachable,
    ValueNotConserved,
)

from tests.e2e.test_serve import free_port
from tests.helpers.client import Awaited, api_key, clients, mint


async def scenario(api: Awaited, base: str, key: str) -> None:
    """Call every method of the client, answers and errors."""
    tokens = [
        *mint("alice", "USD", 50, 30, 20),
        *mint("alice", "EUR", 40, 60, tx="mint-eur"),
        *mint("carol", "USD", 7, 13, 25, 40),
        *mint("dave", "USD", 10),
    ]
    assert await api.alive()
    issued = await api.issue(tokens)
    assert issued.created == len(tokens) and issued.tokens[0].quantity == 50
    assert (await api.issue(tokens)).created == 0  # identical tokens are kept, not doubled

    # Select, repeat, read, extend, keep alive, spend.
    selection = await api.select("pay-1", "alice", "USD", 70)
    assert selection.created and selection.status == "locked" and selection.legs is None
    assert selection.total >= 70 and selection.total == sum(t.quantity for t in selection.tokens)
    assert selection.change == selection.total - 70 and selection.inputs == len(selection.tokens)
    assert isinstance(selection.fence, int) and isinstance(selection.expires_at, datetime)
    again = await api.select("pay-1", "alice", "USD", 70)
    assert not again.created and again.tokens == selection.tokens
    with pytest.raises(TxIdConflict):
        await api.select("pay-1", "alice", "USD", 71)
    assert (await api.selection("pay-1")).tokens == selection.tokens
    extended = await api.extend("pay-1", 600)
    assert extended.expires_at is not None and selection.expires_at is not None
    assert extended.expires_at > selection.expires_at
    keeper = api.client.keep_alive("pay-1", 0.1)
    keeper.start()
    for _ in range(200):
        if keeper.renewals >= 2:
            break
        await asyncio.sleep(0.05)
    assert keeper.renewals >= 2
    outputs = [Output(0, "bob", "USD", 70)]
    if selection.change:
        outputs.append(Output(1, "alice", "USD", selection.change))
    spent = await api.spend("pay-1", outputs)
    assert spent.selection.status == "spent" and spent.selection.spent_at is not None
    assert (spent.outputs[0].wallet, spent.outputs[0].quantity) == ("bob", 70)
    await asyncio.sleep(0.3)
    assert not keeper.running and not keeper.lost  # stopped by the spend, not lost
    assert (await api.spend("pay-1", outputs)).outputs == spent.outputs  # a repeat
    with pytest.raises(AlreadySpent):
        await api.release("pay-1")

    # Every strategy, on carol's 7, 13, 25 and 40.
    exact = await api.select("ex-1", "carol", "USD", 20, strategy=Strategy.exact())
    assert sorted(t.quantity for t in exact.tokens) == [7, 13] and exact.strategy == "exact"
    await api.release("ex-1")
    with pytest.raises(NoExactMatch):
        await api.select("ex-2", "carol", "USD", 21, strategy=Strategy.exact())
    near = await api.select("ex-3", "carol", "USD", 21, strategy=Strategy.exact(fallback=True))
    assert near.total >= 21
    await api.release("ex-3")
    with pytest.raises(MaxTokensExceeded):
        await api.select("co-1", "carol", "USD", 70, strategy=Strategy.consolidate(2))
    swept = await api.select("co-2", "carol", "USD", 30, strategy=Strategy.consolidate(3))
    assert sorted(t.quantity for t in swept.tokens) == [7, 13, 25]
    await api.release("co-2")
    smallest = await api.select("sf-1", "carol", "USD", 8, strategy=Strategy("smallest_first"))
    assert sorted(t.quantity for t in smallest.tokens) == [7, 13]
    await api.release("sf-1")
    fewest = await api.select("ft-1", "carol", "USD", 8, strategy=Strategy("fewest_tokens"))
    assert [t.quantity for t in fewest.tokens] == [40]
    released = await api.release("ft-1")
    assert released.status == "released" and released.released_at is not None
    assert (await api.release("ft-1")).status == "released"  # repeating is harmless
    with pytest.raises(NotLocked):
        await api.extend("ft-1")

    # Legs: all or none.
    legs = await api.select_legs("legs-1", "alice", {"USD": 5, "EUR": 50})
    assert legs.legs is not None and sorted(leg.currency for leg in legs.legs) == ["EUR", "USD"]
    assert all(leg.total >= leg.quantity for leg in legs.legs)
    await api.release("legs-1")
    with pytest.raises(InsufficientFunds) as refused:
        await api.select_legs("legs-2", "alice", [("USD", 5), ("EUR", 1000)])
    assert refused.value.leg == "EUR" and refused.value.available == 100

    # Refusals, each its own class with the server's code and words.
    with pytest.raises(InsufficientFunds) as short:
        await api.select("big", "dave", "USD", 11)
    assert short.value.available == 10 and short.value.code == "insufficient_funds"
    assert short.value.status == 409 and short.value.detail
    await api.select("lk-1", "dave", "USD", 10)
    with pytest.raises(FundsLocked) as locked:
        await api.select("lk-2", "dave", "USD", 5, wait=1)
    assert locked.value.retry_after is not None and locked.value.available == 0
    await api.release("lk-1")
    assert (await api.select("lk-2", "dave", "USD", 5, wait=1)).created
    with pytest.raises(ValueNotConserved):
        await api.spend("lk-2", [Output(0, "dave", "USD", 1)])

    # A lease released elsewhere is lost to its keeper, which stops and says so.
    await api.select("lost-1", "alice", "USD", 1)
    lost: list[str] = []
    keeper = api.client.keep_alive("lost-1", 0.1, on_lost=lambda: lost.append("lost-1"))
    keeper.start()
    elsewhere = Awaited(type(api.client)(base, key))
    await elsewhere.release("lost-1")
    for _ in range(200):
        if lost:
            break
        await asyncio.sleep(0.05)
    assert lost == ["lost-1"] and keeper.lost
    await elsewhere.close()
    with pytest.raises(NotFound):
        await api.selection("nope")
    with pytest.raises(Invalid) as invalid:
        await api.select("bad", "dave", "USD", 0)
    assert "quantity" in invalid.value.fields
    with pytest.raises(PermissionDenied):
        await api.select("other", "zed", "USD", 1)

    # Listings over their cursor pages, and balances.
    carol = await api.selections(wallet="carol", page_size=2)
    assert {s.tx_id for s in carol} == {"ex-1", "ex-3", "co-2", "sf-1", "ft-1"}
    assert len(carol) == 5
    assert {s.tx_id for s in await api.selections(status="spent")} == {"pay-1"}
    locks = await api.locks(wallet="dave", state="live", page_size=1)
    assert [(lock.spender_tx_id, lock.quantity) for lock in locks] == [("lk-2", 10)]
    assert len(await api.tokens(wallet="carol", page_size=3)) == 4
    assert {t.tx_id for t in await api.tokens(wallet="bob")} == {"pay-1"}
    dave = await api.balances("dave")
    assert dave["USD"] == Balance("USD", unspent=10, locked=10, available=0)
    alice = await api.balances("alice", "EUR")
    assert [b.currency for b in alice.balances] == ["EUR"] and alice["EUR"].unspent == 100


@pytest.mark.timeout(240)
@pytest.mark.parametrize("variant", ["sync", "async"])
def test_every_method_against_a_live_server(server, variant):
    key = api_key()

    async def run() -> None:
        client = clients(server, key, variant)
        await scenario(Awaited(client), server, key)
        assert client.connections_opened <= 3  # kept alive, not one per call
        with pytest.raises(AuthenticationFailed):
            await Awaited(clients(server, "wrong.key", variant)).balances("alice")
        nowhere = clients(
            f"http://127.0.0.1:{free_port()}", key, variant, retries=RetryPolicy(retry_for=0)
        )
        with pytest.raises(Unreachable):
            await Awaited(nowhere).balances("alice")
        await Awaited(client).close()

    asyncio.run(run())


def test_both_variants_have_the_same_methods():
    def surface(cls: type) -> dict[str, list[str]]:
        return {
            name: list(inspect.signature(member).parameters)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    assert surface(Client) == surface(AsyncClient)


# Run by the fresh virtualenv's Python: the client alone, against the server at argv[1].
ALONE = """
import sys
try:
    import django
except ImportError:
    pass
else:
    sys.exit("django is importable")
from sherdlock_client import Client, NewToken

with Client(sys.argv[1], sys.argv[2]) as client:
    client.issue([NewToken("alone", 0, "alice", "USD", 2**64 - 1)])
    selection = client.select("alone-1", "alice", "USD", 2**64 - 1)
    assert selection.total == 2**64 - 1, selection
    client.release("alone-1")
    assert client.balances("alice")["USD"].available == 2**64 - 1
print("ok")
"""


@pytest.mark.timeout(240)
def test_the_client_distribution_installs_and_works_alone(server, tmp_path):
    import shutil
    import subprocess
    import sys

    from tests.helpers.processes import ROOT

    # A copy: building writes beside the sources.
    source = shutil.copytree(
        ROOT / "client", tmp_path / "client", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", str(source)], check=True)
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "freeze"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert installed - {"pip", "setuptools"} == {"sherdlock-client"}
    done = subprocess.run(
        [python, "-c", ALONE, server, api_key()], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
