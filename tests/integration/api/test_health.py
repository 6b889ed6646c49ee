"""Probes at the root (/healthz, /readyz) and the API root listing."""

from __future__ import annotations

import pytest
from django.db import OperationalError

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_touching_the_database(anon, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = anon.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_checks_the_database(anon, django_assert_num_queries):
    assert anon.get("/readyz").status_code == 200  # the migrations seen applied, once
    with django_assert_num_queries(1):
        response = anon.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_503_while_a_migration_is_pending(anon, monkeypatch):
    from django.db.migrations.recorder import MigrationRecorder

    monkeypatch.setattr("config.views._migrated", [False])
    # The latest migration of the locks app, as if this code were deployed before migrate ran.
    latest = MigrationRecorder.Migration.objects.filter(app="locks").latest("id")
    latest.delete()
    response = anon.get("/readyz")
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    body = response.json()
    assert body["code"] == "database_unavailable"
    assert f"locks.{latest.name}" in body["detail"]
    assert "sherdlock migrate" in body["detail"]

    latest.save()  # migrated: ready again
    assert anon.get("/readyz").status_code == 200


def test_readyz_is_503_when_the_database_fails(anon, monkeypatch):
    class Broken:
        def cursor(self):
            raise OperationalError("connection refused")

    monkeypatch.setattr("config.views.connection", Broken())
    response = anon.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "code": "database_unavailable",
        "detail": "The database is unavailable.",
        "fields": {},
    }


def test_the_api_root_lists_the_endpoints(anon):
    response = anon.get("/api/v1/")
    assert response.status_code == 200
    endpoints = response.json()["endpoints"]
    assert endpoints["tokens"] == "http://testserver/api/v1/tokens/"
    assert endpoints["spend"] == "http://testserver/api/v1/selections/{tx_id}/spend/"
    assert endpoints["wallet_balances"] == "http://testserver/api/v1/wallets/{wallet}/balances/"
    assert {"selections", "locks", "schema", "docs", "healthz", "readyz"} <= set(endpoints)
