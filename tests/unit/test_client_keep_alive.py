"""SherdlockClient.keep_alive against a fake API server: renewals, transient failures, ends."""

from __future__ import annotations

import threading
import time

import pytest

from sherdlock import LeaseKeeper
from sherdlock.client import ClientError
from tests.helpers.fake_api import SELECTED, WAIT, Answer, error


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
