"""The configuration's own statements: the readiness probe and the embedded server's set-up.

Composed with ``str.format`` at import, like every app's SQL (see ``common.sql``).
"""

from __future__ import annotations

# Whether the database answers (GET /readyz).
READY = "SELECT 1"

# The embedded server's project database: does it exist, create it (a name, so formatted in by
# ``config.embedded_db`` at import; CREATE DATABASE takes no parameters).
DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = %s"
CREATE_DATABASE = 'CREATE DATABASE "{name}"'
