"""API clients: hashed keys scoped to wallets and rights, and the shared rate-limit buckets."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from rest_framework_api_key.models import AbstractAPIKey

from common.rules import ID_MAX_LENGTH, NAMESPACE_MAX_LENGTH


class ApiKey(AbstractAPIKey):
    """A client's key; only its hash is stored. Scoped to ``wallets`` (or all) and to rights."""

    wallets = ArrayField(
        models.CharField(max_length=ID_MAX_LENGTH),
        default=list,
        blank=True,
        help_text="Wallets this key may use (ignored when 'all wallets' is set).",
    )
    all_wallets = models.BooleanField(default=False)
    can_issue = models.BooleanField(default=False, help_text="May issue tokens.")
    can_select = models.BooleanField(default=False, help_text="May select, spend and release.")
    can_read = models.BooleanField(default=True, help_text="May read tokens, balances, locks.")
    # Transaction ids (of selections, and of the tokens a client issues or its spends create)
    # are unique per namespace, so clients can neither see nor take each other's.
    namespace = models.CharField(
        max_length=NAMESPACE_MAX_LENGTH,
        blank=True,
        help_text="Keys of one client share a namespace of transaction ids; left empty, the "
        "key gets one of its own. Give a new key of the same client the old key's "
        "namespace to keep its selections.",
    )

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "API key"
        verbose_name_plural = "API keys"

    def save(self, *args, **kwargs) -> None:
        if not self.namespace:
            self.namespace = f"key-{self.prefix}"
        super().save(*args, **kwargs)

    def may_use(self, wallet: str) -> bool:
        return self.all_wallets or wallet in self.wallets

    def namespace_peers(self) -> str:
        """Name the other keys of this key's namespace, oldest first ("no other key")."""
        others = ApiKey.objects.filter(namespace=self.namespace).exclude(pk=self.pk)
        names = [f"{other.prefix} ({other.name})" for other in others.order_by("created")]
        return ", ".join(names) or "no other key"


class RateBucket(models.Model):
    """Rolling rate-limit state shared by every replica: capacity used as of ``updated_at``.

    ``capacity`` units replenish continuously over ``period`` seconds (the limit as of the last
    request): once ``period`` has passed since ``updated_at`` the bucket is full again, and the
    row says no more than its absence would.
    """

    key = models.CharField(max_length=255, primary_key=True)
    used = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()
    capacity = models.FloatField(default=1.0)
    period = models.FloatField(default=1.0)

    def __str__(self) -> str:
        return self.key
