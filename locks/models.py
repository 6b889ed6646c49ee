"""The shared lock table, the selections that own its rows, and the operators' audit trail."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from tokens.models import CURRENCY_MAX_LENGTH, ID_MAX_LENGTH, MAX_QUANTITY

FENCE_SEQUENCE = "locks_fence_seq"


class NextFence(models.Func):
    """``nextval`` of the fencing sequence: strictly increasing, one number per grant."""

    function = "nextval"
    template = f"%(function)s('{FENCE_SEQUENCE}')"
    output_field = models.BigIntegerField()


class TokenLockQuerySet(models.QuerySet):
    def live(self) -> TokenLockQuerySet:
        return self.filter(expires_at__gt=Now())

    def expired(self) -> TokenLockQuerySet:
        return self.filter(expires_at__lte=Now())

    def of_spent_tokens(self) -> TokenLockQuerySet:
        return self.filter(token__spent_at__isnull=False)


class TokenLock(models.Model):
    """A token held by spender transaction ``spender_tx_id`` under ``fence`` until ``expires_at``.

    The primary key is the token itself, so PostgreSQL guarantees at most one lock row per token:
    locking is an INSERT that either wins or conflicts.
    """

    token = models.OneToOneField(
        "tokens.Token", on_delete=models.CASCADE, primary_key=True, related_name="lock"
    )
    spender_tx_id = models.CharField(max_length=ID_MAX_LENGTH, db_index=True)
    fence = models.BigIntegerField()
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    objects = TokenLockQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="tokenlock_expires_at")]
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__gte=F("created_at")), name="tokenlock_expiry_after_creation"
            ),
        ]

    def __str__(self) -> str:
        return f"lock on token {self.token_id} by {self.spender_tx_id}"

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class Selection(models.Model):
    """One spender transaction's selection: the tokens it locked and what became of them."""

    class Status(models.TextChoices):
        LOCKED = "locked", "locked"
        SPENT = "spent", "spent"
        RELEASED = "released", "released"

    tx_id = models.CharField(max_length=ID_MAX_LENGTH, unique=True)
    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    quantity = models.DecimalField(max_digits=20, decimal_places=0)
    total = models.DecimalField(max_digits=21, decimal_places=0)
    fence = models.BigIntegerField(unique=True, db_default=NextFence())
    token_ids = ArrayField(models.BigIntegerField(), default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.LOCKED)
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField(null=True, blank=True)
    spent_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["wallet", "currency"], name="selection_wallet"),
            models.Index(fields=["-created_at"], name="selection_recent"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(quantity__gt=0) & Q(quantity__lte=MAX_QUANTITY),
                name="selection_quantity_range",
            ),
            models.CheckConstraint(condition=Q(total__gte=F("quantity")),
                                   name="selection_total_covers_quantity"),
        ]

    def __str__(self) -> str:
        return self.tx_id


class LockAudit(models.Model):
    """Who changed locks or tokens by hand (force release, spent-state correction), when, why."""

    created_at = models.DateTimeField(db_default=Now(), db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    action = models.CharField(max_length=32, default="force_release")
    reason = models.TextField()
    spender_tx_ids = ArrayField(models.CharField(max_length=ID_MAX_LENGTH), default=list)
    token_ids = ArrayField(models.BigIntegerField(), default=list)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.action} of {self.count} lock(s) at {self.created_at:%Y-%m-%d %H:%M:%S}"


class HousekeepingRun(models.Model):
    """One pass of the housekeeper: what it removed and how long it took."""

    started_at = models.DateTimeField(db_default=Now(), db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expired_removed = models.PositiveIntegerField(default=0)
    spent_removed = models.PositiveIntegerField(default=0)
    skipped = models.BooleanField(default=False, help_text="another housekeeper held the guard")

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"housekeeping at {self.started_at:%Y-%m-%d %H:%M:%S}"


class FailedSelection(models.Model):
    """A selection that ended without locks: kept for the dashboard's outcome chart."""

    class Outcome(models.TextChoices):
        INSUFFICIENT_FUNDS = "insufficient_funds", "insufficient funds"
        FUNDS_LOCKED = "funds_locked", "funds locked by others"

    created_at = models.DateTimeField(db_default=Now(), db_index=True)
    tx_id = models.CharField(max_length=ID_MAX_LENGTH)
    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    quantity = models.DecimalField(max_digits=20, decimal_places=0)
    outcome = models.CharField(max_length=32, choices=Outcome.choices)
    lock_conflicts = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["wallet", "currency"], name="failedselection_wallet")]

    def __str__(self) -> str:
        return f"{self.tx_id}: {self.outcome}"
