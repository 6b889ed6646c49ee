"""Publish token and lock changes on the channel ``sherdlock_tokens`` for replica caches.

Statement-level AFTER triggers read the statement's transition tables and send one
notification per (wallet, currency): a statement touching a thousand rows of one wallet sends
one message, not a thousand. NOTIFY is delivered only when the transaction commits, in commit
order, and is dropped on rollback, so listeners never hear of changes that did not happen.

Payloads are JSON with ids and quantities only:

    {"event": "issued" | "released", "wallet": w, "currency": c, "tokens": [[id, quantity], ...]}
    {"event": "spent" | "locked", "wallet": w, "currency": c, "ids": [id, ...]}
    {"event": "overflow", "wallet": w, "currency": c, "cause": <event>}   payload would be too big
    {"event": "reset"}                                                     a table was truncated

"spent" means the token left the unspent set of its key (spent, deleted, or moved to another
key); "issued" means it entered one. Lock events join ``tokens_token`` by primary key for the
key and quantity; a released lock of a spent token announces nothing (no one can select it).
The channel name is ``locks.listener.CHANNEL``.
"""

from django.db import migrations

# Publishing costs every writing transaction a NOTIFY at commit (PostgreSQL serialises those
# commits on one lock), listeners or not. Deployments that run no listener switch it off:
#     ALTER DATABASE <name> SET sherdlock.notify = off;   (or SET for one session, e.g. a bulk load)
ENABLED = """
CREATE FUNCTION sherdlock_notify_enabled() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT lower(coalesce(current_setting('sherdlock.notify', true), ''))
           NOT IN ('off', 'false', '0')
$$
"""

# PostgreSQL rejects payloads of 8000 bytes or more; a group that large tells listeners to drop
# their queue of the key instead, which costs them one fetch and is never wrong.
PUBLISH = """
CREATE FUNCTION sherdlock_publish(event text, wallet text, currency text, field text, items json)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    payload text := json_build_object(
        'event', event, 'wallet', wallet, 'currency', currency, field, items)::text;
BEGIN
    IF octet_length(payload) >= 8000 THEN
        payload := json_build_object(
            'event', 'overflow', 'wallet', wallet, 'currency', currency, 'cause', event)::text;
    END IF;
    PERFORM pg_notify('sherdlock_tokens', payload);
END
$$
"""

TOKENS_INSERTED = """
CREATE FUNCTION sherdlock_tokens_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM sherdlock_publish('issued', n.wallet, n.currency, 'tokens',
                              json_agg(json_build_array(n.id, n.quantity) ORDER BY n.id))
    FROM new_tokens n
    WHERE n.spent_at IS NULL
    GROUP BY n.wallet, n.currency
    ORDER BY n.wallet, n.currency;
    RETURN NULL;
END
$$
"""

# A spend sets spent_at; an operator may also undo one or move a token. What counts is whether
# the row left or entered the unspent set of a key, so compare old and new row by id.
TOKENS_UPDATED = """
CREATE FUNCTION sherdlock_tokens_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM sherdlock_publish('spent', o.wallet, o.currency, 'ids', json_agg(o.id ORDER BY o.id))
    FROM old_tokens o JOIN new_tokens n ON n.id = o.id
    WHERE o.spent_at IS NULL
      AND (n.spent_at IS NOT NULL
           OR (n.wallet, n.currency, n.quantity)
              IS DISTINCT FROM (o.wallet, o.currency, o.quantity))
    GROUP BY o.wallet, o.currency
    ORDER BY o.wallet, o.currency;
    PERFORM sherdlock_publish('issued', n.wallet, n.currency, 'tokens',
                              json_agg(json_build_array(n.id, n.quantity) ORDER BY n.id))
    FROM old_tokens o JOIN new_tokens n ON n.id = o.id
    WHERE n.spent_at IS NULL
      AND (o.spent_at IS NOT NULL
           OR (n.wallet, n.currency, n.quantity)
              IS DISTINCT FROM (o.wallet, o.currency, o.quantity))
    GROUP BY n.wallet, n.currency
    ORDER BY n.wallet, n.currency;
    RETURN NULL;
END
$$
"""

TOKENS_DELETED = """
CREATE FUNCTION sherdlock_tokens_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM sherdlock_publish('spent', o.wallet, o.currency, 'ids', json_agg(o.id ORDER BY o.id))
    FROM old_tokens o
    WHERE o.spent_at IS NULL
    GROUP BY o.wallet, o.currency
    ORDER BY o.wallet, o.currency;
    RETURN NULL;
END
$$
"""

