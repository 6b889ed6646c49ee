"""The shared lock table, the selections that own its rows, and the operators' audit trail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Count, F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from common.rules import CURRENCY_MAX_LENGTH, ID_MAX_LENGTH, NAMESPACE_MAX_LENGTH
from sherdlock.strategies import MAX_TOKENS
from tokens.models import MAX_QUANTITY, TokenRow, TxClaim

if TYPE_CHECKING:
    pass

FENCE_SEQUENCE = "locks_fence_seq"

# Digits of the largest total a selection (or one of its legs) can lock: `consolidate` may take
# up to MAX_TOKENS tokens, each of up to MAX_QUANTITY; every other strategy stops below twice the
# largest quantity.
TOTAL_DIGITS = len(str(MAX_TOKENS * int(MAX_QUANTITY)))


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

    def create_for(self, token, **fields) -> TokenLock:
        """Create a lock on ``token``, copying the token's wallet, currency and quantity."""
        return self.create(
            token=token,
            wallet=token.wallet,
            currency=token.currency,
            quantity=token.quantity,
            **fields,
        )

    def of_spent_tokens(self) -> TokenLockQuerySet:
        return self.filter(token__spent_at__isnull=False)


class TokenLock(models.Model):
    """A token held by spender transaction ``spender_tx_id`` under ``fence`` until ``expires_at``.

    The primary key is the token itself, so PostgreSQL guarantees at most one lock row per token:
    locking is an INSERT that either wins or conflicts.
    """

    # No foreign-key constraint: every lock row is inserted from the token row it locks (under
    # that row's lock) and tokens are never deleted, so the constraint could never fail, while
    # its check would cost every lock insert a trigger and a KEY SHARE lock on the token row.
    # (Deleting a token through the ORM still deletes its lock first.)
    token = models.OneToOneField(
        "tokens.Token",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="lock",
        db_constraint=False,
    )
    spender_tx_id = models.CharField(max_length=ID_MAX_LENGTH)
    fence = models.BigIntegerField()
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    # Copied from the token (which never changes them) by the statement that locks it: the lock
    # table alone then tells what is held where (dashboard, wallet page) and names the wallet,
    # the key a distributed lock table is split by.
    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    quantity = models.DecimalField(max_digits=20, decimal_places=0)

    objects = TokenLockQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["expires_at"], name="tokenlock_expires_at"),
            # Unlocks and spends find a selection's rows by holder; matched exactly, so no
            # pattern-ops twin (which db_index=True on a CharField would add to every insert).
            models.Index(fields=["spender_tx_id"], name="tokenlock_spender"),
        ]
        # Its one CHECK is parsed again at every execution of a locking statement, as every
        # CHECK of a table is for each statement that writes it (docs/performance.md).
        constraints = [
            models.CheckConstraint(
                condition=Q(expires_at__gte=F("created_at")), name="tokenlock_expiry_after_creation"
            ),
        ]

    def __str__(self) -> str:
        return f"lock on token {self.token_id} by {self.spender_tx_id}"

    @classmethod
    def of(cls, token, **fields) -> TokenLock:
        """Return an unsaved lock on ``token``, with the token's wallet, currency and quantity."""
        return cls(
            token=token,
            wallet=token.wallet,
            currency=token.currency,
            quantity=token.quantity,
            **fields,
        )

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class SelectionQuerySet(models.QuerySet):
    def with_state(self) -> SelectionQuerySet:
        """Annotate ``live_locks``: how many of its locks each selection still holds."""
        held = (
            TokenLock.objects.live()
            .filter(spender_tx_id=OuterRef("tx_id"), fence=OuterRef("fence"))
            .order_by()
            .values("spender_tx_id")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return self.annotate(live_locks=Coalesce(Subquery(held), 0))

    def reported(self, status: str) -> SelectionQuerySet:
        """Filter by the status a reader is told (see Selection.reported_status)."""
        locked, expired = Selection.Status.LOCKED, Selection.Status.EXPIRED
        if status == locked:
            return self.filter(status=locked, expires_at__gt=Now())
        if status == expired:
            return self.filter(Q(status=expired) | Q(status=locked, expires_at__lte=Now()))
        return self.filter(status=status)


class Selection(models.Model):
    """One spender transaction's selection: the tokens it locked and what became of them.

    ``status`` is what the last operation on it recorded; a locked selection whose lease ran
    out is reported ``expired``, and one whose locks were taken over or removed ``lost``,
    until housekeeping records that too (``reported_status``).
    """

    class Status(models.TextChoices):
        LOCKED = "locked", "locked"
        SPENT = "spent", "spent"
        RELEASED = "released", "released"
        EXPIRED = "expired", "expired"
        LOST = "lost", "lost"

    namespace = models.CharField(max_length=NAMESPACE_MAX_LENGTH, db_default="", blank=True)
    tx_id = models.CharField(max_length=ID_MAX_LENGTH)
    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    quantity = models.DecimalField(max_digits=20, decimal_places=0)
    total = models.DecimalField(max_digits=TOTAL_DIGITS, decimal_places=0)
    fence = models.BigIntegerField(db_default=NextFence())
    token_ids = ArrayField(models.BigIntegerField(), default=list)
    # The tokens its spend created, in output order: exactly what a repeated spend compares
    # and answers with, whatever else is later issued under the same transaction id.
    output_ids = ArrayField(
        models.BigIntegerField(),
        blank=True,
        db_default=Value([], output_field=ArrayField(models.BigIntegerField())),
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.LOCKED)
    # How its tokens were chosen (sherdlock.STRATEGIES). A database default: the default
    # strategy's statements do not name it.
    strategy = models.CharField(max_length=32, db_default="random", default="random")
    # A multi-currency selection's legs, in currency order: [{"currency", "quantity", "total"}]
    # (amounts as strings of digits); its currency, quantity and total are its first leg's.
    # None for a selection of one currency.
    legs = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField(null=True, blank=True)
    spent_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    # Not columns: what some readers attach to an instance (absent otherwise, so read them
    # with getattr and a default). The tokens it holds or held, and those its spend created,
    # as the answering statement returned them (locks.services); how many of its locks it
    # still holds (SelectionQuerySet.with_state, the read statement; locks.wallet.held_locks
    # as ``held``).
    held_tokens: list[TokenRow]
    created_outputs: list[TokenRow]
    live_locks: int
    held: int | None

    objects = SelectionQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["wallet", "currency"], name="selection_wallet"),
            models.Index(fields=["-created_at"], name="selection_recent"),
            # Housekeeping settles locked selections whose lease ended.
            models.Index(
                fields=["expires_at"], condition=Q(status="locked"), name="selection_locked_expiry"
            ),
        ]
        constraints = [
            # A constraint rather than unique=True: no pattern-ops twin index to maintain.
            # Keys name the wallet (the partition key); (namespace, tx_id) is unique across
            # wallets through its claim (tokens.TxClaim), written with the row.
            models.UniqueConstraint(
                fields=["namespace", "tx_id", "wallet"], name="selection_tx_id_unique"
            ),
            models.UniqueConstraint(fields=["fence", "wallet"], name="selection_fence_unique"),
            models.CheckConstraint(
                condition=Q(quantity__gt=0) & Q(quantity__lte=MAX_QUANTITY),
                name="selection_quantity_range",
            ),
            models.CheckConstraint(
                condition=Q(total__gte=F("quantity")), name="selection_total_covers_quantity"
            ),
        ]

    def __str__(self) -> str:
        return self.tx_id

    def save(self, *args, **kwargs) -> None:
        """Save; a new selection claims its transaction id, as the recording statements do."""
        from django.db import IntegrityError, transaction

        if not self._state.adding:
            super().save(*args, **kwargs)
            return
        using = kwargs.get("using") or self._state.db or "default"
        namespace = self.namespace if isinstance(self.namespace, str) else ""
        with transaction.atomic(using=using):
            if not TxClaim.claim(namespace, self.tx_id, self.wallet, using=using):
                raise IntegrityError(f"transaction id {self.tx_id} names a selection already")
            super().save(*args, **kwargs)

    @classmethod
    def answered(cls, **columns: object) -> Selection:
        """Return the selection a statement wrote or read and answered with, as a row.

        Django's ``__init__`` matches keyword arguments to the fields one by one; values in
        field order take its short way (``from_db``, as for a row the ORM read), at about two
        thirds of the cost. Columns not given are those a statement leaves at their defaults.
        """
        values = {**_ANSWERED_DEFAULTS, "token_ids": [], "output_ids": [], **columns}
        return cls.from_db(None, _SELECTION_COLUMNS, [values[name] for name in _SELECTION_COLUMNS])

    @property
    def reported_status(self) -> str:
        """Return the status as of now: a locked selection may have expired or been lost.

        Its lease ran out (``expired``), or some of its locks were removed or taken over while
        it ran (``lost``; known when the selection was read ``with_state``).
        """
        if self.status != self.Status.LOCKED:
            return self.status
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return self.Status.EXPIRED
        live = getattr(self, "live_locks", None)
        if live is not None and live < len(self.token_ids):
            return self.Status.LOST
        return self.Status.LOCKED


