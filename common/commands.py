"""A base for management commands that need the project's tables."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

MIGRATE = "sherdlock migrate"


def unapplied_migrations(using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Return the migrations not yet applied to the database ``using`` ("app.name")."""
    executor = MigrationExecutor(connections[using])
    targets = executor.loader.graph.leaf_nodes()
    return [
        f"{migration.app_label}.{migration.name}"
        for migration, _ in executor.migration_plan(targets)
    ]


class DatabaseCommand(BaseCommand):
    """Refuse to run on a database that lacks migrations, saying what to run instead.

    Without this, a command run on a fresh database (after ``make test``, say) dies with
    ``relation ... does not exist`` from deep inside a query.
    """

    def execute(self, *args, **options):
        pending = unapplied_migrations(options.get("database") or DEFAULT_DB_ALIAS)
        if pending:
            name = connections[DEFAULT_DB_ALIAS].settings_dict["NAME"]
            raise CommandError(
                f"database {name!r} is not migrated ({len(pending)} migration(s) pending, "
                f"e.g. {pending[0]}). Run `{MIGRATE}` first (`make run` migrates too)."
            )
        return super().execute(*args, **options)
