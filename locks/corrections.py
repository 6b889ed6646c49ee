"""Audited corrections of a token's spent state, the only way the admin may change it."""

from __future__ import annotations

import logging

from django.db import transaction

from locks.models import LockAudit, Selection
from tokens import supply
from tokens.models import Token

logger = logging.getLogger(__name__)


def mark_unspent(queryset, user, reason: str) -> tuple[object | None, list[str]]:
    """Clear the spent mark of the tokens in ``queryset`` whose spend left nothing behind.

    A token is refused if it is not spent, or if what spent it exists: a spent selection of
    that transaction, or any output of it. Un-spending those would count their value twice.
    Return the audit record (None when nothing was changed) and why each refused token was.
    """
    with transaction.atomic():
        # Token rows first, locked: a concurrent spend of one of them (which locks them too)
        # either committed before (and is seen below) or waits until this one is done.
        tokens = list(queryset.select_for_update(of=("self",)).order_by("pk"))
        spenders = {token.spent_by for token in tokens if token.spent_by is not None}
        settled = set(
            Selection.objects.filter(tx_id__in=spenders, status=Selection.Status.SPENT).values_list(
                "tx_id", flat=True
            )
        )
        settled |= set(Token.objects.filter(tx_id__in=spenders).values_list("tx_id", flat=True))
        refused, fixed = [], []
        for token in tokens:
            if token.spent_by is None:
                refused.append(f"{token}: not spent")
            elif token.spent_by in settled:
                refused.append(
                    f"{token}: spent by transaction {token.spent_by}, whose spend "
                    "is recorded (a spent selection or its outputs)"
                )
            else:
                fixed.append(token)
        if not fixed:
            return None, refused
        Token.objects.filter(pk__in=[token.pk for token in fixed]).update(
            spent_by=None, spent_at=None
        )
        # Their value is unspent again: the currency's supply grows by it, in this transaction.
        regained: dict[str, int] = {}
        for token in fixed:
            regained[token.currency] = regained.get(token.currency, 0) + int(token.quantity)
        supply.add(regained)
        audit = LockAudit.objects.create(
            user=user,
            action="mark_unspent",
            reason=reason,
            count=len(fixed),
            spender_tx_ids=sorted({token.spent_by for token in fixed}),
            token_ids=[token.pk for token in fixed],
        )
    logger.warning("%s marked %d token(s) unspent: %s", user, len(fixed), reason)
    return audit, refused
