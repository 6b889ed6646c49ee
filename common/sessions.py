"""Connections that must be a database session of their own: LISTEN, session advisory locks.

Django's connections serve statements and transactions. Behind a transaction-pooling proxy
(``DATABASE_POOLING=transaction``, PgBouncer's ``pool_mode = transaction``) each transaction of
such a connection may run on another server session, so nothing may outlive a transaction on
them: a ``LISTEN`` would listen on a session that the proxy then lends to others (and whose
notifications it never forwards), a session advisory lock would stay with that session, not
with its taker. The features that need a session open their own connection here: to
``DATABASE_DIRECT_URL`` (the same database without the proxy) under transaction pooling,
otherwise with the parameters of Django's connection, so that they follow its database (the
test database in tests).
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.conninfo import conninfo_to_dict

# What Django's connection parameters carry for its own cursors and adapters, not for libpq.
DJANGO_ONLY = ("cursor_factory", "context", "prepare_threshold")


def transaction_pooled() -> bool:
    """Tell whether Django's connections go through a transaction-pooling proxy."""
    return getattr(settings, "DATABASE_POOLING", "session") == "transaction"


def connection_params(alias: str = DEFAULT_DB_ALIAS) -> dict[str, Any]:
    """Return libpq parameters of a session on the database of Django's ``alias``."""
    if transaction_pooled():
        direct = settings.DATABASE_DIRECT_URL
        if not direct:  # config.settings refuses this; settings overridden in tests may not
            raise ImproperlyConfigured("DATABASE_POOLING=transaction needs DATABASE_DIRECT_URL")
        # The timeouts and keepalives Django's connections get (config.settings), unless the
        # URL sets them: a lost server must not hold a listener or the guard for minutes.
        return {**getattr(settings, "CONNECTION_DEFAULTS", {}), **conninfo_to_dict(direct)}
    params = dict(connections[alias].get_connection_params())
    for name in DJANGO_ONLY:
        params.pop(name, None)
    return params


def connect(
    alias: str = DEFAULT_DB_ALIAS,
    *,
    application_name: str | None = None,
    defaults: dict[str, Any] | None = None,
) -> psycopg.Connection:
    """Open an autocommit connection that is a session of its own (see the module's doc).

    ``defaults`` apply where the configured parameters say nothing; ``application_name``
    makes the session findable in ``pg_stat_activity``.
    """
    params = connection_params(alias)
    if application_name is not None:
        params["application_name"] = application_name
    for name, value in (defaults or {}).items():
        params.setdefault(name, value)
    return psycopg.connect(**params, autocommit=True)
