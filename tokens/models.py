"""Tokens: UTXO-like units of value owned by a wallet, in one currency, of an exact quantity."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from common.rules import CURRENCY_MAX_LENGTH, ID_MAX_LENGTH, NAMESPACE_MAX_LENGTH

MAX_QUANTITY = Decimal(2**64 - 1)


class TokenQuerySet(models.QuerySet):
    def unspent(self) -> TokenQuerySet:
        return self.filter(spent_at__isnull=True)

    def spent(self) -> TokenQuerySet:
        return self.filter(spent_at__isnull=False)

    def of(self, wallet: str, currency: str) -> TokenQuerySet:
        return self.filter(wallet=wallet, currency=currency)


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A token as a statement returned it, for an answer: no model instance to build.

    The selection and spend answers show a handful of tokens each; building a ``Token`` model
    for every one of them cost more than the rest of the answer.
    """

    id: int
    tx_id: str
    index: int
    wallet: str
    currency: str
    quantity: Decimal
    namespace: str = ""

    def __str__(self) -> str:
        return f"{self.tx_id}:{self.index}"


class Token(models.Model):
    """An output of transaction ``tx_id`` at ``index``; spent once ``spent_by`` is set.

    Transaction ids belong to a ``namespace``, the API client that issued the token or whose
    spend created it (see ``clients.ApiKey.namespace``), so one client can neither probe nor
    squat another's transaction ids. Operators' tools use the empty namespace.
    """

    namespace = models.CharField(max_length=NAMESPACE_MAX_LENGTH, db_default="", blank=True)
    tx_id = models.CharField(max_length=ID_MAX_LENGTH)
    index = models.PositiveIntegerField()
    wallet = models.CharField(max_length=ID_MAX_LENGTH)
    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH)
    # Minor units up to 2**64-1 need 20 digits; Decimal keeps them exact (never float).
    quantity = models.DecimalField(
        max_digits=20,
        decimal_places=0,
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(MAX_QUANTITY)],
    )
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    # NULL (not "") while unspent, so the spent check constraint and indexes stay exact.
    spent_by = models.CharField(max_length=ID_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    spent_at = models.DateTimeField(null=True, blank=True)

    objects = TokenQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "tx_id", "index"], name="token_identity_unique"
            ),
            models.CheckConstraint(
                condition=Q(quantity__gte=0) & Q(quantity__lte=MAX_QUANTITY),
                name="token_quantity_range",
            ),
            models.CheckConstraint(
                condition=Q(spent_by__isnull=True, spent_at__isnull=True)
                | Q(spent_by__isnull=False, spent_at__isnull=False),
                name="token_spent_fields_together",
            ),
            models.CheckConstraint(
                condition=~Q(wallet="") & ~Q(currency="") & ~Q(tx_id=""),
                name="token_names_not_empty",
            ),
        ]
        indexes = [
            # Serves "unspent tokens of (wallet, currency)" — the selector's candidate query —
            # in id order, so a fetch can start at a random pivot and walk the index.
            models.Index(
                fields=["wallet", "currency", "id"],
                include=["quantity"],
                condition=Q(spent_at__isnull=True),
                name="token_unspent_by_wallet",
            ),
            # Serves a wallet's token listing (API cursor pages and admin search) in id order,
            # spent tokens included, which the partial index above leaves out.
            models.Index(fields=["wallet", "id"], name="token_by_wallet"),
            models.Index(
                fields=["spent_by"], name="token_spent_by", condition=Q(spent_by__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tx_id}:{self.index}"

    @property
    def is_spent(self) -> bool:
        return self.spent_at is not None


class CurrencySupply(models.Model):
    """The unspent value of one currency, kept exact without touching the selection hot path.

    A spend conserves value within its currency (its outputs sum exactly to its inputs, in the
    selection's currency, or it is refused), so the unspent supply of a currency changes only
    when tokens are issued. It is therefore added to where tokens are issued, in the same
    transaction (``tokens.services.issue_tokens``, ``seed_tokens``, the token admin, via
    ``tokens.supply``), and never by selecting, locking, spending or releasing: no trigger, no
    extra statement, and no hot row that a wallet's spends would queue on. Locks do not change
    it either; live-locked value is read from the lock table. ``manage.py supply`` recounts it
    from the tokens, and rebuilds it after tokens were loaded or removed by hand.
    """

    currency = models.CharField(max_length=CURRENCY_MAX_LENGTH, primary_key=True)
    # The sum of many 20-digit quantities: 40 digits leaves room for 10**20 of the largest.
    supply = models.DecimalField(max_digits=40, decimal_places=0, default=Decimal(0))

    class Meta:
        verbose_name_plural = "currency supplies"
        constraints = [
            models.CheckConstraint(condition=Q(supply__gte=0), name="currencysupply_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.currency}: {self.supply}"
