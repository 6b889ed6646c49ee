"""Housekeeping removes rate-limit buckets once they are full again, and only then."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from prometheus_client import REGISTRY

from clients.models import RateBucket
from clients.rates import Rate
from clients.throttling import bucket_states, consume
from locks import replica
from locks.housekeeping import run_housekeeping

pytestmark = pytest.mark.django_db(transaction=True)

KEY_RATE, WALLET_RATE = Rate(5, 60.0), Rate(3, 600.0)


@pytest.fixture(autouse=True)
def limits(settings):
    settings.SHERDLOCK_RATE_LIMITS = {
        "selections_per_key": "5/60s",
        "selections_per_wallet": "3/600s",
    }
    replica.reset()
    yield settings
    replica.reset()


def idle(key: str, seconds: float) -> None:
    RateBucket.objects.filter(key=key).update(
        updated_at=F("updated_at") - timedelta(seconds=seconds)
    )


def buckets() -> set[str]:
    return set(RateBucket.objects.values_list("key", flat=True))


def removed_counter() -> float:
    return (
        REGISTRY.get_sample_value("sherdlock_housekeeping_deleted_total", {"kind": "rate_buckets"})
        or 0.0
    )


def test_buckets_idle_for_their_own_period_go_and_the_others_stay():
    for key in (
        "selections_per_key:k-old",
        "selections_per_key:k-30s",
        "selections_per_wallet:w-old",
        "selections_per_wallet:w-300s",
    ):
        consume({key: KEY_RATE if "key" in key else WALLET_RATE})
    idle("selections_per_key:k-old", 61)  # a 60 s bucket idle 61 s: full again
    idle("selections_per_key:k-30s", 30)
    idle("selections_per_wallet:w-old", 601)
    idle("selections_per_wallet:w-300s", 300)  # half its 600 s period: not full yet
    before = removed_counter()
    run = run_housekeeping()
    assert buckets() == {"selections_per_key:k-30s", "selections_per_wallet:w-300s"}
    assert run.buckets_removed == 2
    assert removed_counter() == before + 2


def test_a_removed_bucket_is_exactly_a_full_one():
    rate = WALLET_RATE
    for _ in range(rate.count):
        consume({"selections_per_wallet:busy": rate})
    assert consume({"selections_per_wallet:busy": rate})[0] is False  # drained
    idle("selections_per_wallet:busy", 600)  # one whole period: full again
    full = bucket_states(["selections_per_wallet:busy"])["selections_per_wallet:busy"]
    assert (full.remaining, full.full_in) == (3.0, 0.0)
    run_housekeeping()
    assert buckets() == set()
    # What a client gets next is what a never-seen wallet gets.
    assert (
        [consume({"selections_per_wallet:busy": rate})[0] for _ in range(4)]
        == [consume({"selections_per_wallet:fresh": rate})[0] for _ in range(4)]
        == [True, True, True, False]
    )


def test_removal_goes_in_bounded_batches():
    keys = [f"selections_per_key:k{i}" for i in range(5)]
    for key in keys:
        consume({key: KEY_RATE})
        idle(key, 700)
    seen = []
    first = run_housekeeping(
        batch_size=2, max_batches=2, progress=lambda kind, n: seen.append((kind, n))
    )
    assert first.buckets_removed == 4 and len(buckets()) == 1
    assert [n for kind, n in seen if kind == "rate_buckets"] == [2, 2]
    assert run_housekeeping(batch_size=2, max_batches=2).buckets_removed == 1
    assert buckets() == set()


def test_a_sharded_bucket_is_reported_whole_and_pruned_shard_by_shard(limits):
    limits.SHERDLOCK_RATE_LIMITS = {
        "selections_per_key": "5/60s",
        "selections_per_wallet": "400/60s",
    }
    rate = Rate(400, 60.0)  # 8 shards of 50
    for _ in range(20):
        consume({"selections_per_wallet:hot": rate})
    hot = "selections_per_wallet:hot"
    shards = {key for key in buckets() if key.startswith(f"{hot}#")}
    assert len(shards) > 1
    state = bucket_states([hot])[hot]
    assert 380 <= state.remaining < 381 and state.updated_at is not None  # it replenishes
    idle_one = sorted(shards)[0]
    idle(idle_one, 61)
    assert run_housekeeping().buckets_removed == 1
    assert buckets() == shards - {idle_one}
