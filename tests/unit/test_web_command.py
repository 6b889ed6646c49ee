"""The web server's command line, as `make run`, the tests and the benchmarks start it."""

from __future__ import annotations

from common.knobs import Knobs
from config.serve import web_command


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_requests_are_logged_only_when_asked():
    assert "--access-log" not in web_command("python", "127.0.0.1", 8000, {})
    assert "--access-log" in web_command("python", "127.0.0.1", 8000, {"WEB_ACCESS_LOG": "1"})


def test_workers_follow_web_concurrency():
    assert option(web_command("python", "127.0.0.1", 8000, {}), "--workers") == "2"
    assert option(web_command("python", "h", 1, {"WEB_CONCURRENCY": "3"}), "--workers") == "3"


def test_threads_follow_web_threads_and_leave_room_beside_the_waiting_requests():
    threads = int(option(web_command("python", "h", 1, {}), "--blocking-threads"))
    assert threads > Knobs().wait_slots
    assert (
        option(web_command("python", "h", 1, {"WEB_THREADS": "40"}), "--blocking-threads") == "40"
    )


def test_failed_workers_are_replaced():
    assert "--respawn-failed-workers" in web_command("python", "127.0.0.1", 8000, {})
