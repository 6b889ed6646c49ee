"""What an operator reads: request ids on answers and log lines, and the service's gauges."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from prometheus_client import REGISTRY

from config.request_id import RequestIdFilter, request_id
from config.settings import LOG_FORMATTERS, log_format
from locks import waiting
from tests.helpers.api import issue, select, token
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.django_db


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# -- request ids --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    ["abc-123", "0f8fad5b-d9cb-469f-a165-70867728950e", "lb=1:trace/2+x@y.z", "a" * 128],
)
def test_a_valid_request_id_is_kept(given):
    assert request_id(given) == given


@pytest.mark.parametrize(
    "given", [None, "", "a b", "evil\nline", "x" * 129, "semi;colon", '"quoted"', "é"]
)
def test_an_invalid_or_missing_request_id_is_replaced(given):
    made = request_id(given)
    assert made != given
    assert len(made) == 32 and int(made, 16) >= 0


def test_every_answer_carries_its_request_id(anon, api):
    given = anon.get("/healthz", HTTP_X_REQUEST_ID="probe-7")
    assert given["X-Request-ID"] == "probe-7"
    made = anon.get("/healthz", HTTP_X_REQUEST_ID="no spaces please")
    assert made["X-Request-ID"] not in ("", "no spaces please")
    assert anon.get("/healthz")["X-Request-ID"] != made["X-Request-ID"]
    # API-key calls take a shorter middleware chain: they get theirs all the same.
    assert api.get("/api/v1/tokens/", HTTP_X_REQUEST_ID="key-call-1")["X-Request-ID"] == (
        "key-call-1"
    )


@pytest.fixture
def console():
    """The configured console handler, writing into a buffer for the test."""
    (handler,) = [
        h
        for h in logging.getLogger().handlers
        if any(isinstance(f, RequestIdFilter) for f in h.filters)
    ]
    buffer = io.StringIO()
    old = handler.setStream(buffer)
    yield handler, buffer
    handler.setStream(old)


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_a_log_line_names_its_request(anon, console, fmt):
    handler, buffer = console
    formatter = logging.config.DictConfigurator({}).configure_formatter(dict(LOG_FORMATTERS[fmt]))
    old = handler.formatter
    handler.setFormatter(formatter)
    try:
        # An unknown API path is a 404 that Django logs (django.request), after the middleware.
        anon.get("/api/v1/no-such-thing/", HTTP_X_REQUEST_ID="trace-42")
        logging.getLogger("config").warning("outside any request")
    finally:
        handler.setFormatter(old)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2, lines
    if fmt == "json":
        first, second = (json.loads(line) for line in lines)
        assert first["request_id"] == "trace-42"
        assert first["level"] == "WARNING" and first["logger"] == "django.request"
        assert first["status_code"] == 404
        assert "request" not in first
        assert second["request_id"] == "-"
    else:
        assert "[trace-42]" in lines[0] and "[-]" in lines[1]


def test_log_format_is_plain_or_json():
    assert log_format(None) == "plain"
    assert log_format(" JSON ") == "json"
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT"):
        log_format("xml")


# -- gauges and counters ------------------------------------------------------------------


def test_rate_limit_refusals_are_counted(api, settings):
    settings.SHERDLOCK_RATE_LIMITS = {"selections_per_key": "1/60s", "selections_per_wallet": "0"}
    issue(api, *[token("m", i, quantity="1") for i in range(3)])
    before = sample("sherdlock_rate_limit_refusals_total")
    select(api, "tx-0", "1")
    assert sample("sherdlock_rate_limit_refusals_total") == before
    select(api, "tx-1", "1", expect=429)
    select(api, "tx-2", "1", expect=429)
    assert sample("sherdlock_rate_limit_refusals_total") == before + 2


def test_pool_connections_in_use_follow_borrowing_and_giving_back(transactional_db):
    seen: list[float] = []
    borrowed, give_back = threading.Event(), threading.Event()

    def borrower() -> None:
        # Django gives each thread a connection of its own: borrowed from the process's pool.
        connection.ensure_connection()
        borrowed.set()
        give_back.wait(10)
        connection.close()

    connection.close()
    base = sample("sherdlock_db_pool_connections_in_use")
    thread = threading.Thread(target=borrower)
    thread.start()
    assert borrowed.wait(10)
    seen.append(sample("sherdlock_db_pool_connections_in_use"))
    give_back.set()
    thread.join(10)
    seen.append(sample("sherdlock_db_pool_connections_in_use"))
    assert seen == [base + 1, base]
    assert sample("sherdlock_db_pool_waiting") == 0


def test_the_wake_up_listener_says_whether_it_is_connected(transactional_db):
    waiting.reset()
    queues = waiting.queues()
    assert queues.start(timeout=10)
    assert sample("sherdlock_listener_connected", listener="wakeup") == 1
    with connection.cursor() as cursor:  # the server ends every other session of the test's
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    # It pauses before it reconnects, and says meanwhile that it is not connected.
    wait_for(lambda: sample("sherdlock_listener_connected", listener="wakeup") == 0, "0")
    wait_for(lambda: sample("sherdlock_listener_connected", listener="wakeup") == 1, "1")
    assert sample("sherdlock_listener_connected", listener="wakeup") == 1
    waiting.reset()