# INSERT ... ON CONFLICT DO UPDATE fires both statement triggers: fresh locks arrive here, and
# take-overs of expired locks in LOCKS_UPDATED.
LOCKS_INSERTED = """
CREATE FUNCTION sherdlock_locks_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM sherdlock_publish('locked', t.wallet, t.currency, 'ids', json_agg(t.id ORDER BY t.id))
    FROM new_locks l JOIN tokens_token t ON t.id = l.token_id
    GROUP BY t.wallet, t.currency
    ORDER BY t.wallet, t.currency;
    RETURN NULL;
END
$$
"""

# Only a change of holder is news; renewing a lease (extend) changes expires_at alone.
LOCKS_UPDATED = """
CREATE FUNCTION sherdlock_locks_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM sherdlock_publish('locked', t.wallet, t.currency, 'ids', json_agg(t.id ORDER BY t.id))
    FROM old_locks o
    JOIN new_locks l ON l.token_id = o.token_id
    JOIN tokens_token t ON t.id = l.token_id
    WHERE (l.spender_tx_id, l.fence) IS DISTINCT FROM (o.spender_tx_id, o.fence)
    GROUP BY t.wallet, t.currency
    ORDER BY t.wallet, t.currency;
    RETURN NULL;
END
$$
"""

# Release, housekeeping of expired leases, operators' force-release. Deleting a token through
# the ORM deletes its lock first: "released", then "spent", which leaves caches right.
LOCKS_DELETED = """
CREATE FUNCTION sherdlock_locks_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM sherdlock_publish('released', t.wallet, t.currency, 'tokens',
                              json_agg(json_build_array(t.id, t.quantity) ORDER BY t.id))
    FROM old_locks o JOIN tokens_token t ON t.id = o.token_id
    WHERE t.spent_at IS NULL
    GROUP BY t.wallet, t.currency
    ORDER BY t.wallet, t.currency;
    RETURN NULL;
END
$$
"""

# TRUNCATE fires no DELETE triggers and names no rows: tell listeners to start over.
TRUNCATED = """
CREATE FUNCTION sherdlock_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sherdlock_notify_enabled() THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('sherdlock_tokens', '{"event": "reset"}');
    RETURN NULL;
END
$$
"""

# (trigger, table, event, transition tables, function). Transition tables allow one event per
# trigger, hence one trigger per table and event.
TRIGGERS = [
    ("sherdlock_tokens_inserted", "tokens_token", "INSERT",
     "REFERENCING NEW TABLE AS new_tokens", "sherdlock_tokens_inserted"),
    ("sherdlock_tokens_updated", "tokens_token", "UPDATE",
     "REFERENCING OLD TABLE AS old_tokens NEW TABLE AS new_tokens", "sherdlock_tokens_updated"),
    ("sherdlock_tokens_deleted", "tokens_token", "DELETE",
     "REFERENCING OLD TABLE AS old_tokens", "sherdlock_tokens_deleted"),
    ("sherdlock_tokens_truncated", "tokens_token", "TRUNCATE", "", "sherdlock_truncated"),
    ("sherdlock_locks_inserted", "locks_tokenlock", "INSERT",
     "REFERENCING NEW TABLE AS new_locks", "sherdlock_locks_inserted"),
    ("sherdlock_locks_updated", "locks_tokenlock", "UPDATE",
     "REFERENCING OLD TABLE AS old_locks NEW TABLE AS new_locks", "sherdlock_locks_updated"),
    ("sherdlock_locks_deleted", "locks_tokenlock", "DELETE",
     "REFERENCING OLD TABLE AS old_locks", "sherdlock_locks_deleted"),
    ("sherdlock_locks_truncated", "locks_tokenlock", "TRUNCATE", "", "sherdlock_truncated"),
]

FUNCTIONS = [ENABLED, PUBLISH, TOKENS_INSERTED, TOKENS_UPDATED, TOKENS_DELETED, LOCKS_INSERTED,
             LOCKS_UPDATED, LOCKS_DELETED, TRUNCATED]

FUNCTION_SIGNATURES = [
    "sherdlock_tokens_inserted()", "sherdlock_tokens_updated()", "sherdlock_tokens_deleted()",
    "sherdlock_locks_inserted()", "sherdlock_locks_updated()", "sherdlock_locks_deleted()",
    "sherdlock_truncated()", "sherdlock_publish(text, text, text, text, json)",
    "sherdlock_notify_enabled()",
]

CREATE = FUNCTIONS + [
    f"CREATE TRIGGER {name} AFTER {event} ON {table} {transition} "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
    for name, table, event, transition, function in TRIGGERS
]

DROP = [f"DROP TRIGGER IF EXISTS {name} ON {table}" for name, table, *_ in TRIGGERS] + [
    f"DROP FUNCTION IF EXISTS {signature}" for signature in FUNCTION_SIGNATURES
]


class Migration(migrations.Migration):

    dependencies = [
        ("tokens", "0001_initial"),
        ("locks", "0002_housekeeping_schedule"),
    ]

    operations = [
        migrations.RunSQL(CREATE, DROP),
    ]
