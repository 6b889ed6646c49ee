"""The queue of requests waiting for held funds (``Prefer: wait``), and how they are woken.

A waiter is a row of ``locks_waiter``; the waiters of one wallet/currency are served in id
order. Whatever may free that key's funds (a release, a spend paying into it, an issue, an
expired lease removed) notifies the key's *head*, its oldest live waiter, on ``CHANNEL``, and
only if the key has waiters: with nobody waiting the statements send nothing (a notifying
commit is serialised with every other one). Joining the queue notifies when the newcomer heads
it (the key had no live waiter), leaving names the next head, so every process knows each
queue's head; a newcomer behind others changes no head and tells nobody (the head it was
answered is its own process's news). Payload: ``{"wallet": w, "currency": c, "head": id | null}``.
Queue statements are committed asynchronously (``common.sql.ASYNC_COMMIT``): a crash of the
database ends every wait anyway. Composed with ``str.format`` at import, like ``locking``; the
statements that free funds take their ``woken`` CTE from ``wake``.
"""

from __future__ import annotations

from common.sql import ASYNC_COMMIT

CHANNEL = "sherdlock_wake"

# The notification naming the head of key (wallet, currency), given as SQL expressions, and the
# id of its oldest live waiter, excluding {exclude}.
NOTIFY_HEAD = """pg_notify('sherdlock_wake', json_build_object(
    'wallet', {wallet}, 'currency', {currency}, 'head', {head})::text)"""

# A CTE that wakes the heads of the keys listed by {keys} (a query of (wallet, currency) rows),
# those that have live waiters, once {when} holds. Statements read it (a CTE nobody reads is
# never run) as (SELECT count(*) FROM woken), and place it last: it ends without a comma.
WAKE = """
woken AS (
    SELECT {notify}
    FROM locks_waiter w
    WHERE (w.wallet, w.currency) IN ({keys}) AND w.expires_at > now() AND ({when})
    GROUP BY w.wallet, w.currency
)"""
WAKE_NOTIFY = NOTIFY_HEAD.format(wallet="w.wallet", currency="w.currency", head="min(w.id)")


def wake(keys: str, when: str) -> str:
    """Return the ``woken`` CTE for the keys listed by ``keys``, run once ``when`` holds."""
    return WAKE.format(notify=WAKE_NOTIFY, keys=keys, when=when)


# Join the queue of a key, one waiter per element of %(seconds)s (each until its own deadline),
# in that order: requests of one process that join together join in one statement. Answer the
# new waiters' ids (drawn in that order, so ascending ids follow it) and the queue's head (the
# new rows are not yet visible to this statement's own reads, hence the least()). Only a batch
# that heads the queue is announced: behind others, the head stays what every process knows.
JOIN = """
WITH{commit}
joined AS (
    INSERT INTO locks_waiter (wallet, currency, created_at, expires_at)
    SELECT %(wallet)s::text, %(currency)s::text, now(), now() + s.seconds * interval '1 second'
    FROM commit_mode, unnest(%(seconds)s::float8[]) WITH ORDINALITY AS s(seconds, n)
    ORDER BY s.n
    RETURNING id
),
head AS (
    SELECT least((SELECT min(id) FROM joined),
                 (SELECT min(id) FROM locks_waiter
                  WHERE wallet = %(wallet)s::text AND currency = %(currency)s::text
                    AND expires_at > now())) AS id
)
SELECT (SELECT array_agg(id ORDER BY id) FROM joined), (SELECT id FROM head),
       (SELECT {notify} WHERE (SELECT id FROM head) = (SELECT min(id) FROM joined))
""".format(
    commit=ASYNC_COMMIT,
    notify=NOTIFY_HEAD.format(
        wallet="%(wallet)s::text", currency="%(currency)s::text", head="(SELECT id FROM head)"
    ),
)

# Leave the queue; tell everyone who heads it now (NULL: nobody waits any more).
LEAVE = """
WITH{commit}
gone AS (
    DELETE FROM locks_waiter WHERE id = %(id)s::bigint AND (SELECT true FROM commit_mode)
    RETURNING wallet, currency
)
SELECT {notify}
FROM gone g
""".format(
    commit=ASYNC_COMMIT,
    notify=NOTIFY_HEAD.format(
        wallet="g.wallet",
        currency="g.currency",
        head="""(SELECT min(w.id) FROM locks_waiter w
             WHERE w.wallet = g.wallet AND w.currency = g.currency AND w.expires_at > now()
               AND w.id <> %(id)s::bigint)""",
    ),
)

# Leave the queue served: the request now holds the funds it waited for, so there is nothing
# for the next waiter to try until the statement that frees them (its spend or release) names
# the head; telling everyone now would only send the next waiter to find the funds held.
LEAVE_SERVED = """
WITH{commit}
gone AS (
    DELETE FROM locks_waiter WHERE id = %(id)s::bigint AND (SELECT true FROM commit_mode)
)
SELECT
""".format(commit=ASYNC_COMMIT)

# The heads of every queue, read when a process starts listening (or listens again) and when a
# waiter has heard nothing for a while (a head whose process died stops counting at its
# deadline, and nobody announces that).
HEADS = """
SELECT wallet, currency, min(id) FROM locks_waiter WHERE expires_at > now()
GROUP BY wallet, currency
"""

# Remove waiters whose deadline passed (their process died while waiting), in bounded batches.
PRUNE = """
DELETE FROM locks_waiter WHERE id = ANY(ARRAY(
    SELECT id FROM locks_waiter WHERE expires_at <= now() - %(grace)s * interval '1 second'
    LIMIT %(limit)s))
"""
