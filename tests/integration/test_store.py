"""The PostgreSQL token store: each statement's guarantees, and the races it must survive."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone
from psycopg.rows import dict_row

from locks.models import TokenLock
from locks.sql import locking
from locks.store import PostgresTokenStore
from sherdlock import Candidate, Claim, WalletKey
from tests.factories import make_lock, make_token, make_tokens
from tokens.models import Token

KEY = WalletKey("alice", "USD")


def claim(tx_id: str, fence: int | None, need: int = 1, key: WalletKey = KEY) -> Claim:
    return Claim(tx_id, key, need, fence)


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


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def _wait_until_blocked(observer: psycopg.Connection, pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = observer.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError("the statement never blocked: the interleaving was not forced")


FETCH = locking.LOCK_STATEMENTS[locking.LockStatement("random")]
FRESH_FETCH = locking.LOCK_STATEMENTS[locking.LockStatement("random", contested=True)]
TRY_LOCK = locking.LOCK_STATEMENTS[locking.LockStatement("given")]

# A stand-in for random() that waits at a gate: FETCH_AND_LOCK calls random() for its pivot
# while executing, i.e. after the statement's snapshot is taken and before the candidate scan.
GATE_SQL = """
CREATE OR REPLACE FUNCTION public.random() RETURNS double precision
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(4242);
    RETURN pg_catalog.random();
END $$
"""


def gated_fetch(db_url, statement: str, locked_meanwhile: int, need: int = 10) -> dict:
    """Run ``statement`` for ``need`` of alice's USD, paused after its snapshot was taken.

    While it waits, another replica locks ``locked_meanwhile`` with the real TRY_LOCK statement
    and commits; then the fetch goes on and its row is returned, by column name.
    """
    admin, replica, other, observer = (_connect(db_url) for _ in range(4))
    try:
        admin.execute(GATE_SQL)
        admin.execute("BEGIN")
        admin.execute("SELECT pg_advisory_xact_lock(4242)")  # close the gate
        # Only the replica resolves random() to the gated stand-in.
        replica.execute("SET search_path = public, pg_catalog")
        replica.row_factory = dict_row  # rows by column name
        result: dict[str, object] = {}

        def run_fetch() -> None:
            try:
                result["row"] = replica.execute(
                    statement,
                    {
                        "wallet": "alice",
                        "currency": "USD",
                        "tx_id": "tx-replica",
                        "fence": 2,
                        "need": need,
                        "limit": 8,
                        "lease": 30.0,
                        "synchronous_commit": None,
                        "spare": True,
                    },
                ).fetchone()
            except Exception as exc:  # surfaced by the assertion below
                result["error"] = exc

        worker = threading.Thread(target=run_fetch)
        worker.start()
        _wait_until_blocked(observer, replica.info.backend_pid)
        granted = other.execute(
            TRY_LOCK,
            {
                "token_ids": [locked_meanwhile],
                "tx_id": "tx-other",
                "fence": 1,
                "lease": 30.0,
                "wallet": "alice",
                "currency": "USD",
                "synchronous_commit": None,
            },
        ).fetchone()
        assert granted[1] == [locked_meanwhile]
        admin.execute("COMMIT")  # open the gate
        worker.join(10)
        assert not worker.is_alive()
        assert "error" not in result, result.get("error")
        return result["row"]
    finally:
        admin.execute("ROLLBACK") if admin.info.transaction_status else None
        admin.execute("DROP FUNCTION IF EXISTS public.random()")
        for conn in (admin, replica, other, observer):
            conn.close()


def test_a_contested_fetch_passes_over_a_lock_committed_after_its_snapshot(db_url):
    """Race 1, on a contested wallet: each token is taken as of the moment it is locked.

    Both tokens are free in the fetch's snapshot; one is locked and committed before the fetch
    reads its batch. Asked for both, the walk looks at each: it never offers the lost one to
    its insert, and takes the other, one lock attempt for one lock.
    """
    lost, free = make_token(quantity=10), make_token(quantity=10)
    row = gated_fetch(db_url, FRESH_FETCH, lost.pk, need=20)
    assert (row["granted_ids"], row["attempted"]) == ([free.pk], 1)
    # The token passed over is taken: not offered back to the cache.
    assert not row["spare_ids"]
    locks = {lock.token_id: lock.spender_tx_id for lock in TokenLock.objects.all()}
    assert locks == {lost.pk: "tx-other", free.pk: "tx-replica"}


def test_lock_committed_after_the_candidate_snapshot_is_reported_not_locked(db_url):
    """Race 1: the candidate read names a token whose lock row commits after its snapshot.

    The replica's FETCH_AND_LOCK is paused after its snapshot is taken and before its candidate
    scan runs; meanwhile another replica locks the token with the real TRY_LOCK statement and
    commits. The replica's anti-join (old snapshot) then passes the token as a candidate.
    """
    token = make_token(quantity=10)
    row = gated_fetch(db_url, FETCH, token.pk)
    assert (row["granted_ids"], row["attempted"]) == (None, 1)  # chosen, then lost to the other
    lock = TokenLock.objects.get(pk=token.pk)
    assert (lock.spender_tx_id, lock.fence) == ("tx-other", 1)


def test_stale_cache_cannot_lock_a_token_whose_spend_is_in_flight_or_committed(db_url):
    """Race 2: a spend commits between a replica's read (its cache) and its lock insert."""
    token = make_token(quantity=10)
    store = PostgresTokenStore(lease=30)
    cached = [Candidate(token.pk, 10)]  # what the replica read before the spend
    spender = _connect(db_url)
    try:
        spender.execute("BEGIN")
        spender.execute("SELECT id FROM tokens_token WHERE id = %s FOR UPDATE", (token.pk,))
        spender.execute(
            "UPDATE tokens_token SET spent_by = 'tx-spend', spent_at = now() WHERE id = %s",
            (token.pk,),
        )
        # A spend that also removes the lock row: the insert must still refuse the token.
        spender.execute("DELETE FROM locks_tokenlock WHERE token_id = %s", (token.pk,))
        started = time.monotonic()
        in_flight = store.try_lock(claim("tx-stale", 5), cached)
        assert in_flight.granted == []
        assert time.monotonic() - started < 2  # skipped, not waited for
        spender.execute("COMMIT")
        assert store.try_lock(claim("tx-stale", 5), cached).granted == []
        assert not TokenLock.objects.filter(pk=token.pk).exists()
    finally:
        spender.close()


