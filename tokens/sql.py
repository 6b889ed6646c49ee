"""The token app's statements: issuing, the supply summary, bulk loading.

``tokens.services`` issues, ``tokens.supply`` keeps the per-currency summary, ``seed_tokens``
loads demo tokens. Composed with ``str.format`` at import (see ``locks.sql``).
"""

from __future__ import annotations

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

# The same as ADD, fed by the rows an INSERT ... RETURNING just wrote (see ISSUE).
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
DRIFT = """
SELECT coalesce(s.currency, r.currency), coalesce(s.supply, 0), coalesce(r.total, 0)
FROM tokens_currencysupply s
FULL JOIN ({recount}) AS r (currency, total) ON r.currency = s.currency
WHERE coalesce(s.supply, 0) <> coalesce(r.total, 0)
ORDER BY 1
""".format(recount=RECOUNT)

# Replace the summary by a recount. The table lock waits for issues in flight and holds new
# ones back until the recount is written, so none is counted twice or lost; selections and
# spends go on (they never touch the summary, and the recount's snapshot sees every spend whole).
REBUILD = [
    "LOCK TABLE tokens_currencysupply IN EXCLUSIVE MODE",
    "DELETE FROM tokens_currencysupply",
    "INSERT INTO tokens_currencysupply (currency, supply) {recount}".format(recount=RECOUNT),
]

# Insert the new tokens (identical re-sends are skipped) and add what was really inserted to
# the per-currency supply summary, in one statement: the summary can never see half an issue.
ISSUE = """
WITH issued AS (
    INSERT INTO tokens_token (namespace, tx_id, "index", wallet, currency, quantity)
    SELECT %s, * FROM unnest(%s::varchar[], %s::integer[], %s::varchar[], %s::varchar[],
                             %s::numeric[])
    ON CONFLICT (namespace, tx_id, "index") DO NOTHING
    RETURNING id, currency, quantity
),
added AS (
{add_supply})
SELECT id FROM issued
""".format(add_supply=ADD_RETURNED.format(source="issued"))

# Transaction ids of this batch that name selections of the namespace. (A selection made at
# the same instant can slip past; its spend then records exactly the outputs it created, so
# neither ever answers with the other's tokens.)
SELECTION_TX_IDS = """
SELECT tx_id FROM locks_selection WHERE namespace = %s AND tx_id = ANY(%s::varchar[])
"""

# Bulk load of demo tokens (seed_tokens), fed row by row through COPY.
COPY_TOKENS = 'COPY tokens_token (tx_id, "index", wallet, currency, quantity) FROM STDIN'
