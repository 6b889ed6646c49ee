"""Fixtures the end-to-end tests share: a web server of a test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.servers import web_server


@pytest.fixture
def server(subprocess_env, tmp_path) -> Iterator[str]:
    """A web server of the test's own (``tests.e2e.servers``): its base URL."""
    with web_server(subprocess_env, tmp_path / "web.log") as served:
        yield served.base
