"""A web worker that holds more than its share of the connections moves one now and then.

``config.gunicorn``: every ``REBALANCE_REQUESTS``-th request of a connection is answered
"Connection: close" if its worker holds more connections than an even split gives it, so that
a few clients that all connected to one worker spread over the workers as they reconnect. The
split is made by stopping a worker (SIGSTOP) while a client connects: the other one accepts.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import psutil
import pytest

from config.gunicorn import FRESH_SECONDS, REBALANCE_REQUESTS
from tests.e2e.servers import WebServer, web_server


class Client:
    """One kept-alive HTTP connection; counts the answers that closed it."""

    def __init__(self, base: str) -> None:
        url = urlsplit(base)
        self.connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)

    def get(self, requests: int = 1) -> list[int]:
        """Send ``requests`` GETs; return the numbers (from 1) of those answered "close"."""
        closed = []
        for number in range(1, requests + 1):
            self.connection.request("GET", "/healthz")
            response = self.connection.getresponse()
            assert response.status == 200
            response.read()
            if (response.getheader("Connection") or "").lower() == "close":
                closed.append(number)
        return closed

    def close(self) -> None:
        self.connection.close()


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """Keep a worker from accepting (or serving) while the block runs."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def workers(server: WebServer) -> list[int]:
    return [child.pid for child in psutil.Process(server.process.pid).children()]


def connected(server: WebServer, busy: int, idle: int, clients: int) -> list[Client]:
    """Connect ``clients`` clients to worker ``busy`` (``idle`` is stopped meanwhile)."""
    out = []
    with stopped(idle):
        for _ in range(clients):
            client = Client(server.base)
            client.get()  # its first request makes the connection, to the worker not stopped
            out.append(client)
    return out


@pytest.mark.timeout(120)
def test_a_worker_holding_every_connection_closes_one(subprocess_env, tmp_path):
    with web_server(subprocess_env, tmp_path / "web.log", workers=2) as server:
        a, b = workers(server)
        # The readiness probe's worker counts its connection (closed since) until it is stale:
        # with it, two connections on one worker and one on the other would be an even split.
        time.sleep(FRESH_SECONDS + 0.2)
        first, second = connected(server, a, b, 2)
        try:
            # Two connections on one worker of two: its REBALANCE_REQUESTS-th request (the
            # client's one before, after the one that connected) closes the first one; the
            # connection it opens again starts its count afresh.
            every = REBALANCE_REQUESTS
            assert first.get(every + 1) == [every - 1]
        finally:
            first.close()
            second.close()


@pytest.mark.timeout(120)
def test_an_even_split_stays_put(subprocess_env, tmp_path):
    with web_server(subprocess_env, tmp_path / "web.log", workers=2) as server:
        a, b = workers(server)
        clients = connected(server, a, b, 1) + connected(server, b, a, 1)
        try:
            for _ in range(3):
                assert [client.get(REBALANCE_REQUESTS) for client in clients] == [[], []]
        finally:
            for client in clients:
                client.close()
