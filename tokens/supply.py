"""The per-currency unspent supply summary: add issued value, recount, rebuild.

Only code that issues or removes tokens calls ``add``; see ``tokens.models.CurrencySupply``
for why spends never need to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from decimal import Decimal

from django.db import connection, transaction

from tokens.models import CurrencySupply

# Add each currency's delta to its row, creating the row on first issue. Rows are taken in
# currency order, so two issues of several currencies never deadlock on each other; an issue
# holds its currencies' rows until it commits, which serialises issues of one currency (not
# selections or spends, which never touch this table).
ADD = """
INSERT INTO tokens_currencysupply AS s (currency, supply)
SELECT currency, delta FROM unnest(%s::varchar[], %s::numeric[]) AS d (currency, delta)
ORDER BY currency
ON CONFLICT (currency) DO UPDATE SET supply = s.supply + EXCLUDED.supply
"""

# Take each currency's (negative) delta off its row. Separate from ADD because PostgreSQL checks
# the row an INSERT proposes, negative supply and all, before it finds the conflict.
SUBTRACT = """
UPDATE tokens_currencysupply AS s SET supply = s.supply + d.delta
FROM unnest(%s::varchar[], %s::numeric[]) AS d (currency, delta)
WHERE s.currency = d.currency
"""

# The same as ADD, fed by the rows an INSERT ... RETURNING just wrote (see tokens.services.ISSUE).
ADD_RETURNED = """
INSERT INTO tokens_currencysupply AS s (currency, supply)
SELECT currency, sum(quantity) FROM {source} GROUP BY currency ORDER BY currency
ON CONFLICT (currency) DO UPDATE SET supply = s.supply + EXCLUDED.supply
"""

# The real figure: every unspent token, read from the selector's partial index.
RECOUNT = """
SELECT currency, sum(quantity) FROM tokens_token WHERE spent_at IS NULL GROUP BY currency
"""

# Currencies whose summary differs from the recount, both read from one snapshot.
DRIFT = f"""
SELECT coalesce(s.currency, r.currency), coalesce(s.supply, 0), coalesce(r.total, 0)
FROM tokens_currencysupply s
FULL JOIN ({RECOUNT}) AS r (currency, total) ON r.currency = s.currency
WHERE coalesce(s.supply, 0) <> coalesce(r.total, 0)
ORDER BY 1
"""

# Replace the summary by a recount. The table lock waits for issues in flight and holds new
# ones back until the recount is written, so none is counted twice or lost; selections and
# spends go on (they never touch the summary, and the recount's snapshot sees every spend whole).
REBUILD = [
    "LOCK TABLE tokens_currencysupply IN EXCLUSIVE MODE",
    "DELETE FROM tokens_currencysupply",
    "INSERT INTO tokens_currencysupply (currency, supply) " + RECOUNT,
]


def add(deltas: Mapping[str, Decimal | int]) -> None:
    """Add ``deltas`` (currency -> value, negative to remove) to the summary.

    Call it inside the transaction that issues or removes the tokens, so both commit or
    neither does.
    """
    wanted = {currency: Decimal(delta) for currency, delta in deltas.items() if delta}
    with connection.cursor() as cursor:
        for statement, sign in ((ADD, 1), (SUBTRACT, -1)):
            currencies = sorted(c for c, delta in wanted.items() if delta * sign > 0)
            if currencies:
                cursor.execute(statement, [currencies, [wanted[c] for c in currencies]])


def unspent_by_currency(tokens: Iterable[object]) -> dict[str, Decimal]:
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
        cursor.execute(RECOUNT)
        return {currency: total for currency, total in cursor.fetchall()}


def drift() -> dict[str, tuple[Decimal, Decimal]]:
    """Return the currencies whose summary differs from a recount: (summary, recount).

    One statement, so the summary and the tokens are read at the same instant: an issue that
    commits meanwhile is seen in both or in neither.
    """
    with connection.cursor() as cursor:
        cursor.execute(DRIFT)
        return {currency: (kept, real) for currency, kept, real in cursor.fetchall()}


def rebuild() -> dict[str, Decimal]:
    """Replace the summary by a recount; return it."""
    with transaction.atomic(), connection.cursor() as cursor:
        for statement in REBUILD:
            cursor.execute(statement)
    return summary()
