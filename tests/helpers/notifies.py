"""Notifications read to the end: no guessing how long a busy host takes to deliver them."""

from __future__ import annotations

import time

import psycopg

SENTINEL = "sentinel"


def notified_since(
    listener: psycopg.Connection, marker: psycopg.Connection, channel: str, timeout: float = 10.0
) -> list[str]:
    """Return the payloads ``listener`` was sent on ``channel`` since the last call.

    Notifications arrive in commit order: once the sentinel that ``marker`` (outside any
    transaction the test has open; it may be ``listener`` itself) sends last is back,
    everything committed before it has been delivered too.
    """
    marker.execute("SELECT pg_notify(%s, %s)", [channel, SENTINEL])
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for notify in listener.notifies(timeout=max(0.0, deadline - time.monotonic())):
            if notify.payload == SENTINEL:
                return out
            out.append(notify.payload)
    raise AssertionError(f"the sentinel never came back; got {out}")
