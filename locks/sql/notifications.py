"""The triggers that publish token and lock changes, and the statements that add or drop them.

The trigger functions live in the schema (migration ``locks.0003_change_notifications``);
``locks.notifications`` decides when the triggers are installed. Composed with ``str.format``
at import.
"""

from __future__ import annotations

# (trigger, table, event, transition tables, function). Transition tables allow one event per
# trigger, hence one trigger per table and event.
TRIGGERS = [
    (
        "sherdlock_tokens_inserted",
        "tokens_token",
        "INSERT",
        "REFERENCING NEW TABLE AS new_tokens",
        "sherdlock_tokens_inserted",
    ),
    (
        "sherdlock_tokens_updated",
        "tokens_token",
        "UPDATE",
        "REFERENCING OLD TABLE AS old_tokens NEW TABLE AS new_tokens",
        "sherdlock_tokens_updated",
    ),
    (
        "sherdlock_tokens_deleted",
        "tokens_token",
        "DELETE",
        "REFERENCING OLD TABLE AS old_tokens",
        "sherdlock_tokens_deleted",
    ),
    ("sherdlock_tokens_truncated", "tokens_token", "TRUNCATE", "", "sherdlock_truncated"),
    (
        "sherdlock_locks_inserted",
        "locks_tokenlock",
        "INSERT",
        "REFERENCING NEW TABLE AS new_locks",
        "sherdlock_locks_inserted",
    ),
    (
        "sherdlock_locks_updated",
        "locks_tokenlock",
        "UPDATE",
        "REFERENCING OLD TABLE AS old_locks NEW TABLE AS new_locks",
        "sherdlock_locks_updated",
    ),
    (
        "sherdlock_locks_deleted",
        "locks_tokenlock",
        "DELETE",
        "REFERENCING OLD TABLE AS old_locks",
        "sherdlock_locks_deleted",
    ),
    ("sherdlock_locks_truncated", "locks_tokenlock", "TRUNCATE", "", "sherdlock_truncated"),
]

TRIGGER_NAMES = [name for name, *_ in TRIGGERS]

# How many of the named triggers exist.
INSTALLED = "SELECT count(*) FROM pg_trigger WHERE tgname = ANY(%s) AND NOT tgisinternal"

DROP_TRIGGER = "DROP TRIGGER IF EXISTS {name} ON {table}"
CREATE_TRIGGER = (
    "CREATE TRIGGER {name} AFTER {event} ON {table} {transition} "
    "FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
)

# Installing drops each trigger first, so it is idempotent and replaces a trigger of an older
# definition; each list runs in one transaction.
UNINSTALL = [DROP_TRIGGER.format(name=name, table=table) for name, table, *_ in TRIGGERS]
INSTALL = [
    statement
    for name, table, event, transition, function in TRIGGERS
    for statement in (
        DROP_TRIGGER.format(name=name, table=table),
        CREATE_TRIGGER.format(
            name=name, table=table, event=event, transition=transition, function=function
        ),
    )
]
