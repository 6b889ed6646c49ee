"""Rolling rate limits on POST /api/v1/selections/, per API key and per wallet."""

from __future__ import annotations

import math
import random
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from clients.models import RateBucket
from clients.rates import Rate, parse_rate
from clients.throttling import consume
from tests.helpers.api import counts, issue, select, token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "text, rate",
    [
        ("600/60s", Rate(600, 60.0)),
        ("10/1m", Rate(10, 60.0)),
        ("5/h", Rate(5, 3600.0)),
        ("3/0.5s", Rate(3, 0.5)),
        ("1/2d", Rate(1, 172800.0)),
        (" 8 / 4 ", Rate(8, 4.0)),
    ],
)
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", [None, "", "0", "0/60s", "off", "none"])
def test_a_zero_or_missing_limit_disables(text):
    assert parse_rate(text) is None


@pytest.mark.parametrize("text", ["fast", "7", "10/60x", "-1/60s", "10/0s", "1.5/60s"])
def test_a_malformed_limit_is_an_error(text):
    with pytest.raises(ValueError):
        parse_rate(text)


def backdate(key: str, seconds: float) -> None:
    RateBucket.objects.filter(key=key).update(
        updated_at=F("updated_at") - timedelta(seconds=seconds)
    )


def test_a_bucket_replenishes_continuously():
    rate = {"k": Rate(4, 60.0)}  # one unit every 15 s
    assert [consume(rate)[0] for _ in range(5)] == [True, True, True, True, False]
    allowed, wait = consume(rate)
    assert not allowed and 14 < wait <= 15
    backdate("k", 16)
    assert consume(rate)[0] is True
    assert consume(rate)[0] is False  # only one unit came back
    backdate("k", 600)
    assert [consume(rate)[0] for _ in range(5)] == [True, True, True, True, False]
    (bucket,) = RateBucket.objects.all()
    assert (bucket.capacity, bucket.period) == (4, 60)  # what pruning needs to know


def test_both_buckets_are_taken_in_one_statement_and_either_refuses():
    roomy, tight = Rate(10, 60.0), Rate(1, 60.0)
    with CaptureQueriesContext(connection) as queries:
        assert consume({"a": roomy, "b": tight}) == (True, 0.0)
    assert len(queries) == 1
    allowed, wait = consume({"a": roomy, "b": tight})
    assert not allowed and 59 < wait <= 60
    # The attempt counted against the bucket that had room.
    assert RateBucket.objects.get(key="a").used == pytest.approx(2, abs=0.01)


def test_a_busy_bucket_is_split_into_shards_each_with_its_share():
    rate = Rate(400, 60.0)
    assert rate.shards == 8 and Rate(99, 1.0).shards == 1
    rng = random.Random(1)
    for _ in range(40):
        assert consume({"hot": rate}, rng)[0]
    shards = RateBucket.objects.filter(key__startswith="hot#")
    assert shards.count() > 1
    assert {b.capacity for b in shards} == {50}
    assert sum(round(b.used) for b in shards) == 40


