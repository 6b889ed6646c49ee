"""The ``sherdlock`` command: its version, and the process each of its process names runs."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest
from django.conf import settings

import config
from config import cli
from config.local import DATA_DIR


def test_one_version_everywhere(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"sherdlock {config.__version__}\n"
    assert importlib.metadata.version("sherdlock") == config.__version__
    assert settings.SPECTACULAR_SETTINGS["VERSION"] == config.__version__


def test_no_command_prints_the_usage(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert all(f"  {name}" in out for name in cli.PROCESSES)


@pytest.mark.parametrize(
    ("name", "program"),
    [
        ("web", ["-m", "gunicorn", "config.wsgi:application", "-c", "python:config.gunicorn"]),
        ("worker", ["-m", "celery", "-A", "config", "worker"]),
        ("beat", ["-m", "celery", "-A", "config", "beat"]),
    ],
)
def test_each_process_runs_its_program_with_the_arguments_given(name, program, monkeypatch):
    monkeypatch.setenv("PORT", "8123")
    argv = cli.process_argv(name, ["--extra", "1"])
    assert argv[0] == sys.executable
    assert argv[1 : 1 + len(program)] == program
    assert argv[-2:] == ["--extra", "1"]
    if name == "web":
        assert argv[argv.index("--bind") + 1] == "127.0.0.1:8123"
    if name == "beat":  # its state file is in the data directory, not the installed package
        assert argv[argv.index("--schedule") + 1] == str(DATA_DIR / "celerybeat-schedule")
