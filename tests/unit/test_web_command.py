"""The web server's command line, as `make run` and the benchmarks start it."""

from __future__ import annotations

import pytest

from config.serve import web_command


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_requests_are_logged_only_when_asked():
    assert "--access-logfile" not in web_command("python", "127.0.0.1", 8000, {})
    logged = web_command("python", "127.0.0.1", 8000, {"WEB_ACCESS_LOG": "1"})
    assert option(logged, "--access-logfile") == "-"


def test_workers_follow_web_concurrency():
    assert option(web_command("python", "127.0.0.1", 8000, {}), "--workers") == "2"
    assert option(web_command("python", "h", 1, {"WEB_CONCURRENCY": "3"}), "--workers") == "3"


def test_requests_per_connection_are_read_and_checked():
    from config.gunicorn import requests_per_connection

    assert requests_per_connection(None) == 100
    assert requests_per_connection(" 7 ") == 7
    assert requests_per_connection("0") == 0
    for bad in ("-1", "ten", "1.5"):
        with pytest.raises(ValueError, match="WEB_KEEPALIVE_REQUESTS"):
            requests_per_connection(bad)
