"""The client's retries and connections against a real web server, faults played by a proxy.

A proxy between client and server (tests.helpers.http_proxy) answers in the server's stead or
drops an answer; the client must follow the protocol of retries, and never send a request on
a connection the server closed.
"""

from __future__ import annotations

import asyncio

import pytest
from sherdlock_client import AnswerLost, FundsLocked, Output, RateLimited, Retry

from tests.helpers.client import Awaited, api_key, clients, mint
from tests.helpers.http_proxy import DROP_ANSWER, answer, fault_proxy


@pytest.mark.timeout(240)
@pytest.mark.parametrize("variant", ["sync", "async"])
def test_retries_follow_the_protocol(server, variant):
    key = api_key()
    retries: list[Retry] = []
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    async def run() -> None:
        with fault_proxy(server) as proxy:
            client = clients(proxy.base, key, variant, on_retry=retries.append)
            # The pauses are recorded, not slept; what the client waits for is checked.
            client._sleep = pauses.append if variant == "sync" else pause
            api = Awaited(client)
            await api.issue(mint("alice", "USD", *range(1, 21)))

            # 429 and 503: sent again after Retry-After, stretched by jitter.
            proxy.plan(answer(429, "rate_limited", retry_after="1"))
            first = await api.select("r-1", "alice", "USD", 10)
            assert first.created
            assert [(r.reason, r.number) for r in retries] == [("rate_limited", 1)]
            assert 1.0 <= pauses[-1] == retries[-1].delay <= 1.25
            proxy.plan(*[answer(503, "database_unavailable", retry_after="2")] * 2)
            assert (await api.balances("alice"))["USD"].locked == first.total
            assert [r.reason for r in retries[1:]] == ["database_unavailable"] * 2
            assert [r.number for r in retries[1:]] == [1, 2]
            assert all(2.0 <= p <= 2.5 for p in pauses[1:])

            # A select whose answer is lost is sent again: one selection, answered as a repeat.
            retries.clear()
            proxy.plan(DROP_ANSWER)
            second = await api.select("r-2", "alice", "USD", 10)
            assert not second.created  # the lost first answer had made it
            assert [r.reason for r in retries] == ["answer_lost"]
            assert [s.tx_id for s in await api.selections(wallet="alice")] == ["r-2", "r-1"]
            held = await api.locks(wallet="alice")
            assert sorted(lock.spender_tx_id for lock in held) == sorted(
                ["r-1"] * first.inputs + ["r-2"] * second.inputs
            )
            assert (await api.balances("alice"))["USD"].locked == first.total + second.total

            # So are spend, release and extend; issuing is not (a repeat answers created=0).
            for call in (
                api.extend("r-1", 300),
                api.release("r-1"),
                api.spend("r-2", [Output(0, "bob", "USD", second.total)]),
            ):
                retries.clear()
                proxy.plan(DROP_ANSWER)
                await call
                assert [r.reason for r in retries] == ["answer_lost"]
            assert (await api.selection("r-1")).status == "released"
            assert (await api.selection("r-2")).status == "spent"
            retries.clear()
            proxy.plan(DROP_ANSWER)
            with pytest.raises(AnswerLost):
                await api.issue(mint("carol", "USD", 5))
            assert retries == []
            assert (await api.issue(mint("carol", "USD", 5))).created == 0

            # funds_locked is retried after the server's hint when the caller asks, up to the
            # policy's most attempts.
            await api.issue(mint("dave", "USD", 10))
            await api.select("held", "dave", "USD", 10)
            retries.clear()
            with pytest.raises(FundsLocked):
                await api.select("r-4", "dave", "USD", 5)
            assert retries == []
            with pytest.raises(FundsLocked):
                await api.select("r-4", "dave", "USD", 5, retry_locked_for=1000)
            assert [r.reason for r in retries] == ["funds_locked"] * 5
            retries.clear()

            # A pause past the call's deadline is not taken: the refusal is raised.
            proxy.plan(answer(429, "rate_limited", retry_after="5"))
            with pytest.raises(RateLimited) as limited:
                await api.select("r-3", "alice", "USD", 1, retry_for=1)
            assert limited.value.retry_after == 5 and retries == []
            await api.close()

    asyncio.run(run())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variant", ["sync", "async"])
def test_an_idle_connection_the_server_closed_is_not_used(server, variant):
    """Issuing is not sent again after a lost answer: it must not go out on a dead connection."""
    key = api_key()

    async def run() -> None:
        client = clients(server, key, variant, on_retry=retried.append)
        api = Awaited(client)
        await api.issue(mint("alice", "USD", 1))
        (idle,) = client._pool._idle
        # The web server closes a kept-alive connection that stays idle (its keepalive).
        for _ in range(600):
            if idle.dropped():
                break
            await asyncio.sleep(0.05)
        assert idle.dropped()
        assert (await api.issue(mint("alice", "USD", 1, 2, tx="more"))).created == 2
        assert retried == [] and client.connections_opened == 2
        await api.close()

    retried: list[Retry] = []
    asyncio.run(run())
