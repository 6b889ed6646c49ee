"""The per-currency unspent supply summary: add issued value, recount, rebuild.

Only code that issues or removes tokens calls ``add``; see ``tokens.models.CurrencySupply``
for why spends never need to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal

from django.db import connection, transaction

from tokens import sql
from tokens.models import CurrencySupply, Token


def add(deltas: Mapping[str, Decimal | int]) -> None:
    """Add ``deltas`` (currency -> value, negative to remove) to the summary.

    Call it inside the transaction that issues or removes the tokens, so both commit or
    neither does.
    """
    wanted = {currency: Decimal(delta) for currency, delta in deltas.items() if delta}
    with connection.cursor() as cursor:
        for statement, sign in ((sql.ADD, 1), (sql.SUBTRACT, -1)):
            currencies = sorted(c for c, delta in wanted.items() if delta * sign > 0)
            if currencies:
                cursor.execute(statement, [currencies, [wanted[c] for c in currencies]])


def unspent_by_currency(tokens: Iterable[Token]) -> dict[str, Decimal]:
    """Sum the quantities of the unspent ones among ``tokens`` per currency."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for token in tokens:
        if token.spent_at is None:
            totals[token.currency] += Decimal(token.quantity)
    return dict(totals)


def summary() -> dict[str, Decimal]:
    """Return the summary: currency -> unspent supply (currencies with none left included)."""
    return dict(CurrencySupply.objects.values_list("currency", "supply"))


def recount() -> dict[str, Decimal]:
    """Return the unspent supply per currency summed from the tokens themselves (a full read)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.RECOUNT)
        return {currency: total for currency, total in cursor.fetchall()}


def drift() -> dict[str, tuple[Decimal, Decimal]]:
    """Return the currencies whose summary differs from a recount: (summary, recount).

    One statement, so the summary and the tokens are read at the same instant: an issue that
    commits meanwhile is seen in both or in neither.
    """
    with connection.cursor() as cursor:
        cursor.execute(sql.DRIFT)
        return {currency: (kept, real) for currency, kept, real in cursor.fetchall()}


def rebuild() -> dict[str, Decimal]:
    """Replace the summary by a recount; return it."""
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in sql.REBUILD:
            cursor.execute(statement)
    return summary()
