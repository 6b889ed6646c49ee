"""Statements and fragments of multi-currency selections (one selection, several legs).

A selection with legs is one ``locks_selection`` row: its ``token_ids`` span the legs'
currencies under its one fence, and ``legs`` holds each leg's currency, quantity and total as
JSON ``[{"currency": ..., "quantity": "...", "total": "..."}, ...]`` in currency order
(quantities as strings of digits). Its ``currency``, ``quantity`` and ``total`` are its first
leg's, so every constraint and index of the table holds as for one currency. The legs are
locked by the ordinary locking statements (``locks.sql.locking``) without recording, inside one
transaction with ``RECORD`` (``locks.legs``), so the row and every lock commit together or not
at all. Composed with ``str.format`` at import, like ``locking``.
"""

from __future__ import annotations

from locks.sql.locking import GATE, OPEN

# Write the selection row once every leg is locked, unless the transaction id is already in use
# in the namespace (the recording statements' rule, ``locking.GATE``). The id's claim is written
# first and the row only if it was (``locking.RECORDED``): a concurrent request of the same id
# that claimed it first makes this one write nothing, and the caller then rolls its locks back.
# Answers the row with the tokens as JSON [[id, tx_id, index, quantity, currency], ...] in id
# order, for the response.
RECORD = """
WITH{gate}
claimed AS (
    INSERT INTO tokens_txclaim (namespace, tx_id, wallet)
    SELECT %(namespace)s::text, %(tx_id)s::text, %(wallet)s::text
    WHERE {open}
    ON CONFLICT (namespace, tx_id) DO NOTHING
    RETURNING tx_id
),
recorded AS (
    INSERT INTO locks_selection (namespace, tx_id, wallet, currency, quantity, total, fence,
                                 token_ids, output_ids, status, strategy, legs, created_at,
                                 expires_at)
    SELECT %(namespace)s::text, %(tx_id)s::text, %(wallet)s::text, %(currency)s::text,
           %(quantity)s::numeric, %(total)s::numeric, %(fence)s::bigint, %(token_ids)s::bigint[],
           ARRAY[]::bigint[], 'locked', %(strategy)s::text, %(legs)s::jsonb, clock_timestamp(),
           %(expires_at)s::timestamptz
    WHERE EXISTS (SELECT FROM claimed)
    ON CONFLICT (namespace, tx_id, wallet) DO NOTHING
    RETURNING id, created_at
)
SELECT (SELECT id FROM recorded) AS id, (SELECT created_at FROM recorded) AS created_at,
       (SELECT json_agg(json_build_array(t.id, t.tx_id, t."index", t.quantity, t.currency)
                        ORDER BY t.id)
        FROM tokens_token t
        WHERE t.id = ANY(%(token_ids)s::bigint[]) AND t.wallet = %(wallet)s::text) AS tokens
""".format(gate=GATE, open=OPEN)

# Whether the transaction id already names a selection or tokens in the namespace: asked when
# a leg could not be locked, since the selection of a repeated request holds the very funds
# its repeat finds held.
TAKEN = """
WITH{gate}
SELECT NOT {open} AS taken
""".format(gate=GATE.rstrip(","), open=OPEN)

# A spend's outputs do not conserve a selection's value: for one currency, any output in
# another currency or outputs that do not sum to its total; with legs, per currency, a sum of
# outputs that differs from its leg's total, or an output in a currency that is no leg. Reads
# the spend's ``sel`` and ``asked``.
NOT_CONSERVED = """CASE WHEN (SELECT legs FROM sel) IS NULL THEN
            EXISTS (SELECT FROM asked WHERE currency <> (SELECT currency FROM sel))
            OR (SELECT coalesce(sum(quantity), 0) FROM asked) <> (SELECT total FROM sel)
        ELSE EXISTS (
            SELECT FROM (SELECT currency, sum(quantity) AS total FROM asked GROUP BY currency) a
            FULL JOIN (SELECT l->>'currency' AS currency, (l->>'total')::numeric AS total
                       FROM jsonb_array_elements((SELECT legs FROM sel)) l) w USING (currency)
            WHERE a.total IS DISTINCT FROM w.total)
        END"""

# The (wallet, currency) keys a selection holds tokens of: its own, and its legs'.
KEYS = """SELECT wallet, currency FROM sel
            UNION SELECT (SELECT wallet FROM sel), l->>'currency'
                  FROM jsonb_array_elements((SELECT legs FROM sel)) l"""
