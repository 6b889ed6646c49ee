"""Everything an operator needs about one wallet, in a fixed handful of bounded queries.

The wallet page answers "why can't wallet X pay?": its balances per currency, the selections
holding its tokens right now and how long their leases run, its recent locks, selections and
failed selections, and whether a rate limit or its API keys stand in the way. Every list is
the most recent ``LIST_SIZE`` rows, so the page costs the same for a wallet with ten tokens or
a million.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Now
from django.utils import timezone

from clients.models import ApiKey
from clients.throttling import BucketState, bucket_states
from common.knobs import knobs
from locks.models import FailedSelection, Selection, TokenLock
from locks.sql.wallet import BALANCES

LIST_SIZE = 20


@dataclass(frozen=True)
class Balance:
    currency: str
    tokens: int
    unspent: Decimal
    locked_tokens: int
    locked: Decimal  # held by live locks
    expired_locks: int  # expired locks not yet taken over or cleaned up: their tokens are free

    @property
    def available(self) -> Decimal:
        return self.unspent - self.locked


@dataclass(frozen=True)
class Listed:
    """The first LIST_SIZE rows of a list, and whether there were more."""

    rows: list
    more: bool = False

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class KeyState:
    key: ApiKey
    bucket: BucketState | None

    @property
    def usable(self) -> bool:
        return not self.key.revoked and not self.key.has_expired and self.key.can_select


@dataclass(frozen=True)
class WalletOverview:
    wallet: str
    generated_at: datetime
    balances: list[Balance]
    live: Listed  # selections holding live locks, soonest expiry first
    locks: Listed  # lock rows on the wallet's tokens, latest expiry first
    selections: Listed  # every selection, newest first
    failures: Listed  # failed selections, newest first
    bucket: BucketState | None  # the per-wallet rate limit; None when disabled
    keys: Listed  # API keys that may use this wallet, with their per-key rate limit
    notes: list[str] = field(default_factory=list)


def listed(queryset) -> Listed:
    """Evaluate the first LIST_SIZE rows of ``queryset`` (reading one more to tell if more)."""
    rows = list(queryset[: LIST_SIZE + 1])
    return Listed(rows[:LIST_SIZE], more=len(rows) > LIST_SIZE)


def with_states(selections: Listed, now: datetime) -> Listed:
    """Set ``lease`` (live, expired, spent, released) and ``seconds_left`` on each selection."""
    for selection in selections:
        left = (selection.expires_at - now).total_seconds() if selection.expires_at else 0.0
        selection.seconds_left = max(left, 0.0)
        if selection.status != Selection.Status.LOCKED:
            selection.lease = selection.status
        else:
            selection.lease = "live" if left > 0 else "expired"
    return selections


def with_lock_states(locks: Listed, now: datetime) -> Listed:
    """Set ``state`` (live, expired, token spent) on each lock."""
    for lock in locks:
        if lock.token.spent_at is not None:
            lock.state = "token spent"
        else:
            lock.state = "live" if lock.expires_at > now else "expired"
    return locks


def balances(wallet: str) -> list[Balance]:
    with connection.cursor() as cursor:
        cursor.execute(BALANCES, [wallet])
        return [Balance(*row) for row in cursor.fetchall()]


def held_locks():
    """Annotate selections with the lock rows they still hold (same tx id and fence)."""
    held = (
        TokenLock.objects.filter(spender_tx_id=OuterRef("tx_id"), fence=OuterRef("fence"))
        .order_by()
        .values("spender_tx_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Subquery(held)


def live_selections(wallet: str) -> Listed:
    """Return the wallet's selections whose lease runs, soonest expiry first.

    A lease never outlives its selection by more than the longer of LEASE_SECONDS and
    MAX_LEASE_SECONDS (extensions are capped at the latter), so only selections made within
    that window are read, through the created_at index, however long the wallet's history.
    """
    window = timedelta(seconds=max(knobs().lease_seconds, knobs().max_lease_seconds))
    return listed(
        Selection.objects.filter(
            wallet=wallet,
            status=Selection.Status.LOCKED,
            expires_at__gt=Now(),
            created_at__gt=Now() - window,
        )
        .annotate(held=held_locks())
        .order_by("expires_at", "pk")
    )


def wallet_locks(wallet: str) -> Listed:
    """Return the lock rows on the wallet's tokens that expire last, spent tokens' included.

    The lock table holds no wallet of its own. Ordered by expiry, the lock table's index can
    be walked from the latest lease down, each row's token checked by primary key, until the
    list is full; for a wallet with few locks the planner goes from the wallet's tokens
    (the (wallet, id) index) to their lock rows instead.
    """
    return listed(
        TokenLock.objects.filter(token__wallet=wallet)
        .select_related("token")
        .order_by("-expires_at", "-token_id")
    )


def wallet_keys(wallet: str) -> tuple[Listed, BucketState | None]:
    """Return the API keys that may use the wallet, and the wallet's rate-limit bucket.

    Both limits' buckets are read in one query.
    """
    keys = listed(
        ApiKey.objects.filter(Q(all_wallets=True) | Q(wallets__contains=[wallet])).order_by(
            "revoked", "-created"
        )
    )
    wallet_bucket = f"selections_per_wallet:{wallet}"
    states = bucket_states([wallet_bucket, *(f"selections_per_key:{k.prefix}" for k in keys)])
    rows = [KeyState(key, states.get(f"selections_per_key:{key.prefix}")) for key in keys]
    return Listed(rows, keys.more), states.get(wallet_bucket)


def notes(overview: WalletOverview) -> list[str]:
    """Say, from what the page already read, what stands between the wallet and a payment."""
    said = []
    if not overview.balances:
        said.append("The wallet holds no unspent tokens.")
    for balance in overview.balances:
        if balance.locked:
            said.append(
                f"{balance.currency}: {balance.locked:,} of {balance.unspent:,} is "
                f"held by live locks; {balance.available:,} can be selected."
            )
    latest = overview.failures.rows[0] if overview.failures.rows else None
    if latest is not None:
        have = {b.currency: b.available for b in overview.balances}.get(latest.currency, 0)
        said.append(
            f"Last failed selection {timezone.localtime(latest.created_at):%H:%M:%S}: "
            f"{latest.get_outcome_display()} for {latest.quantity:,} {latest.currency} "
            f"({have:,} available now)."
        )
    bucket = overview.bucket
    if bucket is not None and not bucket.allowed_now:
        said.append(
            f"The per-wallet rate limit is spent: a selection is allowed again in "
            f"{(1 - bucket.remaining) * bucket.rate.period / bucket.rate.count:.0f} s."
        )
    if not overview.keys.more and not any(state.usable for state in overview.keys):
        said.append("No active API key with the select right may use this wallet.")
    return said


def wallet_overview(wallet: str) -> WalletOverview:
    """Gather the wallet page."""
    now = timezone.now()
    keys, bucket = wallet_keys(wallet)
    overview = WalletOverview(
        wallet=wallet,
        generated_at=now,
        balances=balances(wallet),
        live=with_states(live_selections(wallet), now),
        locks=with_lock_states(wallet_locks(wallet), now),
        selections=with_states(
            listed(
                Selection.objects.filter(wallet=wallet)
                .annotate(held=held_locks())
                .order_by("-created_at", "-pk")
            ),
            now,
        ),
        failures=listed(
            FailedSelection.objects.filter(wallet=wallet).order_by("-created_at", "-pk")
        ),
        bucket=bucket,
        keys=keys,
    )
    overview.notes.extend(notes(overview))
    return overview
