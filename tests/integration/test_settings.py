"""Configuration: PostgreSQL only, from the environment; importing it starts nothing; the knobs."""

import dataclasses
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from clients.rates import Rate
from clients.throttling import configured_rates
from common.knobs import Knobs, environment_variables, knobs
from config import embedded_db
from config.database import (
    DEFAULT_POOL_SIZE,
    database_pool_size,
    database_pooling,
    database_settings,
    direct_database_url,
    prepare_threshold,
)
from config.settings import rate_limit
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
    assert config["ENGINE"] == "common.postgres"  # Django's, lending without a check query
    assert config["OPTIONS"]["pool"]["max_size"] == DEFAULT_POOL_SIZE
    assert config["CONN_MAX_AGE"] == 0 and not config["CONN_HEALTH_CHECKS"]
    assert not config.get("DISABLE_SERVER_SIDE_CURSORS")


def test_without_a_pool_each_thread_keeps_its_connection():
    config = database_settings("postgres://u:p@db.example:6543/prod", pool_size=None)
    assert config["ENGINE"] == "common.postgres"  # prepared statements planned generically
    assert config["CONN_MAX_AGE"] == 300 and config["CONN_HEALTH_CHECKS"]
    assert "pool" not in config.get("OPTIONS", {})


def test_url_options_survive_the_pool():
    config = database_settings("postgres://u@db.example/prod?sslmode=require", pool_size=4)
    assert config["OPTIONS"]["sslmode"] == "require"
    assert config["OPTIONS"]["pool"]["max_size"] == 4


def test_a_url_may_name_several_servers_for_libpq_to_choose_the_primary():
    config = database_settings(
        "postgresql://u:p@db1.example:5432,%2Frun%2Fpg:5433/prod?target_session_attrs=read-write"
    )
    assert (config["HOST"], config["PORT"]) == ("db1.example,/run/pg", "5432,5433")
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("prod", "u", "p")
    assert config["OPTIONS"]["target_session_attrs"] == "read-write"
    assert config["OPTIONS"]["pool"]["max_size"] == DEFAULT_POOL_SIZE
    assert direct_database_url("postgresql://u@a,b/prod", "transaction") == (
        "postgresql://u@a,b/prod"
    )


def test_connections_give_up_on_a_silent_server_unless_the_url_says_otherwise():
    config = database_settings("postgres://u@db.example/prod?connect_timeout=10")
    assert int(config["OPTIONS"]["connect_timeout"]) == 10
    assert config["OPTIONS"]["keepalives_idle"] > 0
    assert database_settings("postgres://u@db.example/prod")["OPTIONS"]["connect_timeout"] > 0


@pytest.mark.parametrize(
    "value,size",
    [(None, DEFAULT_POOL_SIZE), ("8", 8), (" 32 ", 32), ("off", None), ("0", None)],
)
def test_pool_size_is_read_from_the_environment(value, size):
    assert database_pool_size(value) == size


@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
def test_a_bad_pool_size_is_refused(value):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_POOL_SIZE"):
        database_pool_size(value)


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
    config = database_settings("postgres://u@pgbouncer:6432/prod", "transaction", None)
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


def test_statements_are_prepared_at_once_but_never_behind_a_transaction_pool():
    assert prepare_threshold("session") == 0
    assert prepare_threshold("transaction") is None


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


def test_rate_limits_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("SHERDLOCK_RATE_LIMIT_UNDER_TEST", "off")
    assert rate_limit("SHERDLOCK_RATE_LIMIT_UNDER_TEST", "10/s") == "off"
    monkeypatch.delenv("SHERDLOCK_RATE_LIMIT_UNDER_TEST")
    assert rate_limit("SHERDLOCK_RATE_LIMIT_UNDER_TEST", "10/s") == "10/s"


