"""The project-local data directory, and what a process readies there before Django connects.

Every local file of the project lives under one directory, ``DATA_DIR`` (``SHERDLOCK_DATA_DIR``,
default ``.data`` in the working directory: the checkout's, git-ignored, under ``make run``;
never inside the installed package): the embedded PostgreSQL server (``postgres``) and broker
(``redis``), the generated secret key, the static root, the metrics of ``make run`` and beat's
schedule.

Importing the settings writes nothing there and starts nothing: they only say where things are
(the embedded server's socket follows from its data directory, ``config.embedded_db``), and the
generated secret key is read, or written, when something first uses it. A process that is about
to serve or connect calls ``prepare`` first: the ``sherdlock`` command (``config.cli``, and
``manage.py`` in a checkout), ``config.wsgi`` (gunicorn), the Celery app (worker and beat, as
they load their task modules), ``config.serve``, the test suite (``tests/conftest.py``) and the
benchmarks (``bench.database``). Type checkers and tools that only import the settings start
nothing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config.embedded_db import EmbeddedServer

# Resolved once, at import: a process that changes directory later keeps the same files.
DATA_DIR = Path(os.environ.get("SHERDLOCK_DATA_DIR") or ".data").resolve()
SECRET_KEY_FILE = DATA_DIR / "secret_key"


def secret_key(path: Path = SECRET_KEY_FILE) -> str:
    """Return the generated secret key kept at ``path``, creating it on first use.

    A key persisted in the data directory keeps sessions valid across restarts of a local run
    and is the same in every process of it; production sets ``SECRET_KEY`` instead. Processes
    starting together agree: the key is written to a temporary file and linked into place,
    which fails if another process got there first, whose key is then read.
    """
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret_key-")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(secrets.token_urlsafe(50))
        os.chmod(temporary, 0o600)
        with contextlib.suppress(FileExistsError):  # another process's key stands
            os.link(temporary, path)
    finally:
        os.unlink(temporary)
    return path.read_text().strip()


def prepare() -> EmbeddedServer | None:
    """Ready the data directory for this process's settings; return the embedded server.

    Creates the static root (WhiteNoise warns about a missing one) and starts the embedded
    PostgreSQL server when the settings use it (``DATABASE_URL`` unset), waiting until it
    accepts connections; safe to call from several processes at once, and again. Returns the
    server (``started`` tells whether this call started it), or None when ``DATABASE_URL``
    names another.
    """
    from django.conf import settings

    from config import embedded_db

    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
    data_dir = settings.EMBEDDED_DATABASE_DIR
    return None if data_dir is None else embedded_db.ensure_running(data_dir)
