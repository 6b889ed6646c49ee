"""The web server closes a kept-alive connection after ``WEB_KEEPALIVE_REQUESTS`` requests.

So that a few clients that all connected to one worker spread over the workers as they
reconnect (``config.gunicorn.KEEPALIVE_REQUESTS``).
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import pytest

from tests.e2e.servers import web_server


def answered_close(base: str, requests: int) -> tuple[list[int], int]:
    """Send ``requests`` GETs on one kept-alive client; return which were answered "close"
    (by their number on the client, from 1) and how many connections the client opened."""
    url = urlsplit(base)
    client = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    closed, ports = [], set()
    try:
        for number in range(1, requests + 1):
            client.request("GET", "/healthz")
            ports.add(client.sock.getsockname()[1])
            response = client.getresponse()
            assert response.status == 200
            response.read()
            if (response.getheader("Connection") or "").lower() == "close":
                closed.append(number)
    finally:
        client.close()
    return closed, len(ports)


@pytest.mark.timeout(120)
def test_a_connection_is_closed_after_its_keepalive_requests(subprocess_env, tmp_path):
    env = {**subprocess_env, "WEB_KEEPALIVE_REQUESTS": "5"}
    with web_server(env, tmp_path / "web.log", workers=1) as server:
        # The client reconnects after each close, and the count starts again.
        assert answered_close(server.base, 12) == ([5, 10], 3)


@pytest.mark.timeout(120)
def test_connections_are_closed_after_a_hundred_requests_unless_told_never(
    subprocess_env, tmp_path
):
    env = {k: v for k, v in subprocess_env.items() if k != "WEB_KEEPALIVE_REQUESTS"}
    with web_server(env, tmp_path / "default.log", workers=1) as server:
        assert answered_close(server.base, 101) == ([100], 2)
    with web_server({**env, "WEB_KEEPALIVE_REQUESTS": "0"}, tmp_path / "never.log") as server:
        assert answered_close(server.base, 101) == ([], 1)
