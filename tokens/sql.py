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
# The identity (namespace, tx_id, index) is unique across wallets, but the table's unique key
# names the wallet (its partition key), so a token whose identity exists in any wallet is
# skipped here (and then reported as a conflict): issues of one transaction id are serialised
# by its claim (CLAIM_ISSUE), so none can slip in between this check and the insert. The
# check reads the identity index of every partition, once per token issued: issuing is not a
# hot path.
ISSUE = """
WITH issued AS (
    INSERT INTO tokens_token (namespace, tx_id, "index", wallet, currency, quantity)
    SELECT %s, d.* FROM unnest(%s::varchar[], %s::integer[], %s::varchar[], %s::varchar[],
                               %s::numeric[]) AS d (tx_id, "index", wallet, currency, quantity)
    WHERE NOT EXISTS (SELECT FROM tokens_token t
                      WHERE t.namespace = %s AND t.tx_id = d.tx_id AND t."index" = d."index")
    ON CONFLICT (namespace, tx_id, "index", wallet) DO NOTHING
    RETURNING id, currency, quantity
),
added AS (
{add_supply})
SELECT id FROM issued
""".format(add_supply=ADD_RETURNED.format(source="issued"))

# Claim the transaction ids of an issue (tokens.models.TxClaim) and row-lock their claims, in
# id order, for the rest of the issue's transaction: issues of one id happen one after the
# other. Answers the ids that name selections of the namespace: those may not be issued under.
# (A selection whose claim commits after this statement's snapshot is found by the lock.)
CLAIM_ISSUE = [
    """
INSERT INTO tokens_txclaim (namespace, tx_id)
SELECT %s, tx_id FROM unnest(%s::varchar[]) AS i (tx_id) ORDER BY tx_id
ON CONFLICT (namespace, tx_id) DO NOTHING
""",
    """
SELECT tx_id, wallet FROM tokens_txclaim WHERE namespace = %s AND tx_id = ANY(%s::varchar[])
ORDER BY tx_id
FOR UPDATE
""",
]

# Whether a token of this identity exists, in any wallet (the ORM's saves: models.Token.save).
IDENTITY_TAKEN = """
SELECT EXISTS (SELECT FROM tokens_token WHERE namespace = %s AND tx_id = %s AND "index" = %s)
"""

# Claim one transaction id for a selection of a wallet, the ORM's way (locks.models.Selection
# .save): it takes over a claim of tokens only; a second selection of the id changes nothing
# (no row: the caller refuses it).
CLAIM_ONE = """
INSERT INTO tokens_txclaim AS c (namespace, tx_id, wallet) VALUES (%s, %s, %s)
ON CONFLICT (namespace, tx_id) DO UPDATE SET wallet = EXCLUDED.wallet
WHERE c.wallet IS NULL AND EXCLUDED.wallet IS NOT NULL
"""

# Bulk load of demo tokens (seed_tokens), fed row by row through COPY.
COPY_TOKENS = 'COPY tokens_token (tx_id, "index", wallet, currency, quantity) FROM STDIN'