class Clock:
    """Retry-After as a bucket that has refilled since ``started`` would give it."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def retry_after(self, response, unit: float) -> bool:
        # One unit every ``unit`` seconds, less what came back while the test ran, rounded up.
        elapsed = time.monotonic() - self.started
        return math.ceil(unit - elapsed) <= int(response["Retry-After"]) <= math.ceil(unit)


@pytest.fixture
def limited(settings):
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": "3/60s", "selections_per_wallet": "0"}
    return settings


def test_selections_over_the_key_limit_are_429_with_retry_after(api, limited):
    issue(api, *[token("m", i, quantity="1") for i in range(10)])
    clock = Clock()
    for i in range(3):
        select(api, f"tx-{i}", "1")
    before = counts()
    response = select(api, "tx-3", "1", expect=429)
    assert response.json()["code"] == "rate_limited"
    assert clock.retry_after(response, 20)  # one unit per 60/3 s
    assert counts() == before
    (bucket,) = RateBucket.objects.filter(key__startswith="selections_per_key:")
    backdate(bucket.key, 20)
    select(api, "tx-3", "1")
    assert clock.retry_after(select(api, "tx-4", "1", expect=429), 20)


def test_reads_and_other_writes_are_not_limited(api, limited):
    issue(api, *[token("m", i, quantity="1") for i in range(4)])
    for i in range(3):
        select(api, f"tx-{i}", "1")
    assert api.get("/api/v1/selections/").status_code == 200
    assert api.get("/api/v1/selections/tx-0/").status_code == 200
    assert api.post("/api/v1/selections/tx-0/release/").status_code == 200
    assert api.post("/api/v1/selections/tx-1/extend/").status_code == 200
    select(api, "tx-3", "1", expect=429)  # the selection bucket itself is empty


def test_the_wallet_limit_holds_across_keys(make_key, client_for, settings):
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": "0", "selections_per_wallet": "2/10s"}
    first, second = (client_for(make_key(name=n)[1]) for n in ("one", "two"))
    issue(first, *[token("m", i, quantity="1") for i in range(5)])
    clock = Clock()
    select(first, "tx-1", "1")
    select(second, "tx-2", "1")
    response = select(second, "tx-3", "1", expect=429)
    assert clock.retry_after(response, 5)
    assert select(first, "tx-4", "1", wallet="bob", expect=None).status_code != 429
    backdate("selections_per_wallet:alice", 5)
    select(first, "tx-3", "1")


def test_a_key_cannot_drain_the_bucket_of_a_wallet_outside_its_scope(
    make_key, client_for, settings
):
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": "0", "selections_per_wallet": "1/60s"}
    outsider = client_for(make_key(wallets=["mallory"], name="m")[1])
    for i in range(3):
        assert select(outsider, f"x-{i}", "1", expect=403).json()["code"] == "permission_denied"
    assert not RateBucket.objects.filter(key="selections_per_wallet:alice").exists()
    owner = client_for(make_key(name="owner")[1])
    issue(owner, token("m", 0, quantity="1"))
    select(owner, "tx", "1")


def test_limits_off_lets_everything_through(api, settings):
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": None, "selections_per_wallet": "0"}
    issue(api, *[token("m", i, quantity="1") for i in range(5)])
    for i in range(5):
        select(api, f"tx-{i}", "1")
    assert not RateBucket.objects.exists()


def test_requests_refused_before_they_lock_count_all_the_same(api, limited):
    # Two invalid requests (charged on their way out, in a statement of their own) and one over
    # the wallet's supply (charged by the statement that found it short) use the key's 3 units.
    issue(api, token("m", 0, quantity="1"))
    clock = Clock()
    for tx_id in ("bad-1", "bad-2"):
        select(api, tx_id, "-1", expect=400)
    assert select(api, "short", "5", expect=409).json()["code"] == "insufficient_funds"
    before = counts()
    response = select(api, "tx-1", "1", expect=429)
    assert response.json()["code"] == "rate_limited" and clock.retry_after(response, 20)
    assert counts() == before  # refused by the statement that would have locked: nothing held


def test_a_request_that_may_wait_is_refused_without_joining_a_queue(api, limited):
    from locks.models import Waiter

    issue(api, *[token("m", i, quantity="1") for i in range(2)])
    clock = Clock()
    for i in range(3):
        select(api, f"tx-{i}", "1", expect=None)
    response = api.post(
        "/api/v1/selections/",
        {"tx_id": "patient", "wallet": "alice", "currency": "USD", "quantity": "1"},
        format="json",
        HTTP_PREFER="wait=5",
    )
    assert response.status_code == 429 and clock.retry_after(response, 20)
    assert not Waiter.objects.exists()


@pytest.mark.parametrize(
    "eur, usd",
    # The first leg (EUR) locks and the second finds too little, so the legs' transaction rolls
    # back; or the first leg already fails.
    [("1", "9"), ("9", "1")],
)
def test_failing_multi_currency_requests_count_like_one_currency(api, limited, eur, usd):
    issue(api, token("m", 0, quantity="1"), token("m", 1, currency="EUR", quantity="1"))
    legs = [{"currency": "EUR", "quantity": eur}, {"currency": "USD", "quantity": usd}]
    clock = Clock()
    for i in range(3):
        body = {"tx_id": f"legs-{i}", "wallet": "alice", "legs": legs}
        response = api.post("/api/v1/selections/", body)
        assert response.status_code == 409 and response.json()["code"] == "insufficient_funds"
    before = counts()
    body = {"tx_id": "legs-3", "wallet": "alice", "legs": legs}
    response = api.post("/api/v1/selections/", body)
    assert response.status_code == 429 and clock.retry_after(response, 20)
    assert counts() == before
    select(api, "one", "1", expect=429)  # the key's bucket is empty for one currency too


def test_repeated_multi_currency_requests_count_like_one_currency(api, limited):
    issue(api, token("m", 0, quantity="1"), token("m", 1, currency="EUR", quantity="1"))
    legs = [{"currency": "EUR", "quantity": "1"}, {"currency": "USD", "quantity": "1"}]
    body = {"tx_id": "legs", "wallet": "alice", "legs": legs}
    assert api.post("/api/v1/selections/", body).status_code == 201
    assert api.post("/api/v1/selections/", body).status_code == 200  # a repeat
    other = {**body, "legs": [{**legs[0], "quantity": "2"}, legs[1]]}
    assert api.post("/api/v1/selections/", other).json()["code"] == "tx_id_conflict"
    assert api.post("/api/v1/selections/", body).status_code == 429


# Cancels the statement that records a selection of tx id "cancelled-…" (as a statement timeout
# or an operator's pg_cancel_backend would), after it took the request's units.
CANCEL_RECORDING = """
CREATE FUNCTION test_cancel_recording() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tx_id LIKE 'cancelled-%' THEN
        RAISE EXCEPTION 'canceling statement' USING ERRCODE = 'query_canceled';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_cancel_recording BEFORE INSERT ON locks_selection
    FOR EACH ROW EXECUTE FUNCTION test_cancel_recording();
"""


@pytest.mark.django_db(transaction=True)
def test_a_selection_whose_locking_statement_fails_is_charged_all_the_same(api, limited):
    issue(api, token("m", 0, quantity="1"))
    with connection.cursor() as cursor:
        cursor.execute(CANCEL_RECORDING)
    try:
        api.raise_request_exception = False
        for i in range(3):
            response = select(api, f"cancelled-{i}", "1", expect=None)
            assert response.status_code not in (200, 201, 429)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_cancel_recording ON locks_selection")
            cursor.execute("DROP FUNCTION test_cancel_recording()")
    before = counts()
    select(api, "tx", "1", expect=429)
    assert counts() == before
