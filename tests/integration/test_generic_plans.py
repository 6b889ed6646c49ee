"""The engine (``common.postgres``) has the application's prepared statements planned generically.

PostgreSQL's default (``plan_cache_mode = auto``) plans a prepared statement afresh at each of
its first five runs on a session, and again after each change to a table it reads; each server
session here is told to plan generically at once instead, with or without a pool. Where nothing
is prepared (``DATABASE_POOLING=transaction``: behind a transaction-pooling proxy) the session
is left as the server set it up.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection

from common import db
from tests.helpers.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

# A statement of the application's shape: named parameters, run through common.db.
PROBE = "SELECT count(*) FROM tokens_token WHERE wallet = %(wallet)s AND currency = %(currency)s"

# How the probe's session has planned it so far: (generic, custom) plans of the prepared probe.
PLANS = (
    "SELECT coalesce(sum(generic_plans), 0)::int, coalesce(sum(custom_plans), 0)::int "
    "FROM pg_prepared_statements WHERE statement LIKE %s"
)
PROBED = "%FROM tokens_token WHERE wallet%"

# A child process runs the probe a few times, then reports its session's plan_cache_mode, the
# mode that session started with, and how the probe was planned.
CHILD = f"""
import django
django.setup()
from django.db import connection
from common import db
for n in range(6):
    db.execute({PROBE!r}, {{"wallet": f"w{{n}}", "currency": "USD"}})
with connection.cursor() as cursor:
    cursor.execute("SELECT setting, reset_val FROM pg_settings WHERE name = 'plan_cache_mode'")
    mode, started = cursor.fetchone()
    cursor.execute({PLANS!r}, [{PROBED!r}])
    generic, custom = cursor.fetchone()
print(mode, started, generic, custom)
"""


def plans_of_probe() -> tuple[int, int]:
    """Return (generic, custom) plans made so far for PROBE prepared on this session."""
    with connection.cursor() as cursor:
        cursor.execute(PLANS, [PROBED])
        return cursor.fetchone()


def test_a_prepared_statement_is_never_planned_per_call():
    for n in range(8):
        db.execute(PROBE, {"wallet": f"w{n}", "currency": "USD"})
    generic, custom = plans_of_probe()
    assert custom == 0, "each run planned for its own values"
    assert generic >= 1, "the statement was not prepared"
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_generic_plan"


def test_a_hot_statement_is_prepared_at_its_first_run():
    # The default threshold: runs before the statement is prepared are each planned afresh.
    db.execute(PROBE, {"wallet": "w", "currency": "USD"})
    assert plans_of_probe() == (1, 0)


def run_child(subprocess_env: dict[str, str], **env: str) -> tuple[str, str, int, int]:
    """Run CHILD with ``env`` on top; return (mode, mode it started with, generic, custom)."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env={**subprocess_env, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    mode, started, generic, custom = result.stdout.split()
    return mode, started, int(generic), int(custom)


def test_a_connection_per_thread_plans_generically_too(subprocess_env):
    mode, _, generic, custom = run_child(subprocess_env, DATABASE_POOL_SIZE="off")
    assert mode == "force_generic_plan"
    assert (generic >= 1, custom) == (True, 0)


def test_a_session_where_nothing_is_prepared_is_left_as_it_was(subprocess_env):
    # Configured as behind a transaction pool; both URLs name the test database itself.
    url = subprocess_env["DATABASE_URL"]
    pooled = {"DATABASE_POOLING": "transaction", "DATABASE_DIRECT_URL": url}
    mode, started, generic, custom = run_child(subprocess_env, **pooled)
    assert mode == started
    assert (generic, custom) == (0, 0)
