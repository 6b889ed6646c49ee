"""How the settings read the database's URLs: PostgreSQL only, pooled or not, one or several hosts.

``config.settings`` calls these with the environment's values; each refuses what it cannot serve
with ``ImproperlyConfigured`` naming the variable (docs/configuration.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import dj_database_url
import psycopg
from django.core.exceptions import ImproperlyConfigured
from psycopg.conninfo import conninfo_to_dict

from config import embedded_db

# DATABASE_POOLING: how the connections of DATABASE_URL reach PostgreSQL.
SESSION_POOLING = "session"  # each connection is a session of its own (direct, or a session pool)
TRANSACTION_POOLING = "transaction"  # a proxy lends a server session for one transaction only


def database_pooling(value: str | None) -> str:
    """Read ``DATABASE_POOLING``: "session" (the default) or "transaction"."""
    mode = (value or SESSION_POOLING).strip().lower()
    if mode not in (SESSION_POOLING, TRANSACTION_POOLING):
        raise ImproperlyConfigured(
            f"DATABASE_POOLING={value!r}: use 'transaction' when DATABASE_URL goes through a "
            "transaction-pooling proxy (PgBouncer pool_mode=transaction), else 'session' "
            "or leave it unset"
        )
    return mode


# DATABASE_POOL_SIZE: the most connections one process keeps to DATABASE_URL (Django's psycopg
# pool), or "off" for a connection per thread kept CONN_MAX_AGE seconds.
DEFAULT_POOL_SIZE = 4


def database_pool_size(value: str | None) -> int | None:
    """Read ``DATABASE_POOL_SIZE``: a positive size (default 4), or "off"/0 for no pool."""
    text = (value if value is not None else str(DEFAULT_POOL_SIZE)).strip().lower()
    if text in {"off", "0", "none"}:
        return None
    try:
        size = int(text)
    except ValueError:
        size = -1
    if size < 1:
        raise ImproperlyConfigured(
            f"DATABASE_POOL_SIZE={value!r}: give the most connections one process may keep "
            "(a positive integer), or 'off' for a connection per thread"
        )
    return size


# A DATABASES entry: a setting of each type Django knows (strings, numbers, dicts of options).
DatabaseEntry = dict[str, Any]


def _postgres(name: str, url: str) -> DatabaseEntry:
    config = _several_hosts(url) if _names_several_hosts(url) else dj_database_url.parse(url)
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"{name} uses {config['ENGINE']!r}; Sherdlock supports PostgreSQL only "
            "(SQLite has no SKIP LOCKED, sequences or concurrent writers). Unset DATABASE_URL "
            "to use the embedded PostgreSQL server."
        )
    return dict(config)


def _names_several_hosts(url: str) -> bool:
    netloc = urlsplit(url).netloc
    return "," in netloc.rpartition("@")[2]


# libpq's own keywords of a URL, as Django names them; any other keyword goes to OPTIONS.
_DJANGO_KEYS = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST"}


def _several_hosts(url: str) -> DatabaseEntry:
    """Read a libpq URL naming several servers (``postgresql://u@h1:5432,h2:5432/db?...``).

    dj-database-url reads one host only. libpq reads its own URLs (``conninfo_to_dict``), and
    Django hands HOST and PORT to it unchanged, so the lists travel as libpq wrote them: libpq
    then tries the servers in turn and, with ``target_session_attrs=read-write``, keeps the one
    that is primary.
    """
    if not url.startswith(("postgres://", "postgresql://")):
        raise ImproperlyConfigured(f"{url.partition(':')[0]}: only PostgreSQL URLs name hosts")
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ImproperlyConfigured(f"cannot read the database URL: {exc}") from exc
    config: DatabaseEntry = {"ENGINE": "django.db.backends.postgresql", "PORT": ""}
    options: dict[str, Any] = {}
    for key, value in params.items():
        if key in _DJANGO_KEYS:
            config[_DJANGO_KEYS[key]] = value
        elif key == "port":
            config["PORT"] = value
        else:
            options[key] = value
    if options:
        config["OPTIONS"] = options
    return config


# Django's PostgreSQL backend: the application's prepared statements planned generically,
# pooled connections lent without a check query.
ENGINE = "common.postgres"


# libpq parameters of every connection to DATABASE_URL unless the URL sets them. A server whose
# machine is gone answers nothing: without a connect timeout a connection attempt would wait for
# the kernel to give up on it (minutes), and a session idle on it (a listener) would never learn
# that it is gone. With several hosts the connect timeout applies to each in turn. Keepalives
# (TCP only; a Unix socket reports a dead server at once) declare an idle session dead after
# about idle + interval * count seconds, so listeners reconnect to a promoted standby soon.
CONNECTION_DEFAULTS: DatabaseEntry = {
    "connect_timeout": 3,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def database_settings(
    url: str | None, pooling: str = SESSION_POOLING, pool_size: int | None = DEFAULT_POOL_SIZE
) -> DatabaseEntry:
    """Return the default database entry; only PostgreSQL is supported."""
    # Connections outlive requests: opening one costs more than most requests, and the hot
    # statements are prepared per connection. A broken one is noticed by the health check.
    persistent: DatabaseEntry = {"ENGINE": ENGINE, "CONN_MAX_AGE": 300, "CONN_HEALTH_CHECKS": True}
    if pool_size is not None:
        # A pool per process, shared by its threads: a request holds a connection from its
        # first query to its end, and a request waiting for held funds gives it back while it
        # sleeps (locks.wait_loop). Few connections then serve many threads and stay warm: a
        # backend's first run of a hot statement costs several times its steady run (catalog
        # caches, planning) and psycopg prepares statements per connection. The engine checks a
        # connection as the pool lends it, without a query (common.postgres), so one the server
        # dropped is replaced; Django's own check would cost a round trip per request.
        persistent = {
            "ENGINE": ENGINE,
            "CONN_MAX_AGE": 0,
            "CONN_HEALTH_CHECKS": False,
            "OPTIONS": {"pool": {"min_size": 1, "max_size": pool_size, "timeout": 30.0}},
        }
    if not url:
        if pooling == TRANSACTION_POOLING:
            raise ImproperlyConfigured(
                "DATABASE_POOLING=transaction needs DATABASE_URL, the URL of the pooling proxy"
            )
        # Where the embedded server listens follows from its data directory; it is started
        # by config.local.prepare, which every entry point calls before Django connects.
        return {
            **embedded_db.EmbeddedServer.at(embedded_db.DEFAULT_DATA_DIR).settings,
            **persistent,
        }
    given = _postgres("DATABASE_URL", url)
    options = {**CONNECTION_DEFAULTS, **given.get("OPTIONS", {}), **persistent.get("OPTIONS", {})}
    config = {**given, **persistent, **({"OPTIONS": options} if options else {})}
    if pooling == TRANSACTION_POOLING:
        # QuerySet.iterator() (the admin's choice fields among others) would declare a cursor
        # WITH HOLD, which outlives its transaction on a session the proxy lends to others.
        # Django's own statements never prepare on the server (prepare_threshold is None
        # unless OPTIONS sets it); the application's are not prepared either (prepare_threshold).
        config["DISABLE_SERVER_SIDE_CURSORS"] = True
    return config


def direct_database_url(url: str | None, pooling: str) -> str | None:
    """Check ``DATABASE_DIRECT_URL``: required with transaction pooling, refused without."""
    if pooling != TRANSACTION_POOLING:
        if url:
            raise ImproperlyConfigured(
                "DATABASE_DIRECT_URL is only used with DATABASE_POOLING=transaction; set "
                "both if DATABASE_URL goes through a transaction-pooling proxy, else neither"
            )
        return None
    if not url:
        raise ImproperlyConfigured(
            "DATABASE_POOLING=transaction needs DATABASE_DIRECT_URL: the same database "
            "without the proxy, for the cache listener, the wake-up listener and the "
            "housekeeping guard (LISTEN and session advisory locks need a session)"
        )
    _postgres("DATABASE_DIRECT_URL", url)
    return url


def prepare_threshold(pooling: str) -> int | None:
    """Return when hot statements are prepared: at their first run, never behind a pooler.

    The hot statements are a fixed set, each run many times, so preparing them at once saves
    their planning from the first run on; a statement prepared on one server session is unknown
    to the next one a transaction-pooling proxy lends, so there nothing is prepared.
    """
    return None if pooling == TRANSACTION_POOLING else 0
