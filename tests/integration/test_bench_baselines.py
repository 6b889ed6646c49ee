"""The benchmark's baselines are correct selectors: what ours is measured against must be sound.

Each one must lock what it returns and nothing else, answer insufficient funds only when the
wallet's unspent supply is short, answer funds locked when others hold what is needed, hold no
lock after a failure, and spend into payment and change without creating or losing value.
"""

from __future__ import annotations

import random

import pytest

from bench.strategies import BASELINES, build, payment, spend
from bench.strategies.base import Picked
from locks.models import TokenLock
from sherdlock import FundsLocked, InsufficientFunds, WalletKey
from tests.factories import make_lock, make_tokens
from tokens.models import Token

KEY = WalletKey("alice", "USD")

pytestmark = pytest.mark.django_db


@pytest.fixture(params=BASELINES)
def baseline(request):
    return build(request.param, seed=7)


def held(tx_id: str) -> set[int]:
    return set(TokenLock.objects.filter(spender_tx_id=tx_id).values_list("token_id", flat=True))


def unspent(wallet: str = "alice") -> int:
    return sum(int(t.quantity) for t in Token.objects.filter(wallet=wallet, spent_at=None))


def test_a_selection_locks_exactly_its_tokens_under_one_fence(baseline):
    make_tokens(20, quantity=10)
    picked = baseline.select("tx-1", KEY, 35)
    assert picked.total >= 35 and len(picked.tokens) >= 4
    assert held("tx-1") == set(picked.token_ids)
    assert set(TokenLock.objects.values_list("fence", flat=True)) == {picked.fence}
    assert baseline.lock_attempts >= len(picked.tokens)


def test_spending_pays_and_gives_the_change_back_without_creating_value(baseline):
    make_tokens(5, quantity=10)
    picked = baseline.select("tx-1", KEY, 13)
    assert spend(picked, payment(picked.total, 13, "alice", "bob"))
    baseline.spent(picked)
    assert unspent("bob") == 13
    assert unspent("alice") == 50 - 13
    outputs = Token.objects.filter(tx_id="tx-1").order_by("index")
    assert [(t.wallet, int(t.quantity)) for t in outputs] == [("bob", 13), ("alice", 7)]


def test_a_spend_under_a_lost_lock_writes_nothing(baseline):
    make_tokens(3, quantity=10)
    picked = baseline.select("tx-1", KEY, 10)
    stale = Picked(picked.tx_id, picked.key, picked.fence + 1, picked.tokens)
    assert not spend(stale, payment(stale.total, 10, "alice"))
    assert not Token.objects.filter(tx_id="tx-1").exists()
    assert unspent() == 30


def test_insufficient_funds_only_when_the_supply_is_short(baseline):
    make_tokens(3, quantity=10)
    with pytest.raises(InsufficientFunds):
        baseline.select("tx-1", KEY, 31)
    assert not TokenLock.objects.exists()
    assert baseline.select("tx-2", KEY, 30).total == 30


def test_funds_held_by_others_are_funds_locked_and_nothing_stays_locked(baseline):
    tokens = make_tokens(4, quantity=10)
    for token in tokens[:3]:
        make_lock(token, "other")
    with pytest.raises(FundsLocked):
        baseline.select("tx-1", KEY, 20)
    assert not held("tx-1")
    assert baseline.select("tx-2", KEY, 10).token_ids == [tokens[3].pk]


def test_an_expired_lock_row_is_never_taken_for_insufficient_funds(baseline):
    # ON CONFLICT DO NOTHING cannot take a lock over: the token waits for housekeeping, and
    # the wallet is reported as locked, not as short.
    [token] = make_tokens(1, quantity=10)
    make_lock(token, "crashed", ttl=-120)
    with pytest.raises(FundsLocked):
        baseline.select("tx-1", KEY, 5)
    assert not held("tx-1")


def test_release_frees_every_token(baseline):
    make_tokens(10, quantity=10)
    picked = baseline.select("tx-1", KEY, 45)
    baseline.release(picked)
    assert not TokenLock.objects.exists()
    assert baseline.select("tx-2", KEY, 100).total == 100


def test_skip_locked_statement_gives_up_after_six_statements_and_releases():
    # Six statements of sixteen tokens of 1 cover at most 96: a larger request is funds
    # locked (the supply is there), and the 96 locks taken on the way are given back.
    make_tokens(200, quantity=1)
    strategy = build("skip-locked-statement", seed=1)
    with pytest.raises(FundsLocked):
        strategy.select("tx-1", KEY, 150)
    assert not TokenLock.objects.exists()
    assert strategy.lock_attempts >= 96


def test_cache_batch_learns_released_tokens_and_drops_what_others_took():
    tokens = make_tokens(6, quantity=10)
    strategy = build("cache-batch", seed=1)
    first = strategy.select("tx-1", KEY, 10)
    strategy.release(first)
    for token in tokens:
        if token.pk != first.token_ids[0]:
            make_lock(token, "other")
    # Its cache still lists tokens that others now hold: those attempts fail, the selection
    # still finds the one free token.
    assert strategy.select("tx-2", KEY, 10).token_ids == first.token_ids


def test_the_shipped_backoff_and_lease_come_from_the_settings(settings):
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LEASE_SECONDS": 7, "BACKOFF_ATTEMPTS": 0}
    make_tokens(1, quantity=10)
    strategy = build("serialized-advisory", seed=random.randrange(1000))
    assert strategy.knobs.lease == 7 and strategy.knobs.backoff_attempts == 0
    strategy.select("tx-1", KEY, 5)
    lock = TokenLock.objects.get()
    assert round((lock.expires_at - lock.created_at).total_seconds()) == 7
