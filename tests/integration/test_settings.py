"""Configuration: PostgreSQL only, from the environment."""

import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import (
    database_pooling,
    database_settings,
    direct_database_url,
    prepare_threshold,
)
from tests.helpers.processes import ROOT


def test_sqlite_url_is_refused_with_a_clear_error():
    with pytest.raises(ImproperlyConfigured, match="PostgreSQL only"):
        database_settings("sqlite:///db.sqlite3")


def test_process_refuses_to_start_on_sqlite():
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={
            "DATABASE_URL": "sqlite:///tmp.sqlite3",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PATH": "/usr/bin:/bin",
            "SHERDLOCK_DATA_DIR": str(ROOT / ".data"),
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "supports PostgreSQL only" in result.stderr


def test_postgres_url_is_used_as_given():
    config = database_settings("postgres://u:p@db.example:6543/prod")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.example", 6543, "prod")
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert config["CONN_MAX_AGE"] == 300 and config["CONN_HEALTH_CHECKS"]
    assert not config.get("DISABLE_SERVER_SIDE_CURSORS")


# -- behind a transaction-pooling proxy --------------------------------------------------------


@pytest.mark.parametrize(
    "value,mode",
    [(None, "session"), ("", "session"), ("Session", "session"), (" transaction ", "transaction")],
)
def test_pooling_is_session_unless_told_transaction(value, mode):
    assert database_pooling(value) == mode


def test_an_unknown_pooling_mode_is_refused():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_POOLING='statement'"):
        database_pooling("statement")


def test_transaction_pooling_disables_server_side_cursors():
    config = database_settings("postgres://u@pgbouncer:6432/prod", "transaction")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("pgbouncer", 6432, "prod")
    assert config["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert config["CONN_MAX_AGE"] == 300
    assert "prepare_threshold" not in config.get("OPTIONS", {})  # Django's default: never


def test_transaction_pooling_needs_the_url_of_the_proxy():
    with pytest.raises(ImproperlyConfigured, match="needs DATABASE_URL"):
        database_settings(None, "transaction")


def test_the_direct_url_goes_with_transaction_pooling_only():
    direct = "postgres://u@db.example:5432/prod"
    assert direct_database_url(direct, "transaction") == direct
    assert direct_database_url(None, "session") is None
    with pytest.raises(ImproperlyConfigured, match="needs DATABASE_DIRECT_URL"):
        direct_database_url(None, "transaction")
    with pytest.raises(ImproperlyConfigured, match="only used with DATABASE_POOLING"):
        direct_database_url(direct, "session")
    with pytest.raises(ImproperlyConfigured, match="PostgreSQL only"):
        direct_database_url("sqlite:///db.sqlite3", "transaction")


def test_statements_are_never_prepared_behind_a_transaction_pool():
    assert prepare_threshold(None, "session") == 2
    assert prepare_threshold("5", "session") == 5
    assert prepare_threshold("off", "session") is None
    assert prepare_threshold(None, "transaction") is None
    assert prepare_threshold("off", "transaction") is None
    with pytest.raises(ImproperlyConfigured, match="SHERDLOCK_PREPARE_THRESHOLD='2'"):
        prepare_threshold("2", "transaction")


def _setup(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings;"
            " print(settings.SHERDLOCK['PREPARE_THRESHOLD'],"
            " settings.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'])",
        ],
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PATH": "/usr/bin:/bin",
            "SHERDLOCK_DATA_DIR": str(ROOT / ".data"),
            **env,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_process_configured_for_a_transaction_pool_never_prepares():
    result = _setup(
        DATABASE_URL="postgres://u@127.0.0.1:1/prod",
        DATABASE_POOLING="transaction",
        DATABASE_DIRECT_URL="postgres://u@127.0.0.1:2/prod",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "True"]


def test_a_process_refuses_transaction_pooling_without_a_direct_url():
    result = _setup(DATABASE_URL="postgres://u@127.0.0.1:1/prod", DATABASE_POOLING="transaction")
    assert result.returncode != 0
    assert "needs DATABASE_DIRECT_URL" in result.stderr
