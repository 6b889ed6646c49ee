"""A lost database connection is a 503 database_unavailable with Retry-After on every endpoint,
logged as one line, and the next request connects afresh."""

from __future__ import annotations

import logging
import sys

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import RequestFactory

from config.outage import ConnectionLossFilter, is_connection_loss
from config.views import server_error
from tests.helpers.api import issue, select, token
from tests.helpers.processes import database_url

pytestmark = pytest.mark.django_db(transaction=True)

API_CALLS = [
    ("get", "/api/v1/tokens/", None),
    ("post", "/api/v1/tokens/", {"tokens": [token("new")]}),
    ("get", "/api/v1/wallets/alice/balances/", None),
    ("get", "/api/v1/selections/", None),
    (
        "post",
        "/api/v1/selections/",
        {"tx_id": "t2", "wallet": "alice", "currency": "USD", "quantity": "1"},
    ),
    ("get", "/api/v1/selections/pay/", None),
    (
        "post",
        "/api/v1/selections/pay/spend/",
        {"outputs": [{"index": 0, "wallet": "bob", "currency": "USD", "quantity": "80"}]},
    ),
    ("post", "/api/v1/selections/pay/release/", None),
    ("post", "/api/v1/selections/pay/extend/", {}),
    ("get", "/api/v1/locks/", None),
    ("get", "/readyz", None),
]


def cut_connection() -> None:
    """Terminate this process's database session from another one, as a restart would."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with psycopg.connect(database_url(connection.settings_dict), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.fixture
def selected(api):
    issue(api, token("m", 0, quantity="80"))
    select(api, "pay", "80")
    return api


def assert_unavailable(response, caplog) -> None:
    assert response.status_code == 503, response.content[:300]
    assert response["Retry-After"] == "1"
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    lines = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("method, url, body", API_CALLS, ids=[f"{m} {u}" for m, u, _ in API_CALLS])
def test_every_endpoint_answers_503_when_the_connection_is_lost(
    selected, caplog, method, url, body
):
    cut_connection()
    caplog.clear()
    response = getattr(selected, method)(url, body, format="json")
    assert_unavailable(response, caplog)
    assert response.json() == {
        "code": "database_unavailable",
        "detail": "The database is unavailable.",
        "fields": {},
    }
    # The broken connection was dropped: the next request connects afresh and succeeds.
    again = selected.get("/api/v1/selections/pay/")
    assert again.status_code == 200, again.json()


def test_an_admin_page_answers_503_without_a_traceback(admin_client, caplog):
    admin_client.get("/admin/")
    cut_connection()
    caplog.clear()
    response = admin_client.get("/admin/tokens/token/")
    assert_unavailable(response, caplog)
    assert response["Content-Type"].startswith("text/plain")
    assert admin_client.get("/admin/tokens/token/").status_code == 200


def lost() -> OperationalError:
    error = OperationalError("server closed the connection unexpectedly")
    error.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    return error


@pytest.mark.parametrize(
    "path, content_type",
    [("/api/v1/tokens/", "application/json"), ("/admin/", "text/plain; charset=utf-8")],
)
def test_a_loss_raised_outside_a_view_is_503_too(path, content_type):
    request = RequestFactory().get(path)
    try:
        raise lost()
    except OperationalError:
        response = server_error(request)
    assert (response.status_code, response["Content-Type"]) == (503, content_type)
    assert response["Retry-After"] == "1"


def test_log_records_of_a_lost_connection_lose_their_traceback():
    try:
        raise lost()
    except OperationalError:
        record = logging.LogRecord(
            "django.request",
            logging.ERROR,
            __file__,
            1,
            "Internal Server Error: %s",
            ("/admin/",),
            sys.exc_info(),
        )
    assert ConnectionLossFilter().filter(record)
    assert record.exc_info is None and record.levelno == logging.WARNING
    assert record.getMessage() == (
        "Internal Server Error: /admin/ (database unavailable: "
        "server closed the connection unexpectedly)"
    )


@pytest.mark.parametrize(
    "sqlstate, lost_connection",
    [
        (None, True),
        ("08006", True),
        ("57P01", True),
        ("57P03", True),
        ("57014", False),
        ("40P01", False),
        ("40001", False),
    ],
)
def test_only_errors_of_a_lost_connection_count(sqlstate, lost_connection):
    cause = psycopg.OperationalError("x")
    if sqlstate is not None:
        cause = psycopg.errors.lookup(sqlstate)("x")
    error = OperationalError("x")
    error.__cause__ = cause
    assert is_connection_loss(error) is lost_connection


def test_the_api_handler_maps_a_lost_connection_itself():
    from config.exceptions import exception_handler

    response = exception_handler(lost(), {})
    assert (response.status_code, response.data["code"]) == (503, "database_unavailable")
    assert response.headers["Retry-After"] == "1"
