"""Install or remove the triggers that publish token and lock changes for replica caches.

The trigger functions live in the schema (migration ``locks.0003_change_notifications``); the
triggers that call them are installed only where replicas run cache listeners
(``SHERDLOCK_LISTEN``), because they cost every statement that issues, locks, releases or spends
tokens, whether anyone listens or not: a transition table, a function call and, when enabled, a
NOTIFY whose commit PostgreSQL serialises with every other notifying commit. ``migrate`` brings
them in line with the setting (``sync``); ``manage.py cache_notifications on|off`` does it by hand.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

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

INSTALLED = "SELECT count(*) FROM pg_trigger WHERE tgname = ANY(%s) AND NOT tgisinternal"


def installed(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Tell whether the publishing triggers are installed (all of them)."""
    with connections[using].cursor() as cursor:
        cursor.execute(INSTALLED, [[name for name, *_ in TRIGGERS]])
        return cursor.fetchone()[0] == len(TRIGGERS)


def install(using: str = DEFAULT_DB_ALIAS) -> None:
    """Create the publishing triggers (idempotent)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        for name, table, event, transition, function in TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            cursor.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} {transition} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
            )


def uninstall(using: str = DEFAULT_DB_ALIAS) -> None:
    """Drop the publishing triggers (idempotent)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        for name, table, *_ in TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")


def sync(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Install the triggers if replicas listen (``SHERDLOCK["LISTEN"]``), else remove them."""
    wanted = bool(settings.SHERDLOCK["LISTEN"])
    if wanted != installed(using):
        (install if wanted else uninstall)(using)
    return wanted
