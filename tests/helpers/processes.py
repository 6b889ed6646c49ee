"""Reaching the test database from other processes: its URL and a child's environment."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent.parent  # the project

# Server sessions the test PgBouncer lends out per database, fewer than the replica processes
# the pooled tests start: clients must wait their turn for a session, as at scale.
POOL_SIZE = 10


def database_url(settings_dict: dict) -> str:
    """Return a DATABASE_URL for a Django connection's settings (socket hosts percent-encoded)."""
    host = quote(str(settings_dict.get("HOST") or "127.0.0.1"), safe="")
    port = settings_dict.get("PORT") or 5432
    user = quote(settings_dict.get("USER") or "postgres", safe="")
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}" if password else user
    return f"postgresql://{auth}@{host}:{port}/{settings_dict['NAME']}"


def child_env(db_url: str) -> dict[str, str]:
    """Return the environment of a child process that uses the database at ``db_url``."""
    env = dict(os.environ)
    env["DATABASE_URL"] = db_url
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env
