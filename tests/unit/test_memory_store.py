"""InMemoryStore: the reference semantics of a TokenStore."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from sherdlock import Candidate, Claim, ClaimRefused, InMemoryStore, Supply, TokenStore, WalletKey

KEY = WalletKey("alice", "USD")


def claim(tx_id: str, fence: int | None, quantity: int = 1, key: WalletKey = KEY) -> Claim:
    return Claim(tx_id, key, quantity, fence)


@pytest.fixture
def funded(store, key) -> InMemoryStore:
    for token_id in range(1, 11):
        store.add_token(token_id, key.wallet, key.currency, token_id)
    store.add_token(100, "bob", key.currency, 50)
    return store


def test_is_a_token_store(store):
    assert isinstance(store, TokenStore)


def test_a_claim_without_fence_draws_a_strictly_increasing_one(funded):
    fences = [funded.try_lock(claim("tx", None), [Candidate(i, i)]).fence for i in range(1, 6)]
    assert fences == sorted(set(fences))
    assert funded.try_lock(claim("tx", 99), [Candidate(6, 6)]).fence == 99


def test_add_token_validates(store):
    store.add_token(1, "w", "USD", 5)
    with pytest.raises(ValueError):
        store.add_token(1, "w", "USD", 5)
    with pytest.raises(TypeError):
        store.add_token(2, "w", "USD", 5.0)
    with pytest.raises(ValueError):
        store.add_token(3, "w", "USD", -1)


def test_fetch_locks_prefix_reaching_need_and_returns_spare(funded, key, clock):
    result = funded.fetch_and_lock(claim("tx", 1, 12, key), 6)

    rows = result.granted + result.spare
    assert len(rows) == 6 and not result.exhausted
    assert sum(c.quantity for c in result.granted) >= 12
    assert sum(c.quantity for c in result.granted[:-1]) < 12
    assert set(funded.locks()) == {c.token_id for c in result.granted}
    assert result.expires_at == clock() + funded.lease
    assert all(t != 100 for t in (c.token_id for c in rows))


def test_fetch_reports_exhaustion_and_skips_locked(funded, key):
    funded.try_lock(claim("other", 1), [Candidate(1, 1), Candidate(2, 2)])

    result = funded.fetch_and_lock(claim("tx", 2, 52, key), 64)

    assert result.exhausted and result.spare == [] and result.shortfall is None
    assert {c.token_id for c in result.granted} == set(range(3, 11))


def test_fetch_locks_nothing_when_the_free_tokens_cannot_make_up_the_need(funded, key):
    funded.try_lock(claim("other", 1), [Candidate(1, 1), Candidate(2, 2)])

    short = funded.fetch_and_lock(claim("tx", 2, 53, key), 64)
    # A full batch of the largest free tokens, still short: so is the wallet.
    over = funded.fetch_and_lock(replace(claim("tx", 2, 56, key), order="descending"), 4)

    for result in (short, over):
        assert result.granted == [] and result.shortfall == Supply(55, 3)
        assert not result.short_batch
    assert set(funded.locks()) == {1, 2}


def test_a_full_random_batch_that_cannot_cover_locks_nothing_and_says_so(funded, key):
    # Four random tokens of 1-10 never make up 35; the wallet's free tokens (55) do.
    result = funded.fetch_and_lock(claim("tx", 2, 35, key), 4)

    assert result.short_batch and result.granted == [] and result.shortfall is None
    assert len(result.spare) == 4 and funded.locks() == {}

    largest = funded.fetch_and_lock(replace(claim("tx", 2, 35, key), order="descending"), 4)

    # The four largest (34) fall short too, but the wallet can cover 35: all four are locked.
    assert [c.quantity for c in largest.granted] == [10, 9, 8, 7] and not largest.short_batch


def test_every_fetch_says_what_its_batch_held(funded, key):
    funded.try_lock(claim("other", 1), [Candidate(1, 1), Candidate(2, 2)])

    whole = funded.fetch_and_lock(claim("tx", 2, 53, key), 64)  # every free token: 3 to 10
    short = funded.fetch_and_lock(claim("tx", 3, 35, key), 4)
    covered = funded.fetch_and_lock(claim("tx", 4, 3, key), 4)

    rows = covered.granted + covered.spare
    assert (covered.batch_rows, covered.batch_total) == (4, sum(c.quantity for c in rows))
    assert short.short_batch and short.batch_rows == 4 and short.batch_total < 35
    assert (whole.batch_rows, whole.batch_total) == (8, 52) and whole.shortfall is not None


def test_recording_claims_are_recorded_by_the_completing_call_and_refused_once_taken(key, clock):
    store = InMemoryStore(clock=clock, rng=random.Random(3))
    for token_id in range(1, 5):
        store.add_token(token_id, key.wallet, key.currency, 10)

    first = store.try_lock(Claim("tx", key, 15, None, record=True), [Candidate(1, 10)])
    assert first.record is None  # 10 of 15: not complete
    second = store.try_lock(
        Claim("tx", key, 15, first.fence, held=(Candidate(1, 10),), record=True), [Candidate(2, 10)]
    )

    assert second.record == {
        "tx_id": "tx",
        "fence": first.fence,
        "token_ids": [1, 2],
        "strategy": "random",
    }
    with pytest.raises(ClaimRefused):
        store.try_lock(Claim("tx", key, 1, None, record=True), [Candidate(3, 10)])
    store.try_lock(claim("tx", 5), [Candidate(4, 10)])  # not recording: not refused
    assert set(store.locks()) == {1, 2, 4}


def test_fetch_order_is_a_fresh_permutation(funded, key):
    orders = {
        tuple(c.token_id for c in funded.fetch_and_lock(claim("tx", 1, 0, key), 10).spare)
        for _ in range(5)
    }
    assert len(orders) > 1


def test_fetch_with_no_need_locks_nothing(funded, key):
    result = funded.fetch_and_lock(claim("tx", 1, 0, key), 3)
    assert result.granted == [] and result.expires_at is None and len(result.spare) == 3


def test_try_lock_grants_only_free_unspent_tokens(funded, key):
    funded.try_lock(claim("other", 1), [Candidate(1, 1)])
    funded.spend([2], "spender")

    outcome = funded.try_lock(
        claim("tx", 2),
        [Candidate(1, 1), Candidate(2, 2), Candidate(3, 3), Candidate(3, 3), Candidate(999, 1)],
    )

    assert outcome.granted == [Candidate(3, 3)]
    assert funded.locks()[3][:2] == ("tx", 2)
    assert funded.try_lock(claim("tx", 2), [Candidate(3, 3)]).granted == []  # already live-locked


def test_try_lock_reports_store_quantity(funded):
    assert funded.try_lock(claim("tx", 1), [Candidate(4, 999)]).granted == [Candidate(4, 4)]


def test_expired_lock_can_be_taken_over(funded, key, clock):
    funded.try_lock(claim("old", 1), [Candidate(1, 1)])
    clock.advance(funded.lease)

    assert funded.supply(key, "tx").locked_by_others == 0
    assert funded.try_lock(claim("tx", 2), [Candidate(1, 1)]).granted == [Candidate(1, 1)]
    assert funded.locks()[1][:2] == ("tx", 2)
    assert funded.unlock("old", 1) == 0  # the late unlock of the old owner is harmless
    assert 1 in funded.locks()


def test_unlock_touches_only_the_given_fence(funded):
    funded.try_lock(claim("tx", 1), [Candidate(1, 1), Candidate(2, 2)])
    funded.try_lock(claim("tx", 2), [Candidate(3, 3)])

    assert funded.unlock("tx", 1, [3]) == 0
    assert funded.unlock("tx", 1, [1]) == 1
    assert funded.unlock("tx", 1) == 1
    assert set(funded.locks()) == {3}


def test_supply_splits_others_locks(funded, key):
    funded.try_lock(claim("other", 1), [Candidate(10, 10)])
    funded.try_lock(claim("tx", 2), [Candidate(9, 9)])
    funded.spend([1], "x")

    assert funded.supply(key, "tx") == Supply(unspent=54, locked_by_others=10)
    assert funded.supply(key, "tx").available == 44
    assert funded.balance(key) == 54
    assert funded.supply(WalletKey("nobody", "USD"), "tx") == Supply(0, 0)


def test_spend_keeps_lock_rows_and_refuses_double_spends(funded):
    funded.try_lock(claim("tx", 1), [Candidate(1, 1)])
    funded.try_lock(claim("other", 2), [Candidate(2, 2)])

    funded.spend([1, 3], "tx")

    assert funded.is_spent(1) and funded.is_spent(3)
    assert 1 in funded.locks()
    for ids in ([1], [2], [999], [4, 4]):
        with pytest.raises(ValueError):
            funded.spend(ids, "tx")
    assert not funded.is_spent(4)


def test_purge_and_renew(funded, clock):
    funded.try_lock(claim("tx", 1), [Candidate(1, 1)])
    funded.try_lock(claim("tx", 2), [Candidate(2, 2)])
    clock.advance(30)
    assert funded.renew("tx", 1) == 1
    clock.advance(30)

    assert funded.purge_expired() == 1
    assert set(funded.live_locks()) == {1}


def test_fail_next_strikes_once_after_skips(funded, key):
    boom = RuntimeError("boom")
    funded.fail_next("supply", boom, skip=1)

    funded.supply(key, "tx")
    with pytest.raises(RuntimeError) as caught:
        funded.supply(key, "tx")
    funded.supply(key, "tx")

    assert caught.value is boom and funded.calls["supply"] == 3


def test_fail_after_commit_applies_the_call(funded, key):
    funded.fail_next("try_lock", ConnectionError(), after_commit=True)
    with pytest.raises(ConnectionError):
        funded.try_lock(claim("tx", 1), [Candidate(1, 1)])
    assert 1 in funded.locks()


def test_fail_next_rejects_unknown_method(store):
    with pytest.raises(AttributeError):
        store.fail_next("nope", RuntimeError())


def test_validates_arguments(store, key):
    with pytest.raises(ValueError):
        InMemoryStore(lease=0)
    with pytest.raises(ValueError):
        store.fetch_and_lock(claim("tx", 1, 1, key), 0)


def test_same_seed_same_permutation(key, clock):
    def first_fetch() -> list[int]:
        store = InMemoryStore(clock=clock, rng=random.Random(5))
        for token_id in range(20):
            store.add_token(token_id, key.wallet, key.currency, 1)
        return [c.token_id for c in store.fetch_and_lock(claim("tx", 1, 0, key), 20).spare]

    assert first_fetch() == first_fetch()


@pytest.mark.parametrize(
    ("need", "limit"), [(12, 6), (60, 6), (60, 64)], ids=["covered", "short batch", "shortfall"]
)
def test_a_fetch_whose_caller_keeps_no_queue_answers_no_spare(funded, key, need, limit):
    bare = Claim("tx", key, need, 1, spare=False)
    result = funded.fetch_and_lock(bare, limit)
    assert result.spare == []
    assert bool(result.granted) == (need == 12)
    # The same fetch for a caller that keeps a queue is answered the rest of its batch.
    funded.unlock("tx", 1)
    kept = funded.fetch_and_lock(replace(bare, tx_id="tx-2", spare=True), limit)
    assert len(kept.granted) + len(kept.spare) == min(limit, 10)
