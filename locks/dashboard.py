"""The operators' dashboard figures: one function, a handful of aggregate queries, one dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, FilteredRelation, Q, Sum
from django.db.models.functions import Now, TruncMinute
from django.utils import timezone

from locks.models import FailedSelection, HousekeepingRun, Selection, TokenLock
from tokens.models import Token

EXPIRING_WITHIN = timedelta(seconds=10)
WINDOW = timedelta(hours=1)
TOP = 10


@dataclass(frozen=True)
class CurrencySupply:
    currency: str
    tokens: int
    supply: Decimal
    locked_tokens: int
    locked: Decimal

    @property
    def available(self) -> Decimal:
        return self.supply - self.locked


@dataclass(frozen=True)
class LockCounts:
    live: int
    expiring: int  # live, but expiring within EXPIRING_WITHIN
    expired: int


@dataclass(frozen=True)
class ContendedWallet:
    wallet: str
    currency: str
    funds_locked: int
    insufficient_funds: int
    lock_conflicts: int


@dataclass(frozen=True)
class BusyWallet:
    wallet: str
    live_locks: int


@dataclass(frozen=True)
class MinuteOutcomes:
    minute: datetime
    success: int = 0
    insufficient_funds: int = 0
    funds_locked: int = 0

    @property
    def total(self) -> int:
        return self.success + self.insufficient_funds + self.funds_locked


@dataclass(frozen=True)
class Dashboard:
    generated_at: datetime
    supply: list[CurrencySupply]
    locks: LockCounts
    contended: list[ContendedWallet]
    busiest: list[BusyWallet]
    outcomes: list[MinuteOutcomes] = field(default_factory=list)
    housekeeping: HousekeepingRun | None = None
    last_effective_housekeeping: HousekeepingRun | None = None

    @property
    def housekeeping_age(self) -> float | None:
        """Seconds since the last housekeeping run started."""
        if self.housekeeping is None:
            return None
        return max((self.generated_at - self.housekeeping.started_at).total_seconds(), 0.0)


def currency_supply() -> list[CurrencySupply]:
    """Return unspent supply and live-locked value per currency in one grouped aggregate.

    The WHERE matches the selector's partial index (which INCLUDEs quantity), so PostgreSQL
    may answer from the index alone; live locks join in as a hashed LEFT JOIN in the same
    pass, so the token table is read once, not once per figure.
    """
    rows = (
        Token.objects.unspent()
        .annotate(live=FilteredRelation("lock", condition=Q(lock__expires_at__gt=Now())))
        .values("currency").order_by("currency")
        .annotate(tokens=Count("id"), supply=Sum("quantity"), locked_tokens=Count("live"),
                  locked=Sum("quantity", filter=Q(live__isnull=False)))
    )
    return [
        CurrencySupply(currency=row["currency"], tokens=row["tokens"],
                       supply=row["supply"] or Decimal(0), locked_tokens=row["locked_tokens"],
                       locked=row["locked"] or Decimal(0))
        for row in rows
    ]


def lock_counts() -> LockCounts:
    """Count live, soon-expiring and expired locks by the database clock, in one pass."""
    counts = TokenLock.objects.aggregate(
        live=Count("pk", filter=Q(expires_at__gt=Now())),
        expiring=Count("pk", filter=Q(expires_at__gt=Now(),
                                      expires_at__lte=Now() + EXPIRING_WITHIN)),
        expired=Count("pk", filter=Q(expires_at__lte=Now())),
    )
    return LockCounts(**counts)


def contended_wallets(since: datetime) -> list[ContendedWallet]:
    """Return the wallets whose selections failed most since ``since``, worst first."""
    rows = (
        FailedSelection.objects.filter(created_at__gte=since)
        .values("wallet", "currency").order_by()
        .annotate(
            funds_locked=Count("pk", filter=Q(outcome=FailedSelection.Outcome.FUNDS_LOCKED)),
            insufficient_funds=Count(
                "pk", filter=Q(outcome=FailedSelection.Outcome.INSUFFICIENT_FUNDS)),
            lock_conflicts=Sum("lock_conflicts"),
        )
        .order_by("-funds_locked", "-lock_conflicts", "wallet")[:TOP]
    )
    return [ContendedWallet(**{**row, "lock_conflicts": row["lock_conflicts"] or 0})
            for row in rows]


def busiest_wallets() -> list[BusyWallet]:
    """Return the wallets holding the most live locks."""
    rows = (TokenLock.objects.live().values("token__wallet").order_by()
            .annotate(n=Count("pk")).order_by("-n", "token__wallet")[:TOP])
    return [BusyWallet(wallet=row["token__wallet"], live_locks=row["n"]) for row in rows]


def outcomes_per_minute(now: datetime) -> list[MinuteOutcomes]:
    """Return successful and failed selections per minute over the last WINDOW, oldest first."""
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - WINDOW
    minutes = {start + timedelta(minutes=i): {} for i in range(int(WINDOW.total_seconds()) // 60)}
    successes = (Selection.objects.filter(created_at__gte=start, created_at__lt=end)
                 .annotate(minute=TruncMinute("created_at")).values("minute").order_by()
                 .annotate(n=Count("pk")))
    for row in successes:
        minutes.setdefault(row["minute"], {})["success"] = row["n"]
    failures = (FailedSelection.objects.filter(created_at__gte=start, created_at__lt=end)
                .annotate(minute=TruncMinute("created_at")).values("minute", "outcome")
                .order_by().annotate(n=Count("pk")))
    for row in failures:
        minutes.setdefault(row["minute"], {})[row["outcome"]] = row["n"]
    return [MinuteOutcomes(minute=minute, **counts) for minute, counts in sorted(minutes.items())
            if start <= minute < end]


def build_dashboard(now: datetime | None = None) -> Dashboard:
    """Gather every dashboard figure."""
    now = now or timezone.now()
    return Dashboard(
        generated_at=now,
        supply=currency_supply(),
        locks=lock_counts(),
        contended=contended_wallets(now - WINDOW),
        busiest=busiest_wallets(),
        outcomes=outcomes_per_minute(now),
        housekeeping=HousekeepingRun.objects.first(),
        last_effective_housekeeping=HousekeepingRun.objects.filter(skipped=False).first(),
    )