@pytest.mark.parametrize("value", ["100 per minute", "10/0s", "-5/60s"])
def test_a_malformed_rate_limit_is_refused_as_the_process_starts(value):
    result = _setup(
        DATABASE_URL="postgres://u@127.0.0.1:1/prod", SHERDLOCK_RATE_SELECTIONS_PER_KEY=value
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: SHERDLOCK_RATE_SELECTIONS_PER_KEY=" in result.stderr


def _rate_limit_messages() -> dict[str, str]:
    return {m.id: m.msg for m in checks.run_checks() if m.id.startswith("clients.")}


def test_the_shipped_rate_limits_pass_the_system_checks():
    assert _rate_limit_messages() == {}


def test_hand_set_rate_limits_are_checked_before_the_service_serves(settings):
    settings.SHERDLOCK_RATE_LIMITS = {
        "selections_per_key": "100 per minute",
        "selections_per_wallet": 0,  # off, as "0" is
        "selections_per_ip": "10/s",
    }
    messages = _rate_limit_messages()
    assert set(messages) == {"clients.E002", "clients.W001"}
    assert "['selections_per_key']" in messages["clients.E002"]
    assert "'selections_per_ip'" in messages["clients.W001"]
    settings.SHERDLOCK_RATE_LIMITS = ["600/60s"]
    assert set(_rate_limit_messages()) == {"clients.E001"}


def test_a_bad_hand_set_rate_limit_names_the_setting_when_read(settings):
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": ["600/60s"], "selections_per_wallet": 0}
    named = r"SHERDLOCK_RATE_LIMITS\['selections_per_key'\]"
    with pytest.raises(ImproperlyConfigured, match=named):
        configured_rates()
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": 600, "selections_per_wallet": None}
    with pytest.raises(ImproperlyConfigured, match="not of the form"):
        configured_rates()
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": "600/60s", "selections_per_wallet": 0}
    assert configured_rates() == {"selections_per_key": Rate(600, 60.0)}


# -- importing the settings starts nothing ------------------------------------------------------


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "PATH": "/usr/bin:/bin", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def short_tmp_path() -> Iterator[Path]:
    """A directory whose path is short enough for a socket inside it, wherever tmp_path is."""
    with tempfile.TemporaryDirectory(prefix="sherdlock-", dir="/tmp") as path:
        yield Path(path)


def test_importing_the_settings_starts_and_writes_nothing(short_tmp_path):
    data = short_tmp_path / "data"
    result = _python(
        "import django; django.setup(); from django.conf import settings;"
        " print(settings.DATABASES['default']['HOST']); print(settings.EMBEDDED_DATABASE_DIR)",
        SHERDLOCK_DATA_DIR=str(data),
    )
    assert result.returncode == 0, result.stderr
    host, embedded = result.stdout.split()
    # The embedded server's address follows from its data directory, which nothing created.
    assert (host, embedded) == (str(data / "postgres-run"), str(data / "postgres"))
    assert not data.exists()


def test_the_generated_secret_key_is_written_at_first_use_and_shared(tmp_path):
    data = tmp_path / "data"
    read = (
        "import django; django.setup(); from django.conf import settings;"
        " print(settings.SECRET_KEY)"
    )
    first, second = (_python(read, SHERDLOCK_DATA_DIR=str(data)) for _ in range(2))
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout and len(first.stdout.strip()) >= 50
    assert (data / "secret_key").stat().st_mode & 0o777 == 0o600
    assert _python(read, SHERDLOCK_DATA_DIR=str(data), SECRET_KEY="given").stdout == "given\n"


def test_every_process_finds_a_long_data_directory_s_socket_in_the_same_place(tmp_path):
    long = tmp_path / ("d" * 90) / "postgres"
    here = embedded_db.EmbeddedServer.at(long).socket_dir
    there = _python(
        "from config import embedded_db;"
        f" print(embedded_db.EmbeddedServer.at({str(long)!r}).socket_dir)"
    )
    assert there.stdout.strip() == str(here) and len(str(here)) < 40


# -- the knobs ----------------------------------------------------------------------------------


def test_unset_knobs_keep_their_defaults():
    assert Knobs.from_environ({}) == Knobs.from_mapping({}) == Knobs()
    assert Knobs.from_mapping(Knobs().setting()) == Knobs()
    assert (Knobs().partitions, Knobs().lease_seconds, Knobs().listen) == (1, 60.0, False)


def test_knobs_are_read_and_typed_from_the_environment():
    read = Knobs.from_environ(
        {
            "SHERDLOCK_PARTITIONS": "4",
            "SHERDLOCK_LEASE_SECONDS": "7.5",
            "SHERDLOCK_LISTEN": "on",
            "SHERDLOCK_DURABLE_LEASES": "yes",
        }
    )
    assert (read.partitions, read.lease_seconds, read.listen) == (4, 7.5, True)
    assert read.durable_leases is True


def test_tuning_is_not_read_from_the_environment():
    # Constants of the code they tune (sherdlock.config, locks.housekeeping, ...), not settings:
    # a variable of the old name changes nothing.
    tuning = {"SHERDLOCK_FETCH_LIMIT": "0", "SHERDLOCK_PREPARE_THRESHOLD": "off"}
    assert Knobs.from_environ(tuning) == Knobs()
    assert "SHERDLOCK_PREPARE_THRESHOLD" not in environment_variables()


@pytest.mark.parametrize(
    "variable,value,message",
    [
        ("SHERDLOCK_PARTITIONS", "0", "PARTITIONS=0 .*between 1 and 256"),
        ("SHERDLOCK_PARTITIONS", "many", "SHERDLOCK_PARTITIONS='many': must be a whole number"),
        ("SHERDLOCK_PARTITIONS", "2.5", "whole number"),
        ("SHERDLOCK_LEASE_SECONDS", "0", "LEASE_SECONDS=0.0 .*positive"),
        ("SHERDLOCK_LEASE_SECONDS", "inf", "finite"),
        ("SHERDLOCK_LEASE_SECONDS", "900", "MAX_LEASE_SECONDS=600.0 .*at least LEASE_SECONDS"),
        ("SHERDLOCK_LISTEN", "maybe", "SHERDLOCK_LISTEN='maybe': use one of"),
    ],
)
def test_bad_knobs_are_refused_naming_the_variable(variable, value, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        Knobs.from_environ({variable: value})


def test_a_process_refuses_to_start_with_a_bad_knob():
    result = _python("import django; django.setup()", SHERDLOCK_PARTITIONS="0")
    assert result.returncode != 0
    assert "PARTITIONS=0 (SHERDLOCK_PARTITIONS): must be between 1 and 256" in result.stderr


def test_the_settings_mapping_is_checked_when_read(settings):
    settings.SHERDLOCK = {"LEASE_SECONDS": 7}  # the rest keep their defaults
    assert knobs() == Knobs(lease_seconds=7.0)
    settings.SHERDLOCK = {"LEASE_SECONDS": 0}
    with pytest.raises(ImproperlyConfigured, match=r"LEASE_SECONDS=0.0 .*positive"):
        knobs()
    settings.SHERDLOCK = {"LEASE_SECOND": 7}
    with pytest.raises(ImproperlyConfigured, match=r"unknown knob.*LEASE_SECOND"):
        knobs()
    settings.SHERDLOCK = {"LISTEN": 1}
    with pytest.raises(ImproperlyConfigured, match=r"SHERDLOCK\['LISTEN'\]=1"):
        knobs()


def test_replacing_the_settings_mapping_is_seen_at_once(settings):
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LEASE_SECONDS": 3}
    assert knobs().lease_seconds == 3
    settings.SHERDLOCK = {**settings.SHERDLOCK, "LEASE_SECONDS": 4}
    assert knobs().lease_seconds == 4
    settings.SHERDLOCK = dataclasses.replace(knobs(), lease_seconds=5)
    assert knobs().lease_seconds == 5


def test_sessions_of_their_own_reach_every_server_of_the_direct_url(settings):
    from common import sessions

    settings.DATABASE_POOLING = "transaction"
    settings.DATABASE_DIRECT_URL = (
        "postgresql://u@db1:5432,db2:5433/prod?target_session_attrs=read-write&connect_timeout=7"
    )
    params = sessions.connection_params()
    assert (params["host"], params["port"]) == ("db1,db2", "5432,5433")
    assert params["target_session_attrs"] == "read-write"
    assert int(params["connect_timeout"]) == 7  # the URL's own
    assert int(params["keepalives_idle"]) > 0  # config.database.CONNECTION_DEFAULTS
