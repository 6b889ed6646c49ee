"""The statement cursor (``common.db``): what it reads back from PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from common import db

pytestmark = pytest.mark.django_db(transaction=True)

INSTANT = datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=UTC)


def read_back(zone: str) -> datetime:
    db.execute("SELECT set_config('TimeZone', %(zone)s::text, false)", {"zone": zone})
    try:
        return db.one(db.execute("SELECT %(at)s::timestamptz", {"at": INSTANT}))[0]
    finally:
        db.execute("SELECT set_config('TimeZone', 'UTC', false)", {})


def test_times_are_read_as_the_instant_they_are():
    at = read_back("UTC")
    assert at == INSTANT
    assert at.utcoffset().total_seconds() == 0


def test_times_keep_their_instant_whatever_the_sessions_time_zone():
    # A server session shared through a transaction pooler may carry another TimeZone; the
    # answer's times must still be the same instants (not the local wall time marked UTC).
    at = read_back("Asia/Kolkata")
    assert at == INSTANT
    assert at.astimezone(UTC).isoformat() == "2026-01-01T10:00:00.123456+00:00"
