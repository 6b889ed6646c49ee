"""TokenCache: queues per wallet, ttl, LRU bound and local holds."""

from __future__ import annotations

import random
import threading

import pytest

from sherdlock import Candidate, TokenCache, WalletKey
from sherdlock.cache import CALM_AFTER

USD = WalletKey("alice", "USD")
EUR = WalletKey("alice", "EUR")


def cands(*pairs: tuple[int, int]) -> list[Candidate]:
    return [Candidate(t, q) for t, q in pairs]


@pytest.fixture
def cache(clock) -> TokenCache:
    return TokenCache(ttl=1.0, max_wallets=3, clock=clock)


def test_take_pops_until_need_is_reached(cache):
    cache.put(USD, cands((1, 2), (2, 2), (3, 2), (4, 2)))

    assert cache.take(USD, 3) == cands((1, 2), (2, 2))
    assert cache.take(USD, 100) == cands((3, 2), (4, 2))
    assert cache.take(USD, 1) == []
    assert len(cache) == 0


def test_take_of_nothing_or_unknown_key_is_empty(cache):
    cache.put(USD, cands((1, 2)))
    assert cache.take(USD, 0) == []
    assert cache.take(EUR, 5) == []
    assert cache.peek(USD) == cands((1, 2))


def test_put_extends_fresh_queue_without_duplicates(cache):
    cache.put(USD, cands((1, 1), (2, 1)))
    cache.put(USD, cands((2, 1), (3, 1)))

    assert [c.token_id for c in cache.peek(USD)] == [1, 2, 3]


def test_stale_queue_is_dropped_whole(cache, clock):
    cache.put(USD, cands((1, 1), (2, 1)))
    clock.advance(0.999)
    assert cache.peek(USD)

    clock.advance(0.001)

    assert cache.take(USD, 1) == []
    assert len(cache) == 0


def test_put_restamps_but_add_does_not(cache, clock):
    cache.put(USD, cands((1, 1)))
    clock.advance(0.6)
    cache.add(USD, cands((2, 1)))
    clock.advance(0.6)
    assert cache.take(USD, 5) == []  # add kept the old stamp

    cache.put(USD, cands((1, 1)))
    clock.advance(0.6)
    cache.put(USD, cands((2, 1)))
    clock.advance(0.6)
    assert [c.token_id for c in cache.take(USD, 5)] == [1, 2]


def test_put_replaces_a_stale_queue(cache, clock):
    cache.put(USD, cands((1, 1)))
    clock.advance(2)
    cache.put(USD, cands((2, 1)))

    assert [c.token_id for c in cache.peek(USD)] == [2]


def test_add_creates_a_queue_for_new_tokens(cache):
    cache.add(EUR, cands((9, 4)))
    assert cache.take(EUR, 4) == cands((9, 4))


def test_add_without_create_only_extends_a_fresh_existing_queue(cache, clock):
    cache.add(EUR, cands((9, 4)), create=False)
    assert cache.peek(EUR) == [] and len(cache) == 0

    cache.put(USD, cands((1, 1)))
    cache.add(USD, cands((2, 1), (1, 1)), create=False)
    assert [c.token_id for c in cache.peek(USD)] == [1, 2]

    clock.advance(1.0)  # stale: dropped, not revived
    cache.add(USD, cands((3, 1)), create=False)
    assert cache.peek(USD) == [] and len(cache) == 0


def test_add_with_rng_spreads_tokens_through_the_queue(cache):
    queued = cands(*((t, 1) for t in range(100)))
    new = cands(*((t, 1) for t in range(100, 110)))
    orders = []
    for seed in (1, 2):
        cache.invalidate()
        cache.put(USD, queued)
        cache.add(USD, new, create=False, rng=random.Random(seed))
        order = [c.token_id for c in cache.peek(USD)]
        assert sorted(order) == list(range(110))
        assert [t for t in order if t < 100] == list(range(100))  # the rest keeps its order
        orders.append([order.index(c.token_id) for c in new])
    # Not all at the end, and not at the same places for two replicas (seeds).
    assert min(orders[0]) < 100 and orders[0] != orders[1]
    cache.add(USD, new, rng=random.Random(3))  # already queued: no duplicates
    assert len(cache.peek(USD)) == 110