_SELECTION_COLUMNS = [field.attname for field in Selection._meta.concrete_fields]
_ANSWERED_DEFAULTS: dict[str, object] = {
    "namespace": "",
    "status": Selection.Status.LOCKED,
    "strategy": "random",
    "legs": None,
    "expires_at": None,
    "spent_at": None,
    "released_at": None,
}


class LockAudit(models.Model):
    """Who changed locks or tokens by hand (force release, spent-state correction), when, why."""

    created_at = models.DateTimeField(db_default=Now(), db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # force_release (lock admin), release_selection and extend_selection (wallet page)
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
    buckets_removed = models.PositiveIntegerField(
        default=0, help_text="rate-limit buckets removed after idling a full period"
    )
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
        NO_MATCH = "no_match", "no set meets the strategy"

    created_at = models.DateTimeField(db_default=Now(), db_index=True)
    namespace = models.CharField(max_length=NAMESPACE_MAX_LENGTH, db_default="", blank=True)
    tx_id = models.CharField(max_length=ID_MAX_LENGTH)
    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    quantity = models.DecimalField(max_digits=20, decimal_places=0)
    outcome = models.CharField(max_length=32, choices=Outcome.choices)
    strategy = models.CharField(max_length=32, db_default="random", default="random")
    lock_conflicts = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["wallet", "currency"], name="failedselection_wallet")]

    def __str__(self) -> str:
        return f"{self.tx_id}: {self.outcome}"


class Waiter(models.Model):
    """A request waiting for funds of one wallet/currency that others hold (``Prefer: wait``).

    Waiters of a key are served in the order of their ids (arrival): whatever frees that key's
    funds wakes the oldest live one. A row outlives its request only if the process died; it
    stops counting at ``expires_at`` (the request's deadline) and housekeeping removes it.
    The table is unlogged: after a crash of the database there is nobody left to wait.
    """

    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["wallet", "currency", "id"], name="waiter_queue")]

    def __str__(self) -> str:
        return f"waiter {self.pk} for {self.wallet}/{self.currency}"
