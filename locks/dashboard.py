"""The operators' dashboard figures, each read from a summary or through an index.

Nothing here reads every token: supply comes from the per-currency summary that issuing keeps
(``tokens.models.CurrencySupply``), every lock figure from one statement over the lock table's
indexes (``lock_figures``), outcomes from the ``created_at`` indexes of the last hour, and
what each strategy did in that hour from its selections (``strategies_used``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.db.models import Count, F, Func, IntegerField, Q, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from locks.models import FailedSelection, HousekeepingRun, Selection
from locks.sql.dashboard import LOCK_FIGURES
from tokens.models import CurrencySupply

EXPIRING_WITHIN = timedelta(seconds=10)
WINDOW = timedelta(hours=1)
TOP = 10


@dataclass(frozen=True)
class SupplyRow:
    currency: str
    supply: Decimal  # unspent value, from the supply summary
    locked_tokens: int  # unspent tokens under a live lock
    locked: Decimal  # their value

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
class LockFigures:
    counts: LockCounts
    locked: dict[str, tuple[int, Decimal]]  # currency -> (unspent tokens, value) live-locked
    busiest: list[BusyWallet]


@dataclass(frozen=True)
class MinuteOutcomes:
    minute: datetime
    success: int = 0
    insufficient_funds: int = 0
    funds_locked: int = 0
    no_match: int = 0

    @property
    def total(self) -> int:
        return self.success + self.insufficient_funds + self.funds_locked + self.no_match


@dataclass(frozen=True)
class StrategyRow:
    """What one selection strategy did over the last WINDOW."""

    strategy: str
    selections: int = 0
    failed: int = 0
    inputs: int = 0
    change: Decimal = Decimal(0)

    @property
    def inputs_per_selection(self) -> float | None:
        return self.inputs / self.selections if self.selections else None

    @property
    def change_per_selection(self) -> Decimal | None:
        return self.change / self.selections if self.selections else None


@dataclass(frozen=True)
class Dashboard:
    generated_at: datetime
    supply: list[SupplyRow]
    locks: LockCounts
    contended: list[ContendedWallet]
    busiest: list[BusyWallet]
    outcomes: list[MinuteOutcomes] = field(default_factory=list)
    strategies: list[StrategyRow] = field(default_factory=list)
    housekeeping: HousekeepingRun | None = None
    last_effective_housekeeping: HousekeepingRun | None = None

    @property
    def housekeeping_age(self) -> float | None:
        """Seconds since the last housekeeping run started."""
        if self.housekeeping is None:
            return None
        return max((self.generated_at - self.housekeeping.started_at).total_seconds(), 0.0)


def lock_figures(top: int = TOP) -> LockFigures:
    """Return lock counts, live-locked value per currency and the busiest wallets."""
    counts: dict[str, int] = {}
    locked: dict[str, tuple[int, Decimal]] = {}
    busiest: list[BusyWallet] = []
    with connection.cursor() as cursor:
        cursor.execute(LOCK_FIGURES, {"expiring": EXPIRING_WITHIN.total_seconds(), "top": top})
        for kind, name, n, value in cursor.fetchall():
            if kind == "currency":
                locked[name] = (n, value)
            elif kind == "wallet":
                busiest.append(BusyWallet(wallet=name, live_locks=n))
            else:
                counts[kind] = n
    busiest.sort(key=lambda row: (-row.live_locks, row.wallet))  # UNION ALL keeps no order
    return LockFigures(counts=LockCounts(**counts), locked=locked, busiest=busiest)


def currency_supply(locked: dict[str, tuple[int, Decimal]]) -> list[SupplyRow]:
    """Return the unspent supply per currency from its summary, with its live-locked part."""
    rows = []
    for currency, total in CurrencySupply.objects.order_by("currency").values_list(
        "currency", "supply"
    ):
        tokens, value = locked.get(currency, (0, Decimal(0)))
        rows.append(SupplyRow(currency=currency, supply=total, locked_tokens=tokens, locked=value))
    return rows


def contended_wallets(since: datetime) -> list[ContendedWallet]:
    """Return the wallets whose selections failed most since ``since``, worst first."""
    rows = (
        FailedSelection.objects.filter(created_at__gte=since)
        .values("wallet", "currency")
        .order_by()
        .annotate(
            funds_locked=Count("pk", filter=Q(outcome=FailedSelection.Outcome.FUNDS_LOCKED)),
            insufficient_funds=Count(
                "pk", filter=Q(outcome=FailedSelection.Outcome.INSUFFICIENT_FUNDS)
            ),
            lock_conflicts=Sum("lock_conflicts"),
        )
        .order_by("-funds_locked", "-lock_conflicts", "wallet")[:TOP]
    )
    return [
        ContendedWallet(**{**row, "lock_conflicts": row["lock_conflicts"] or 0}) for row in rows
    ]


def outcomes_per_minute(now: datetime, failed: Counter[str] | None = None) -> list[MinuteOutcomes]:
    """Return successful and failed selections per minute over the last WINDOW, oldest first.

    ``failed``, if given, counts the failures per strategy.
    """
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - WINDOW
    minutes: dict[datetime, dict[str, int]] = {
        start + timedelta(minutes=i): {} for i in range(int(WINDOW.total_seconds()) // 60)
    }
    # COUNT(*), not COUNT(id): with nothing but created_at read, the selection_recent index
    # answers alone (an index-only scan) wherever the visibility map allows.
    successes = (
        Selection.objects.filter(created_at__gte=start, created_at__lt=end)
        .annotate(minute=TruncMinute("created_at"))
        .values("minute")
        .order_by()
        .annotate(n=Count("*"))
    )
    for row in successes:
        minutes.setdefault(row["minute"], {})["success"] = row["n"]
    failures = (
        FailedSelection.objects.filter(created_at__gte=start, created_at__lt=end)
        .annotate(minute=TruncMinute("created_at"))
        .values("minute", "outcome", "strategy")
        .order_by()
        .annotate(n=Count("pk"))
    )
    for row in failures:
        counts = minutes.setdefault(row["minute"], {})
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + row["n"]
        if failed is not None:
            failed[row["strategy"]] += row["n"]
    return [
        MinuteOutcomes(minute=minute, **counts)
        for minute, counts in sorted(minutes.items())
        if start <= minute < end
    ]


def strategies_used(since: datetime, failed: Counter[str]) -> list[StrategyRow]:
    """Return, per strategy, the selections made since ``since``, their inputs and change."""
    rows = (
        Selection.objects.filter(created_at__gte=since)
        .values("strategy")
        .order_by()
        .annotate(
            n=Count("*"),
            inputs=Sum(Func(F("token_ids"), function="cardinality", output_field=IntegerField())),
            change=Sum(F("total") - F("quantity")),
        )
    )
    made = {row["strategy"]: row for row in rows}
    return [
        StrategyRow(
            strategy=name,
            selections=made.get(name, {}).get("n", 0),
            failed=failed.get(name, 0),
            inputs=made.get(name, {}).get("inputs") or 0,
            change=made.get(name, {}).get("change") or Decimal(0),
        )
        for name in sorted(set(made) | set(failed))
    ]


def build_dashboard(now: datetime | None = None) -> Dashboard:
    """Gather every dashboard figure."""
    now = now or timezone.now()
    locks = lock_figures()
    failed: Counter[str] = Counter()
    outcomes = outcomes_per_minute(now, failed)
    return Dashboard(
        generated_at=now,
        supply=currency_supply(locks.locked),
        locks=locks.counts,
        contended=contended_wallets(now - WINDOW),
        busiest=locks.busiest,
        outcomes=outcomes,
        strategies=strategies_used(now - WINDOW, failed),
        housekeeping=HousekeepingRun.objects.first(),
        last_effective_housekeeping=HousekeepingRun.objects.filter(skipped=False).first(),
    )
