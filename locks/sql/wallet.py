"""The wallet page's balances: one statement over the wallet's unspent tokens (``locks.wallet``)."""

from __future__ import annotations

# Per currency: the wallet's unspent tokens and their value, read from the selector's partial
# index (wallet, currency, id) INCLUDE (quantity), and which of them carry a live or an expired
# lock (one primary-key probe per token, or one pass over the lock table: the planner picks).
BALANCES = """
SELECT t.currency, count(*), sum(t.quantity),
       count(l.token_id) FILTER (WHERE l.expires_at > now()),
       coalesce(sum(t.quantity) FILTER (WHERE l.expires_at > now()), 0),
       count(l.token_id) FILTER (WHERE l.expires_at <= now())
FROM tokens_token t
LEFT JOIN locks_tokenlock l ON l.token_id = t.id
WHERE t.wallet = %s AND t.spent_at IS NULL
GROUP BY t.currency
ORDER BY t.currency
"""