def test_add_with_a_limit_stops_at_that_many_queued(cache):
    cache.put(USD, cands((1, 1), (2, 1)))
    cache.add(USD, cands((1, 1), (3, 1), (4, 1), (5, 1)), limit=4)
    assert [c.token_id for c in cache.peek(USD)] == [1, 2, 3, 4]
    cache.add(USD, cands((6, 1)), limit=4)
    assert len(cache.peek(USD)) == 4


def test_empty_put_does_not_evict(cache):
    for token_id, key in enumerate((USD, EUR, WalletKey("bob", "USD")), start=1):
        cache.put(key, cands((token_id, 1)))
    cache.put(WalletKey("carol", "USD"), [])
    assert len(cache) == 3 and cache.peek(USD)


def test_excluded_and_held_ids_are_dropped_not_returned(cache, clock):
    cache.put(USD, cands((1, 1), (2, 1), (3, 1), (4, 1)))
    cache.hold([2], until=clock() + 5)

    assert cache.take(USD, 2, exclude={1}) == cands((3, 1), (4, 1))
    assert cache.peek(USD) == []


def test_holds_expire_and_can_be_released(cache, clock):
    cache.hold([1, 2], until=clock() + 1, owner=("tx", 1))
    cache.hold([3], until=clock() + 5, owner=("tx", 2))
    assert cache.is_held(1) and cache.is_held(3)

    cache.unhold([1])
    assert not cache.is_held(1) and cache.is_held(2)
    clock.advance(1)
    assert not cache.is_held(2) and cache.is_held(3)
    assert cache.unhold_owner(("tx", 2)) == 1
    assert not cache.is_held(3)


def test_many_expired_holds_are_pruned(cache, clock):
    cache.hold(range(1000), until=clock() + 1)
    clock.advance(2)
    cache.hold(range(1000, 1100), until=clock() + 1)  # crosses the pruning watermark
    assert len(cache._held) == 100


def test_discard_by_key_or_anywhere(cache):
    cache.put(USD, cands((1, 1), (2, 1)))
    cache.put(EUR, cands((3, 1)))

    assert cache.discard(EUR, [1]) == 0
    assert cache.discard(USD, [1, 99]) == 1
    assert cache.discard(None, [3]) == 1
    assert [c.token_id for c in cache.peek(USD)] == [2]
    assert cache.peek(EUR) == [] and len(cache) == 1


def test_discarded_then_readded_token_is_offered_once(cache):
    cache.put(USD, cands((1, 1), (2, 1)))
    cache.discard(USD, [1])
    cache.add(USD, cands((1, 1)))

    taken = cache.take(USD, 10)

    assert sorted(c.token_id for c in taken) == [1, 2]


def test_lazy_removals_are_compacted(cache):
    cache.put(USD, cands(*((t, 1) for t in range(500))))
    cache.discard(USD, range(1, 500))
    assert len(cache._queues[USD].order) < 100
    assert cache.take(USD, 10) == cands((0, 1))


def test_invalidate_one_or_all(cache):
    cache.put(USD, cands((1, 1)))
    cache.put(EUR, cands((2, 1)))

    cache.invalidate(USD)
    assert cache.peek(USD) == [] and cache.peek(EUR)
    cache.invalidate(USD)  # already gone
    cache.invalidate()
    assert len(cache) == 0 and cache.discard(None, [2]) == 0


def test_least_recently_used_queue_is_evicted(cache):
    keys = [WalletKey(f"w{i}", "USD") for i in range(4)]
    for i, key in enumerate(keys[:3]):
        cache.put(key, cands((i, 1)))
    cache.peek(keys[0])  # touch: keys[1] is now least recently used

    cache.put(keys[3], cands((3, 1)))

    assert len(cache) == 3
    assert cache.peek(keys[1]) == []
    assert cache.discard(None, [1]) == 0  # index cleaned with the queue
    assert cache.peek(keys[0]) and cache.peek(keys[3])


def test_token_moves_to_the_wallet_it_was_last_seen_in(cache):
    cache.put(USD, cands((1, 1), (2, 1)))
    cache.put(EUR, cands((1, 1)))

    assert [c.token_id for c in cache.take(USD, 5)] == [2]
    assert [c.token_id for c in cache.take(EUR, 5)] == [1]


