"""The PostgreSQL token store: each statement's guarantees.

The races the statements must survive, forced with concurrent sessions, are in
``tests/integration/test_store_races.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import connections
from django.utils import timezone

from locks.models import TokenLock
from locks.store import PostgresTokenStore
from sherdlock import Candidate, Claim
from tests.factories import make_lock, make_token, make_tokens
from tests.helpers.claims import KEY, claim
from tokens.models import Token


@pytest.fixture
def store() -> PostgresTokenStore:
    return PostgresTokenStore(lease=30)


def candidates(tokens) -> list[Candidate]:
    return [Candidate(t.pk, int(t.quantity)) for t in tokens]


@pytest.mark.django_db
class TestStatements:
    def test_fetch_and_lock_locks_a_prefix_covering_need_and_returns_the_rest(self, store):
        make_tokens(10, quantity=10)
        result = store.fetch_and_lock(claim("tx-1", 7, 25), 64)
        assert [c.quantity for c in result.granted] == [10, 10, 10]
        assert len(result.spare) == 7 and result.exhausted and result.conflicts == 0
        locks = TokenLock.objects.all()
        assert {lock.token_id for lock in locks} == {c.token_id for c in result.granted}
        assert {(lock.spender_tx_id, lock.fence) for lock in locks} == {("tx-1", 7)}
        assert result.expires_at == min(lock.expires_at for lock in locks)

    def test_a_contested_fetch_locks_a_covering_prefix_too(self, store):
        make_tokens(10, quantity=10)
        contested = Claim("tx-1", KEY, 25, 7, contested=True)
        result = store.fetch_and_lock(contested, 64)
        assert [c.quantity for c in result.granted] == [10, 10, 10]
        assert len(result.spare) == 7 and result.exhausted and result.conflicts == 0
        locks = TokenLock.objects.all()
        assert {lock.token_id for lock in locks} == {c.token_id for c in result.granted}
        assert {(lock.spender_tx_id, lock.fence) for lock in locks} == {("tx-1", 7)}

    @pytest.mark.parametrize("contested", [True, False])
    def test_a_fetch_whose_caller_keeps_no_queue_answers_no_spare(self, store, contested):
        # A replica keeps no queue of a contested wallet, nor of one it has not selected from
        # lately (a cold one).
        make_tokens(10, quantity=10)
        bare = Claim("tx-1", KEY, 25, 7, contested=contested, spare=False)
        result = store.fetch_and_lock(bare, 64)
        assert [c.quantity for c in result.granted] == [10, 10, 10]
        assert result.spare == [] and result.exhausted and result.conflicts == 0
        assert set(TokenLock.objects.values_list("token_id", flat=True)) == {
            c.token_id for c in result.granted
        }
        # A short wallet is still told apart from a short batch.
        short = store.fetch_and_lock(
            Claim("tx-2", KEY, 71, 8, contested=contested, spare=False), 64
        )
        assert short.granted == [] and short.shortfall is not None and short.spare == []

    def test_cold_and_contested_fetches_try_the_wallets_first_free_tokens_a_warm_one_walks_on(
        self, store
    ):
        # A cold key's fetch (no queue kept, not contested) and a contested key's read their
        # batch from the wallet's first free token; a warm one's walk starts at a random point
        # of the wallet. Only the warm one's caller asks for the rest of its batch.
        tokens = make_tokens(40, quantity=1)
        make_lock(tokens[0], "other")
        Token.objects.filter(pk=tokens[1].pk).update(spent_by="tx-x", spent_at=timezone.now())
        front = {t.pk for t in tokens[2:10]}
        kinds = {
            "cold": {"spare": False},
            "warm": {"spare": True},
            "contested": {"spare": False, "contested": True},
        }
        taken: dict[str, set[int]] = {kind: set() for kind in kinds}
        for n in range(20):
            for kind, terms in kinds.items():
                tx_id = f"tx-{n}-{kind}"
                result = store.fetch_and_lock(Claim(tx_id, KEY, 1, **terms), 8)
                assert len(result.granted) == 1 and result.batch_rows == 8
                assert (result.spare != []) == (kind == "warm")
                taken[kind].add(result.granted[0].token_id)
                store.unlock(tx_id, result.fence, None, KEY.wallet)
        assert taken["cold"] <= front and taken["contested"] <= front
        assert taken["warm"] - front, "a warm fetch never went past the wallet's first free tokens"

    def test_a_contested_fetch_takes_no_token_held_spent_or_short(self, store):
        tokens = make_tokens(4, quantity=5)
        make_lock(tokens[0], "other")
        Token.objects.filter(pk=tokens[1].pk).update(spent_by="tx-x", spent_at=timezone.now())
        short = store.fetch_and_lock(Claim("tx-1", KEY, 11, 1, contested=True), 64)
        assert short.granted == [] and short.shortfall is not None
        assert not TokenLock.objects.filter(spender_tx_id="tx-1").exists()
        result = store.fetch_and_lock(Claim("tx-2", KEY, 10, 2, contested=True), 64)
        assert {c.token_id for c in result.granted} == {tokens[2].pk, tokens[3].pk}

    def test_fetch_skips_live_locks_spent_tokens_and_other_wallets(self, store):
        tokens = make_tokens(4)
        make_lock(tokens[0], "other")
        Token.objects.filter(pk=tokens[1].pk).update(spent_by="tx-x", spent_at=timezone.now())
        make_tokens(3, wallet="bob")
        make_tokens(3, currency="EUR")
        result = store.fetch_and_lock(claim("tx-1", 1, 20), 64)
        assert {c.token_id for c in result.granted} == {tokens[2].pk, tokens[3].pk}
        assert result.spare == [] and result.shortfall is None

    def test_fetch_locks_nothing_when_all_free_tokens_cannot_make_up_the_need(self, store):
        tokens = make_tokens(6, quantity=5)
        make_lock(tokens[0], "other")
        largest = replace(claim("tx-1", 1, 26), order="descending")
        # The whole wallet in one batch; a full batch of its largest tokens, short too.
        for asked, limit in ((claim("tx-1", 1, 26), 64), (largest, 2)):
            result = store.fetch_and_lock(asked, limit)
            assert result.granted == [] and result.conflicts == 0 and not result.short_batch
            assert (result.shortfall.unspent, result.shortfall.locked_by_others) == (30, 5)
        assert store.fetch_and_lock(claim("tx-1", 1, 31), 64).shortfall.unspent == 30
        assert list(TokenLock.objects.values_list("spender_tx_id", flat=True)) == ["other"]

    @pytest.mark.parametrize("contested", [False, True])
    def test_a_full_random_batch_that_cannot_cover_locks_nothing_and_says_so(
        self, store, contested
    ):
        make_tokens(20, quantity=1)
        large = [make_token(quantity=q) for q in (30, 40, 50)]
        # Two tokens make at most 50 + 40 of the 91 asked: a batch of two is short.
        asked = Claim("tx-1", KEY, 91, 1, contested=contested)
        result = store.fetch_and_lock(asked, 2)
        assert result.short_batch and result.granted == [] and result.shortfall is None
        assert len(result.spare) == 2 and not TokenLock.objects.exists()
        # The largest first: 50 + 40 + 30 (120) covers 91, and the fourth is left as spare.
        result = store.fetch_and_lock(replace(asked, order="descending"), 4)
        assert [c.token_id for c in result.granted] == [t.pk for t in large]
        assert not result.short_batch and len(result.spare) == 1
        locks = TokenLock.objects.values_list("token_id", flat=True)
        assert set(locks) == {t.pk for t in large}

    def test_fetch_takes_over_an_expired_lock_with_the_new_fence(self, store):
        token = make_token()
        make_lock(token, "crashed", fence=1, ttl=-10)
        result = store.fetch_and_lock(claim("tx-2", 9, 5), 8)
        assert [c.token_id for c in result.granted] == [token.pk]
        lock = TokenLock.objects.get()
        assert (lock.spender_tx_id, lock.fence) == ("tx-2", 9) and not lock.is_expired

    def test_fetch_limit_bounds_rows_and_reports_not_exhausted(self, store):
        make_tokens(20, quantity=1)
        result = store.fetch_and_lock(claim("tx", 1, 1), 5)
        assert len(result.granted) == 1 and len(result.spare) == 4
        assert not result.exhausted

    @pytest.mark.parametrize("contested", [True, False])
    def test_a_fetch_says_what_its_batch_held(self, store, contested):
        make_tokens(20, quantity=3)
        covered = store.fetch_and_lock(replace(claim("tx", 1, 5), contested=contested), 8)
        # A full batch that cannot cover the need: the wallet's tokens may, so nothing is locked.
        short = store.fetch_and_lock(replace(claim("tx-2", 2, 30), contested=contested), 8)
        assert (covered.batch_rows, covered.batch_total) == (8, 24) and len(covered.granted) == 2
        assert short.short_batch and (short.batch_rows, short.batch_total) == (8, 24)

    def test_fetch_order_is_a_fresh_permutation(self, store):
        make_tokens(50, quantity=1)
        firsts = set()
        for i in range(30):
            result = store.fetch_and_lock(claim(f"tx-{i}", i + 1), 50)
            firsts.add(result.granted[0].token_id)
            store.unlock(f"tx-{i}", i + 1)
        assert len(firsts) > 5

    def test_fetch_from_an_empty_wallet_is_exhausted(self, store):
        result = store.fetch_and_lock(claim("tx", 1, 1), 5)
        assert result.granted == [] and result.spare == [] and result.exhausted

    def test_try_lock_grants_only_free_unspent_tokens(self, store):
        free, locked, spent, expired = make_tokens(4)
        make_lock(locked, "other")
        make_lock(expired, "gone", ttl=-5)
        Token.objects.filter(pk=spent.pk).update(spent_by="s", spent_at=timezone.now())
        outcome = store.try_lock(claim("tx", 3), candidates([free, locked, spent, expired]))
        assert {c.token_id for c in outcome.granted} == {free.pk, expired.pk}
        assert TokenLock.objects.get(pk=locked.pk).spender_tx_id == "other"

    def test_try_lock_of_nothing_sends_nothing(self, store):
        assert store.try_lock(claim("tx", 1), []).granted == []
        assert store.round_trips == 0

    def test_unlock_removes_only_this_selections_rows(self, store):
        a, b, c = make_tokens(3)
        store.try_lock(claim("tx", 1), candidates([a, b]))
        make_lock(c, "tx", fence=2)  # same tx id, newer grant
        assert store.unlock("tx", 1, [a.pk]) == 1
        assert store.unlock("tx", 1) == 1
        assert list(TokenLock.objects.values_list("token_id", flat=True)) == [c.pk]

    def test_supply_counts_unspent_and_live_locks_of_others(self, store):
        a, b, c, d = make_tokens(4, quantity=5)
        make_lock(a, "other")
        make_lock(b, "me")
        make_lock(c, "other", ttl=-60)
        Token.objects.filter(pk=d.pk).update(spent_by="s", spent_at=timezone.now())
        supply = store.supply(KEY, "me")
        assert (supply.unspent, supply.locked_by_others) == (15, 5)

    def test_a_claim_without_fence_draws_one_in_the_locking_statement(self, store):
        tokens = make_tokens(5)
        fences = [store.try_lock(claim("tx", None), candidates([t])).fence for t in tokens[:3]]
        fences.append(store.fetch_and_lock(claim("tx", None), 4).fence)
        assert fences == sorted(set(fences))
        assert store.round_trips == 4  # no statement of its own
        assert store.fetch_and_lock(claim("tx", 777), 4).fence == 777

    def test_largest_quantities_stay_exact(self, store):
        big = 2**64 - 1
        make_token(quantity=big)
        make_token(quantity=big)
        result = store.fetch_and_lock(claim("tx", 1, 2 * big), 4)
        assert sum(c.quantity for c in result.granted) == 2 * big
        assert store.supply(KEY, "tx").unspent == 2 * big

    def test_a_locking_call_or_an_unlock_looks_its_connection_up_once(self, store, monkeypatch):
        # Django finds a thread's connection through a context-local lookup that costs
        # microseconds; the hot calls pay it once and hand the connection on.
        tokens = make_tokens(4, quantity=5)
        handler = type(connections)
        looked_up = []
        original = handler.__getitem__

        def counted(self, alias):
            looked_up.append(alias)
            return original(self, alias)

        monkeypatch.setattr(handler, "__getitem__", counted)
        calls = [
            lambda: store.fetch_and_lock(replace(claim("tx", 1, 5), contested=True), 4),
            lambda: store.try_lock(claim("tx", 1), candidates(tokens[2:3])),
            lambda: store.unlock("tx", 1, None, KEY.wallet),
        ]
        for call in calls:
            looked_up.clear()
            call()
            assert looked_up == ["default"]