def test_expired_lease_of_a_spent_token_is_never_taken_over(db_url):
    token = make_token(quantity=10)
    make_lock(token, "tx-spend", ttl=-5)
    Token.objects.filter(pk=token.pk).update(
        spent_by="tx-spend", spent_at=timezone.now() - timedelta(seconds=1)
    )
    store = PostgresTokenStore(lease=30)
    assert store.try_lock(claim("tx-late", 8), [Candidate(token.pk, 10)]).granted == []
    assert store.fetch_and_lock(claim("tx-late", 8, 10), 4).granted == []
    assert TokenLock.objects.get(pk=token.pk).spender_tx_id == "tx-spend"


def test_concurrent_fetches_skip_each_others_rows_instead_of_waiting(db_url):
    make_tokens(6, quantity=1)
    holder = _connect(db_url)
    try:
        holder.execute("BEGIN")
        held = [
            row[0]
            for row in holder.execute(
                "SELECT id FROM tokens_token ORDER BY id LIMIT 3 FOR UPDATE"
            ).fetchall()
        ]
        result = PostgresTokenStore(lease=30).fetch_and_lock(claim("tx", 1, 6), 10)
        assert {c.token_id for c in result.granted}.isdisjoint(held)
        assert len(result.granted) == 3 and result.conflicts == 3
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("need", [25, 35])
def test_a_contested_take_passes_over_a_token_being_taken_and_stops_at_its_batch_end(db_url, need):
    # Four free tokens of 10 in the snapshot; another transaction holds one's row, as a lock
    # insert does until it commits. The take steps past it to the other three.
    tokens = make_tokens(4, quantity=10)
    holder = _connect(db_url)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT id FROM tokens_token WHERE id = %s FOR UPDATE", [tokens[1].pk])
        result = PostgresTokenStore(lease=30).fetch_and_lock(
            Claim("tx-1", KEY, need, 1, contested=True), 64
        )
        others = {t.pk for t in tokens} - {tokens[1].pk}
        taken = {c.token_id for c in result.granted}
        assert set(TokenLock.objects.values_list("token_id", flat=True)) == taken
        # Three of 10 cover 25; for 35 the take gets all three it can and ends with its batch
        # (the selector refetches for the rest). Passed-over tokens are not offered: no conflict.
        assert taken == others and result.conflicts == 0 and result.shortfall is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
