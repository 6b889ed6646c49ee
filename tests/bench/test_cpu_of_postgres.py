"""bench.cpu finds the PostgreSQL server the tests run on, with its backends under it."""

from __future__ import annotations

import pytest
from django.db import connection

from bench import cpu

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not cpu.available(), reason="cannot read processes' CPU times"),
]


def test_the_server_of_a_local_connection_is_its_postmaster_with_this_backend_under_it():
    postmaster = cpu.postgres_server(connection)
    if postmaster is None:
        pytest.skip("the database server runs on another host or in another PID namespace")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    assert backend in cpu.with_descendants(postmaster)
    assert cpu.cpu_seconds(postmaster) is not None