def test_concurrent_takes_hand_out_each_candidate_once():
    cache = TokenCache(ttl=60)
    cache.put(USD, cands(*((t, 1) for t in range(5000))))
    taken: list[list[Candidate]] = [[] for _ in range(8)]

    def worker(slot: int) -> None:
        while batch := cache.take(USD, 3):
            taken[slot].extend(batch)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    ids = [c.token_id for batch in taken for c in batch]
    assert sorted(ids) == list(range(5000))


@pytest.mark.parametrize("kwargs", [{"ttl": 0}, {"max_wallets": 0}])
def test_bounds_are_validated(kwargs):
    with pytest.raises(ValueError):
        TokenCache(**kwargs)


def test_a_refused_try_drops_the_queue_and_a_clean_one_keeps_it(cache):
    cache.put(USD, cands((1, 1), (2, 1), (3, 1)))
    cache.tried(USD, offered=1, refused=0)
    assert cache.peek(USD) == cands((1, 1), (2, 1), (3, 1))

    cache.tried(USD, offered=2, refused=1)

    assert cache.peek(USD) == [] and not cache.contested(USD)


def test_a_wallet_whose_queues_keep_being_refused_gets_none_for_one_ttl(cache, clock):
    cache.tried(USD, offered=1, refused=1)
    cache.tried(USD, offered=2, refused=2)
    assert cache.contested(USD) and not cache.contested(EUR)

    cache.put(USD, cands((1, 1), (2, 1)))
    cache.add(USD, cands((3, 1)))
    assert cache.take(USD, 1) == [] and cache.peek(USD) == []
    cache.put(EUR, cands((4, 1)))
    assert cache.take(EUR, 1) == cands((4, 1))

    clock.advance(1.0)
    assert not cache.contested(USD)
    cache.put(USD, cands((1, 1)))
    assert cache.take(USD, 1) == cands((1, 1))


def test_an_occasional_refusal_never_makes_a_wallet_contested(cache):
    for i in range(100):
        cache.tried(USD, offered=1, refused=1 if i % 5 == 0 else 0)
        assert not cache.contested(USD)


def test_a_contested_wallet_tried_again_is_contested_again_at_the_first_refusal(cache, clock):
    cache.tried(USD, offered=1, refused=1)
    cache.tried(USD, offered=1, refused=1)
    clock.advance(1.0)

    cache.tried(USD, offered=1, refused=1)

    assert cache.contested(USD)


def test_contests_are_kept_for_at_most_max_wallets(cache):
    keys = [WalletKey(f"w{i}", "USD") for i in range(5)]
    for key in keys:
        cache.tried(key, offered=1, refused=1)
        cache.tried(key, offered=1, refused=1)

    assert [cache.contested(key) for key in keys] == [False, False, True, True, True]


def test_a_long_ttl_keeps_a_wallet_contested_for_a_second_only(clock):
    cache = TokenCache(ttl=30.0, clock=clock)
    cache.tried(USD, offered=1, refused=1)
    cache.tried(USD, offered=1, refused=1)
    assert cache.contested(USD)

    clock.advance(1.0)

    assert not cache.contested(USD)


def test_each_token_tried_counts_so_a_mostly_refused_batch_is_enough(cache):
    cache.tried(USD, offered=10, refused=2)
    assert not cache.contested(USD)
    cache.tried(EUR, offered=10, refused=7)
    assert cache.contested(EUR)


def test_a_wallet_is_calm_after_calm_after_queued_tokens_locked_in_a_row(cache):
    cache.tried(USD, offered=CALM_AFTER - 1, refused=0)
    assert not cache.calm(USD)
    cache.tried(USD, offered=1, refused=0)
    assert cache.calm(USD)
    assert not cache.calm(EUR)


def test_a_refusal_or_a_lost_fetch_row_ends_the_calm(cache):
    cache.tried(USD, offered=CALM_AFTER, refused=0)
    cache.tried(USD, offered=5, refused=1)
    assert not cache.calm(USD)
    cache.tried(USD, offered=CALM_AFTER, refused=0)
    cache.lost(USD, conflicts=0)
    assert cache.calm(USD)
    cache.lost(USD, conflicts=1)
    assert not cache.calm(USD)


def test_calm_streaks_are_kept_for_at_most_max_wallets(cache):
    keys = [WalletKey(f"w{i}", "USD") for i in range(5)]
    for key in keys:
        cache.tried(key, offered=CALM_AFTER, refused=0)

    assert [cache.calm(key) for key in keys] == [False, False, True, True, True]
