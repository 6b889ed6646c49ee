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

    def with_spender_seen_by(self, namespace: str | None) -> TokenQuerySet:
        """Annotate ``seen_spent_by``: ``spent_by`` if it is a spend of ``namespace``'s.

        Clients sharing a wallet share its tokens, not their transactions. A spend of
        ``namespace`` in the token's wallet left two traces: its selection's claim of the tx id
        (naming that wallet) and its outputs (at least one: they sum to the selection's
        total), tokens of that tx id in ``namespace``, which an issue cannot create under a
        selection's id. None (operators) sees every spender.
        """
        if namespace is None:
            return self.annotate(seen_spent_by=models.F("spent_by"))
        spender = models.OuterRef("spent_by")
        claim = TxClaim.objects.filter(
            namespace=namespace, tx_id=spender, wallet=models.OuterRef("wallet")
        )
        outputs = Token.objects.filter(namespace=namespace, tx_id=spender)
        return self.annotate(
            seen_spent_by=models.Case(
                models.When(
                    models.Exists(claim) & models.Exists(outputs), then=models.F("spent_by")
                ),
                default=None,
            )
        )


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

    # Not a column: ``spent_by`` as one client may see it (TokenQuerySet.with_spender_seen_by).
    seen_spent_by: str | None

    objects = TokenQuerySet.as_manager()

    # The table's primary key is (id, wallet) (migration tokens 0005): Django addresses rows by
    # ``id`` alone, which the sequence keeps unique. It serves every read of tokens by id (a
    # selection's inputs and outputs, the locking statements' re-checks, the admin's pages) and
    # listings of every wallet newest first.
    #
    # Every index below costs every spend: marking the inputs spent is not a HOT update (spent_at
    # is in the partial indexes' predicates), so each index the spent row still belongs to gets
    # an entry, and each output is a new row. An index earns its place by a read that would
    # otherwise scan a wallet or the table. There is none on ``spent_by``: nothing looks tokens
    # up by their spender (a selection's row records the ids of its inputs and outputs), and
    # "spent tokens" filters read spent_at, newest first by the primary key or of one wallet by
    # token_by_wallet.
    #
    # Every CHECK constraint below costs every statement that writes the table, per execution:
    # PostgreSQL keeps a constraint as a node string and parses and prepares it again for each
    # statement that inserts or updates rows (a spend: twice, its update and its insert). Writing
    # them shorter or as one constraint saves little of it. Each one here guards a quantity, a
    # name or the spent marks (``index``'s comes with PositiveIntegerField).

    class Meta:
        constraints = [
            # The identity is (namespace, tx_id, index) across wallets; a unique key of a table
            # partitioned (or distributed) by wallet must name the wallet, so it is enforced
            # per wallet here and across wallets by the transaction-id claim (TxClaim) that
            # every issue takes first. The claim does not make this key redundant: a spend
            # inserts its outputs under its selection's claim without looking for tokens of
            # that identity, and some can exist (a selection saved through the ORM takes over a
            # claim of issued tokens: TxClaim.claim); this key is the one the database enforces,
            # and what refuses such an output in its wallet (output_conflict). Wallet
            # last: lookups by identity alone use it too (an issue's check and its re-read of
            # what it stored, Token.save, the admin's search by tx_id:index, and a listing's
            # test of whether a spender's outputs are the caller's: with_spender_seen_by).
            models.UniqueConstraint(
                fields=["namespace", "tx_id", "index", "wallet"], name="token_identity_unique"
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
            # in id order, so a fetch can start at a random pivot (or at the wallet's first
            # free token) and walk the index.
            models.Index(
                fields=["wallet", "currency", "id"],
                include=["quantity"],
                condition=Q(spent_at__isnull=True),
                name="token_unspent_by_wallet",
            ),
            # Serves fetches in quantity order (the strategies smallest_first and fewest_tokens,
            # a random selection's largest-first fetch after a short batch, the windows of exact
            # and consolidate): they walk a few entries from either end instead of reading and
            # sorting every free token of the wallet. One more entry per token issued or output
            # by a spend (tests/integration/test_plans.py keeps the walk on it).
            models.Index(
                fields=["wallet", "currency", "quantity", "id"],
                condition=Q(spent_at__isnull=True),
                name="token_unspent_by_amount",
            ),
            # Serves a wallet's token listing (API cursor pages, spent or not, and the admin's
            # search by wallet) in id order, spent tokens included, which the partial indexes
            # above leave out; the primary key leads with id, so without this index a page of
            # one wallet walks the tokens of every wallet newer than it
            # (tests/integration/api/test_listing_plans.py keeps the listings on it).
            models.Index(fields=["wallet", "id"], name="token_by_wallet"),
        ]

    def __str__(self) -> str:
        return f"{self.tx_id}:{self.index}"

    def save(self, *args, **kwargs) -> None:
        """Save; a new token claims its transaction id (see TxClaim) as issuing does, and is
        refused (IntegrityError) when its identity is taken in any wallet."""
        from django.db import IntegrityError, connections, transaction

        from tokens import sql

        if not self._state.adding:
            super().save(*args, **kwargs)
            return
        using = kwargs.get("using") or self._state.db or "default"
        namespace = self.namespace if isinstance(self.namespace, str) else ""
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            claim, lock_claims = sql.CLAIM_ISSUE
            cursor.execute(claim, [namespace, [self.tx_id]])
            cursor.execute(lock_claims, [namespace, [self.tx_id]])
            cursor.execute(sql.IDENTITY_TAKEN, [namespace, self.tx_id, self.index])
            if cursor.fetchone()[0]:
                raise IntegrityError(f"token {self.tx_id}:{self.index} exists already")
            super().save(*args, **kwargs)

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


class TxClaim(models.Model):
    """A transaction id in use in a namespace: by a selection (``wallet``) or by issued tokens.

    The one table keyed by transaction id alone, so that "is this id new?" is one lookup
    rather than a read of every wallet's selections and tokens (which live in the wallet's
    partition or shard). A recording selection writes its claim in the statement that writes
    the selection row, naming its wallet: the spend, release and extend of a selection named by
    transaction id find its wallet here. An issue claims its ids with no wallet. Claims are
    never removed, like the selections and tokens they stand for.
    """

    pk = models.CompositePrimaryKey("namespace", "tx_id")
    namespace = models.CharField(max_length=NAMESPACE_MAX_LENGTH, blank=True)
    tx_id = models.CharField(max_length=ID_MAX_LENGTH)
    # The selection's wallet; NULL when the id names issued tokens only.
    wallet = models.CharField(max_length=ID_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001

    def __str__(self) -> str:
        return f"{self.namespace}/{self.tx_id}"

    @classmethod
    def claim(
        cls, namespace: str, tx_id: str, wallet: str | None = None, using: str = "default"
    ) -> bool:
        """Claim ``tx_id`` for tokens (no wallet) or a selection of ``wallet``; True if new.

        A selection may take over a claim of tokens only (its wallet still NULL): the ORM's
        way, which unlike the service's checks nothing else.
        """
        from django.db import connections

        from tokens import sql

        with connections[using].cursor() as cursor:
            cursor.execute(sql.CLAIM_ONE, [namespace, tx_id, wallet])
            return cursor.rowcount > 0
