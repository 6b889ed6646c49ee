"""Commands run against a database nobody migrated say what to run instead of crashing."""

from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection

from tests.helpers.processes import ROOT, child_env, database_url

COMMANDS = [
    ["create_api_key", "backend", "--wallet", "alice", "--select"],
    ["seed_tokens", "--wallets", "1", "--tokens-per-wallet", "1"],
    ["seed_locks", "--count", "1"],
    ["housekeep"],
]


@pytest.fixture
def fresh_database(db) -> str:
    """Create an empty database on the test server; return its URL; drop it afterwards."""
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    admin = database_url({**connection.settings_dict, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url({**connection.settings_dict, "NAME": name})
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child_env(url),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_command_on_an_unmigrated_database_says_to_migrate(fresh_database, command):
    result = manage(fresh_database, *command)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert "is not migrated" in result.stderr
    assert "sherdlock migrate" in result.stderr


@pytest.mark.timeout(180)
def test_after_migrate_the_readme_command_works(fresh_database):
    assert manage(fresh_database, "migrate", "--verbosity", "0").returncode == 0
    result = manage(fresh_database, *COMMANDS[0])
    assert result.returncode == 0, result.stderr
    assert "." in result.stdout.strip()  # prefix.secret, printed once
