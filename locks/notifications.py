"""Install or remove the triggers that publish token and lock changes for replica caches.

The trigger functions live in the schema (migration ``locks.0003_change_notifications``); the
triggers that call them are installed only where replicas run cache listeners
(``SHERDLOCK_LISTEN``), because they cost every statement that issues, locks, releases or spends
tokens, whether anyone listens or not: a transition table, a function call and, when enabled, a
NOTIFY whose commit PostgreSQL serialises with every other notifying commit. ``migrate`` brings
them in line with the setting (``sync``); ``manage.py cache_notifications on|off`` does it by hand.
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from common.knobs import knobs
from locks.sql import notifications as sql


def installed(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Tell whether the publishing triggers are installed (all of them)."""
    with connections[using].cursor() as cursor:
        cursor.execute(sql.INSTALLED, [sql.TRIGGER_NAMES])
        return cursor.fetchone()[0] == len(sql.TRIGGER_NAMES)


def install(using: str = DEFAULT_DB_ALIAS) -> None:
    """Create the publishing triggers (idempotent)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        for statement in sql.INSTALL:
            cursor.execute(statement)


def uninstall(using: str = DEFAULT_DB_ALIAS) -> None:
    """Drop the publishing triggers (idempotent)."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        for statement in sql.UNINSTALL:
            cursor.execute(statement)


def sync(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Install the triggers if replicas listen (the ``LISTEN`` knob), else remove them."""
    wanted = knobs().listen
    if wanted != installed(using):
        (install if wanted else uninstall)(using)
    return wanted
