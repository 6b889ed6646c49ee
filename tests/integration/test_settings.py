"""Configuration: PostgreSQL only, from the environment."""

import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import database_settings
from tests.conftest import ROOT


def test_sqlite_url_is_refused_with_a_clear_error():
    with pytest.raises(ImproperlyConfigured, match="PostgreSQL only"):
        database_settings("sqlite:///db.sqlite3")


def test_process_refuses_to_start_on_sqlite():
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={"DATABASE_URL": "sqlite:///tmp.sqlite3", "DJANGO_SETTINGS_MODULE": "config.settings",
             "PATH": "/usr/bin:/bin", "SHERDLOCK_DATA_DIR": str(ROOT / ".data")},
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "supports PostgreSQL only" in result.stderr


def test_postgres_url_is_used_as_given():
    config = database_settings("postgres://u:p@db.example:6543/prod")
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.example", 6543, "prod")
    assert config["ENGINE"] == "django.db.backends.postgresql"
