"""Shared fixtures: the real PostgreSQL test database and ways to reach it from other processes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from tests.helpers.processes import POOL_SIZE, child_env, database_url

if TYPE_CHECKING:
    from config.embedded_db import EmbeddedServer


# The embedded PostgreSQL server this run started, if any (stopped when the run ends).
_started: list[EmbeddedServer] = []


def pytest_configure(config: pytest.Config) -> None:
    """Start the embedded PostgreSQL server (unless DATABASE_URL names one) before any test."""
    from config import local

    server = local.prepare()
    if server is not None and server.started and not hasattr(config, "workerinput"):
        _started.append(server)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist load`` (``make test``), run every end-to-end test on one worker."""
    if config.getvalue("dist") != "load":
        return None
    from tests.helpers.scheduling import EndToEndOnOneWorker

    return EndToEndOnOneWorker(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the embedded PostgreSQL server if this test run started it."""
    from config import embedded_db

    while _started:
        embedded_db.stop(_started.pop().data_dir)


@pytest.fixture
def db_url(transactional_db) -> str:
    """The test database's URL, for replica processes that must see committed rows."""
    from django.db import connection

    return database_url(connection.settings_dict)


@pytest.fixture
def subprocess_env(db_url: str) -> dict[str, str]:
    """Environment for a child process that uses the test database."""
    return child_env(db_url)


@pytest.fixture
def pgbouncer(transactional_db):
    """Debian's PgBouncer pooling transactions in front of the test server (POOL_SIZE sessions).

    Stopped, and its server sessions closed, before the test database is flushed.
    """
    from django.db import connection

    from tests.helpers import pgbouncer as bouncer

    with bouncer.running(connection.settings_dict, pool_size=POOL_SIZE) as running:
        yield running


@pytest.fixture
def pooled_env(subprocess_env, db_url, pgbouncer) -> dict[str, str]:
    """Environment of a child process configured for the pool: DATABASE_URL through PgBouncer
    (transaction pooling), DATABASE_DIRECT_URL the test database itself."""
    from django.db import connection

    return {
        **subprocess_env,
        "DATABASE_URL": pgbouncer.url(connection.settings_dict["NAME"]),
        "DATABASE_POOLING": "transaction",
        "DATABASE_DIRECT_URL": db_url,
    }


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(autouse=True)
def _no_listener_outlives_its_test():
    """Stop this process's replica and waiting queues (and their LISTEN connections).

    A listener left connected to the test database would keep it from being dropped.
    """
    yield
    replica = sys.modules.get("locks.replica")
    if replica is not None:
        replica.reset()
    waiting = sys.modules.get("locks.waiting")
    if waiting is not None:
        waiting.reset()
