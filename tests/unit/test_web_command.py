"""The web server's command line, as `make run` and the benchmarks start it."""

from __future__ import annotations

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
