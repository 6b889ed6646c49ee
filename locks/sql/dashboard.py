"""The dashboard's lock figures: one statement over the lock table (``locks.dashboard``)."""

from __future__ import annotations

# Every lock figure of the dashboard in one statement, from the lock table alone: each row
# names its token's wallet, currency and quantity, and the table holds rows of live holds and of
# expired ones awaiting housekeeping only (a spend removes its locks), so one pass over it
# serves every figure with no join. The counts are ranges of the expires_at index.
LOCK_FIGURES = """
WITH live AS MATERIALIZED (
    SELECT wallet, currency, quantity, expires_at FROM locks_tokenlock WHERE expires_at > now()
)
SELECT 'live', NULL, count(*), NULL::numeric FROM live
UNION ALL
SELECT 'expiring', NULL, count(*), NULL FROM live
WHERE expires_at <= now() + %(expiring)s * interval '1 second'
UNION ALL
SELECT 'expired', NULL, count(*), NULL FROM locks_tokenlock WHERE expires_at <= now()
UNION ALL
SELECT 'currency', currency, count(*), sum(quantity) FROM live GROUP BY currency
UNION ALL
(SELECT 'wallet', wallet, count(*), NULL FROM live
 GROUP BY wallet ORDER BY count(*) DESC, wallet LIMIT %(top)s)
"""
