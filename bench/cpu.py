"""Where the cores go during a point: the CPU time of each group of processes (psutil).

A point's processes fall into groups (the replicas or the load processes, the web server, the
PostgreSQL server); ``Window`` reads each group's user + system time as the point's clock
starts and again, from a thread of its own, when it stops, and reports the difference per
selection. A process that starts within the window counts from its start; one that exits
within it is lost (none of the groups' processes does so during a point).

The PostgreSQL group is the server's postmaster and everything under it (backends, WAL writer,
checkpointer), found from a backend's parent: a server on another host or in another PID
namespace has no group, and the report says nothing of it. Where processes' CPU times cannot
be read there is nothing to report, and ``Window.result`` is empty.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable

import psutil

Group = Callable[[], Iterable[int]]
GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def cpu_seconds(pid: int) -> float | None:
    """Return the user + system CPU time of ``pid`` (not of its children), None if gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except GONE:
        return None
    return times.user + times.system


def with_descendants(pid: int) -> list[int]:
    """Return ``pid`` and every live process under it."""
    try:
        return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except GONE:
        return [pid]


def postgres_server(connection) -> int | None:
    """Return the PID of the postmaster serving ``connection`` when it runs on this host."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    try:
        parent = psutil.Process(backend).parent()
        command = parent.cmdline() if parent is not None else []
    except GONE:
        return None
    return parent.pid if parent is not None and "postgres" in " ".join(command) else None


@functools.cache
def _postmaster() -> int | None:
    from django.db import connection

    return postgres_server(connection)


def server_groups() -> dict[str, Group]:
    """Return the group of the benchmark database's server, when it runs on this host."""
    pid = _postmaster()
    return {} if pid is None else {"postgres": lambda: with_descendants(pid)}


def _read(groups: dict[str, Group]) -> dict[str, dict[int, float]]:
    out = {}
    for name, pids in groups.items():
        times = {pid: cpu_seconds(pid) for pid in pids()}
        out[name] = {pid: t for pid, t in times.items() if t is not None}
    return out


class Window:
    """Read the groups' CPU time now and again at ``end_at`` (``time.monotonic``).

    Made as a point's clock starts. The first reading is taken by the caller, not by the
    thread that waits for the end: on a busy host a thread may first run after the point has
    ended, and a window whose two readings it took back to back would charge the point
    nothing.
    """

    def __init__(self, groups: dict[str, Group], end_at: float) -> None:
        self._groups = groups
        self._readings: list[dict[str, dict[int, float]]] = [_read(groups)]
        self._thread = threading.Thread(
            target=self._run, args=(end_at,), name="cpu-window", daemon=True
        )
        self._thread.start()

    def _run(self, end_at: float) -> None:
        time.sleep(max(0.0, end_at - time.monotonic()))
        self._readings.append(_read(self._groups))

    def result(self, selections: int) -> dict[str, float]:
        """Return each group's CPU milliseconds per selection over the window (waits for it)."""
        self._thread.join()
        if len(self._readings) < 2 or selections <= 0:
            return {}
        before, after = self._readings
        out = {}
        for name, times in after.items():
            used = sum(t - before.get(name, {}).get(pid, 0.0) for pid, t in times.items())
            if times:
                out[name] = round(used * 1000 / selections, 3)
        return out


def describe(ms_per_selection: dict[str, float]) -> str:
    """Return "<group> <ms> ..." for a point's line, or "-" when not measured."""
    if not ms_per_selection:
        return "-"
    return " ".join(f"{name} {ms:.2f}" for name, ms in ms_per_selection.items())


def available() -> bool:
    """Tell whether this host lets processes' CPU times be read."""
    return cpu_seconds(psutil.Process().pid) is not None
