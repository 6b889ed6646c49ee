"""What no run may break, read from the database's own rows after the run.

Every check reads what the database recorded (selection rows and their timestamps, token rows,
lock rows), never what the processes under test say they did: a double grant that a replica
failed to notice, or recorded at the wrong moment, is still found. One clock stamps every row
(the server's), so the holds of different processes compare exactly.

- conservation: the unspent value is what was issued (in all, or per currency), and the
  recorded supply summary agrees with the tokens;
- each spend: its inputs were spent by it alone, and its outputs are worth its inputs, per
  currency;
- holds: no two selections held a token at once, none held a token after it was spent, and no
  spend happened after its lease had ended;
- live locks: each belongs to a selection that is still locked and holds that token.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

# Runs one statement (its parameters in %s style) and returns its rows.
Query = Callable[[str, Sequence[object]], list[tuple]]

UNSPENT_BY_CURRENCY = """
SELECT currency, sum(quantity) FROM tokens_token WHERE spent_at IS NULL GROUP BY currency
"""
SELECTIONS = """
SELECT id, namespace, tx_id, status, token_ids, created_at, expires_at, spent_at, released_at
FROM locks_selection
"""
SPENT_TOKENS = "SELECT id, spent_by, spent_at FROM tokens_token WHERE spent_by IS NOT NULL"
# Per spent selection and currency: what its inputs were worth, what its outputs are worth.
UNBALANCED_SPENDS = """
WITH spent AS (SELECT id, namespace, tx_id, token_ids FROM locks_selection
               WHERE status = 'spent'),
inputs AS (SELECT s.id, t.currency, sum(t.quantity) AS value
           FROM spent s JOIN tokens_token t ON t.id = ANY (s.token_ids) GROUP BY 1, 2),
outputs AS (SELECT s.id, t.currency, sum(t.quantity) AS value
            FROM spent s JOIN tokens_token t ON t.tx_id = s.tx_id AND t.namespace = s.namespace
            GROUP BY 1, 2)
SELECT coalesce(i.id, o.id), coalesce(i.currency, o.currency), i.value, o.value
FROM inputs i FULL JOIN outputs o ON o.id = i.id AND o.currency = i.currency
WHERE i.value IS DISTINCT FROM o.value
"""
# Live lock rows on unspent tokens whose fence names no locked selection holding that token.
ORPHAN_LOCKS = """
SELECT l.token_id, l.spender_tx_id, l.fence, s.status
FROM locks_tokenlock l
JOIN tokens_token t ON t.id = l.token_id AND t.spent_at IS NULL
LEFT JOIN locks_selection s ON s.fence = l.fence
WHERE l.expires_at > now()
  AND (s.id IS NULL OR s.status <> 'locked' OR NOT l.token_id = ANY (s.token_ids))
"""
LIVE_LOCKS = """
SELECT count(*) FROM locks_tokenlock l JOIN tokens_token t ON t.id = l.token_id
WHERE l.expires_at > now() AND t.spent_at IS NULL
"""


def django_query(sql: str, params: Sequence[object] = ()) -> list[tuple]:
    """Run ``sql`` on this process's Django connection (the test database)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def check_invariants(
    query: Query = django_query,
    issued: Decimal | Mapping[str, Decimal] | None = None,
    *,
    recorded_supply: bool = False,
) -> dict[str, int]:
    """Assert every invariant from the database's rows; return counts for a report.

    ``issued``: the value issued in all, or per currency (None: not known, when the run issues
    tokens itself). ``recorded_supply``: the per-currency supply summary must agree with the
    tokens (when every token was issued through the service, which keeps it).
    """
    assert_conserved(query, issued, recorded_supply)
    selections = query(SELECTIONS, ())
    spent = assert_spent_once(query, selections)
    unbalanced = query(UNBALANCED_SPENDS, ())
    assert not unbalanced, f"spends whose outputs differ from their inputs: {unbalanced[:10]}"
    assert_holds_never_overlap(selections)
    orphans = query(ORPHAN_LOCKS, ())
    assert not orphans, f"live locks held by no locked selection: {orphans[:10]}"
    live = query(LIVE_LOCKS, ())[0][0]
    return {"selections": len(selections), "spent": spent, "live_locks": live}


def assert_conserved(
    query: Query, issued: Decimal | Mapping[str, Decimal] | None, recorded_supply: bool
) -> None:
    unspent = {currency: value for currency, value in query(UNSPENT_BY_CURRENCY, ())}
    if isinstance(issued, Mapping):
        assert unspent == dict(issued), f"unspent {unspent} != issued {dict(issued)}"
    elif issued is not None:
        total = sum(unspent.values(), Decimal(0))
        assert total == issued, f"unspent supply {total} != issued {issued}"
    if not recorded_supply:
        return
    recorded = query("SELECT currency, supply FROM tokens_currencysupply WHERE supply <> 0", ())
    assert dict(recorded) == unspent, f"recorded supply {dict(recorded)} != tokens {unspent}"


def assert_spent_once(query: Query, selections: list[tuple]) -> int:
    """Each spent token was spent by one spent selection that held it; return the spends."""
    spent = [s for s in selections if s[3] == "spent"]
    uses = defaultdict(list)
    for _, _, tx_id, _, token_ids, _, _, _, _ in spent:
        for token in token_ids:
            uses[token].append(tx_id)
    twice = {token: txs for token, txs in uses.items() if len(txs) > 1}
    assert not twice, f"tokens spent by two selections: {dict(itertools.islice(twice.items(), 10))}"
    marked = query(SPENT_TOKENS, ())
    for token, spent_by, _ in marked:
        spenders = uses.get(token)
        assert spenders == [spent_by], f"token {token} marked spent by {spent_by}: {spenders}"
    unmarked = set(uses) - {token for token, _, _ in marked}
    assert not unmarked, f"tokens of spent selections left unspent: {sorted(unmarked)[:10]}"
    return len(spent)


def assert_holds_never_overlap(selections: list[tuple]) -> None:
    """No token held by two selections at once, or after it was spent; no spend out of lease.

    A hold starts when its selection was recorded and ends when it was spent, released or its
    lease ran out, whichever came first: a release after the lease ended ends nothing.
    """
    holders = defaultdict(list)
    for _, _, tx_id, status, token_ids, created, expires, spent_at, released in selections:
        if status == "spent":
            assert spent_at is not None, f"{tx_id} spent at no time"
            assert spent_at <= expires, f"{tx_id} spent at {spent_at}, its lease ended {expires}"
            end = spent_at
        elif status == "released" and released is not None:
            end = min(released, expires)
        else:
            end = expires
        for token in token_ids:
            holders[token].append((created, end, status, tx_id))
    for token, held in holders.items():
        held.sort()
        for (_, end, status, tx_id), (start, _, _, later) in itertools.pairwise(held):
            assert status != "spent", f"{later} held token {token} after {tx_id} spent it"
            assert start >= end, f"{tx_id} and {later} held token {token} at once"
