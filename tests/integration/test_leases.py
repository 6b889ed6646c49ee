"""Leases with fencing, on a real PostgreSQL: expiry, renewal, takeover by another replica.

Every test commits (transactional database) so that ``now()`` moves as in production and a
second connection sees the rows.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from locks import replica
from locks.errors import AlreadySpent, LeaseLost
from locks.housekeeping import run_housekeeping
from locks.models import Selection, TokenLock
from locks.services import (
    extend_selection,
    get_selection,
    release_selection,
    select_tokens,
    spend_selection,
)
from sherdlock import FundsLocked
from tests.factories import make_tokens
from tests.helpers.leases import expire, outputs_for, remaining
from tokens.models import Token

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_replica():
    replica.reset()  # each test starts with an empty token cache, built from its settings
    yield
    replica.reset()


@pytest.fixture
def lease(settings):
    """Set the lease and its cap (seconds) for selections made after the call."""

    def configure(seconds: float, cap: float = 600.0) -> None:
        settings.SHERDLOCK = {
            **settings.SHERDLOCK,
            "LEASE_SECONDS": seconds,
            "MAX_LEASE_SECONDS": cap,
        }
        replica.reset()

    return configure


def test_a_stale_holder_whose_tokens_were_taken_over_cannot_spend():
    (token,) = make_tokens(1, quantity=10)
    a, _ = select_tokens("tx-a", "alice", "USD", 10)
    expire("tx-a")
    replica.reset()  # B runs on another replica: its cache knows nothing of A
    b, _ = select_tokens("tx-b", "alice", "USD", 10)
    assert b.token_ids == [token.pk] and b.fence > a.fence
    with pytest.raises(LeaseLost):
        spend_selection("tx-a", outputs_for("tx-a", 10))
    token.refresh_from_db()
    assert token.spent_at is None and not Token.objects.filter(tx_id="tx-a").exists()
    lock = TokenLock.objects.get()
    assert (lock.spender_tx_id, lock.fence) == ("tx-b", b.fence)
    assert Selection.objects.get(tx_id="tx-a").status == Selection.Status.LOCKED
    with pytest.raises(LeaseLost):
        extend_selection("tx-a")
    release_selection("tx-a")  # the stale holder's release must not free B's token
    assert TokenLock.objects.get().spender_tx_id == "tx-b"
    spend_selection("tx-b", outputs_for("tx-b", 10))
    token.refresh_from_db()
    assert token.spent_by == "tx-b"


def test_extend_renews_up_to_the_cap_then_the_lease_runs_out(lease):
    lease(30, cap=45)
    make_tokens(2, quantity=5)
    selection, _ = select_tokens("tx-a", "alice", "USD", 10)
    created = Selection.objects.get(pk=selection.pk).created_at
    renewed = extend_selection("tx-a", seconds=20).selection
    assert renewed.expires_at < created + timedelta(seconds=45)
    capped = extend_selection("tx-a", seconds=300).selection
    assert capped.expires_at == created + timedelta(seconds=45)
    assert set(TokenLock.objects.values_list("expires_at", flat=True)) == {capped.expires_at}
    expire("tx-a")
    with pytest.raises(LeaseLost):
        extend_selection("tx-a")


def test_a_lease_that_runs_out_frees_the_tokens_for_others(lease):
    lease(3)  # outlasts B's refusal, which waits out its retries, on a slow host too
    make_tokens(2, quantity=5)
    a, _ = select_tokens("tx-a", "alice", "USD", 10)
    with pytest.raises(FundsLocked):
        select_tokens("tx-b", "alice", "USD", 10)
    time.sleep(3.3)  # the lease, as the database clock sees it
    replica.reset()
    b, _ = select_tokens("tx-b", "alice", "USD", 10)
    assert sorted(b.token_ids) == sorted(a.token_ids)
    with pytest.raises(LeaseLost):
        spend_selection("tx-a", outputs_for("tx-a", 10))
    assert run_housekeeping(grace_seconds=0).expired_removed == 0  # B's locks are live
    spend_selection("tx-b", outputs_for("tx-b", 10))


def test_selections_whose_locks_were_removed_still_behave():
    make_tokens(2, quantity=5)
    select_tokens("tx-gone", "alice", "USD", 5)
    select_tokens("tx-spent", "alice", "USD", 5)
    outputs = outputs_for("tx-spent", 5)
    spend_selection("tx-spent", outputs)
    expire("tx-gone")
    Token.objects.filter(spent_by="tx-spent").update(spent_at=timezone.now() - timedelta(minutes=1))
    # Readers are told the truth before housekeeping settles it...
    assert get_selection("tx-gone").reported_status == Selection.Status.EXPIRED
    assert not Selection.objects.reported(Selection.Status.LOCKED).filter(tx_id="tx-gone")
    assert Selection.objects.reported(Selection.Status.EXPIRED).get().tx_id == "tx-gone"
    run = run_housekeeping(grace_seconds=5)
    # (The spend removed its own locks: nothing of it is left to purge.)
    assert (run.expired_removed, run.spent_removed) == (1, 0) and remaining() == set()
    # ...which records it, so that stored status and what readers are told agree.
    assert Selection.objects.get(tx_id="tx-gone").status == Selection.Status.EXPIRED
    with pytest.raises(LeaseLost):
        spend_selection("tx-gone", outputs_for("tx-gone", 5))
    with pytest.raises(LeaseLost):
        extend_selection("tx-gone")
    assert release_selection("tx-gone").locks_removed == 0
    repeat = spend_selection("tx-spent", outputs)  # a repeated spend still answers
    assert (repeat.selection.pk, repeat.changed) == (
        Selection.objects.get(tx_id="tx-spent").pk,
        False,
    )
    assert [(t.index, t.quantity) for t in repeat.outputs] == [
        (o.index, o.quantity) for o in outputs
    ]
    with pytest.raises(AlreadySpent):
        release_selection("tx-spent")
