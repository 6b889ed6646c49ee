"""How much of a point the replicas spent asleep in a timed sleep: backing off, not working.

A strategy that backs off sleeps between attempts (``time.sleep``). On a host whose cores the
replicas and the server share, a replica asleep leaves its core to the others: the fewer
replicas awake, the less each statement costs (fewer processes take turns on the cores and in
their caches), so a strategy's selections per second at a high replica count say how much of
it was asleep as well as what a selection costs. The point's line and report give that share
next to the CPU per selection, so that a ratio between two strategies can be read for what it
is.

``Sampler`` reads each replica's wait channel (``/proc/<pid>/wchan``, the kernel function a
sleeping process waits in) SAMPLE_HZ times a second between the point's start and end. A
process in a timed sleep waits in the kernel's nanosleep; one waiting for the server waits in a
poll or a socket read, and a running one has none. The share is the fraction of samples in a
nanosleep. Where wait channels cannot be read, or the kernel hides their names, nothing is
reported.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import time
from collections.abc import Iterable

# Samples per second and replica: over a 6-s point, several hundred per replica, so the share
# is good to a few per cent, at a few hundred small reads a second in the harness's process.
SAMPLE_HZ = 50

# The wait channels of a timed sleep (clock_nanosleep, nanosleep), by kernel version.
NANOSLEEP = frozenset({"hrtimer_nanosleep", "do_nanosleep", "common_nsleep", "clock_nanosleep"})


def wait_channel(pid: int) -> str | None:
    """Return the kernel function ``pid`` sleeps in ("0" while it runs), None if unreadable."""
    try:
        with open(f"/proc/{pid}/wchan") as wchan:
            return wchan.read().strip()
    except OSError:
        return None


@functools.cache
def available() -> bool:
    """Tell whether this host shows a sleeping process's wait channel by name."""
    if not sys.platform.startswith("linux"):
        return False
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            if wait_channel(sleeper.pid) in NANOSLEEP:
                return True
            time.sleep(0.01)
        return False
    finally:
        sleeper.kill()
        sleeper.wait()


class Sampler:
    """Sample the wait channels of ``pids`` from ``start_at`` to ``end_at`` (``time.monotonic``)."""

    def __init__(self, pids: Iterable[int], start_at: float, end_at: float) -> None:
        self._pids = list(pids)
        self._samples = 0
        self._asleep = 0
        self._thread = threading.Thread(
            target=self._run, args=(start_at, end_at), name="asleep-sampler", daemon=True
        )
        self._thread.start()

    def _run(self, start_at: float, end_at: float) -> None:
        period = 1.0 / SAMPLE_HZ
        at = start_at
        while at < end_at:
            time.sleep(max(0.0, at - time.monotonic()))
            for pid in self._pids:
                channel = wait_channel(pid)
                if channel is not None:
                    self._samples += 1
                    self._asleep += channel in NANOSLEEP
            at = max(at + period, time.monotonic())  # behind on a busy host: no burst

    def share(self) -> float | None:
        """Return the fraction of samples asleep in a timed sleep (waits for the end)."""
        self._thread.join()
        if not self._samples:
            return None
        return round(self._asleep / self._samples, 3)
