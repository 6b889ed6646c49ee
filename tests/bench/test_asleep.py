"""bench.asleep: the share of a point its replicas spent in a timed sleep, from wait channels."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench import asleep

pytestmark = pytest.mark.skipif(
    not asleep.available(), reason="this host does not name processes' wait channels"
)

# What each process does for as long as it lives: sleeps in naps as a backing-off replica
# does, computes, waits for data on its standard input as a replica waits for the server, or
# alternates naps and computing. The shares must hold on a busy host, where a process that
# wakes may wait milliseconds for a core and one that computes may be preempted (neither is
# asleep): the napper's naps are long next to such a wait, and the computing is timed by the
# clock, not by CPU time. Each says it is up (UP) before it starts: on a busy host an
# interpreter can take a second to start, and its start-up is none of the four.
UP = "import sys\nprint(flush=True)\n"
PROGRAMS = {
    "naps": "import time\nwhile True:\n    time.sleep(0.2)",
    "computes": "while True:\n    pass",
    "waits": "sys.stdin.read()",
    "both": (
        "import time\nwhile True:\n    time.sleep(0.05)\n"
        "    end = time.monotonic() + 0.05\n    while time.monotonic() < end:\n"
        "        pass"
    ),
}


@pytest.fixture
def processes():
    started = {
        name: subprocess.Popen(
            [sys.executable, "-c", UP + code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for name, code in PROGRAMS.items()
    }
    for process in started.values():
        process.stdout.readline()
    yield started
    for process in started.values():
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()


def test_only_a_timed_sleep_counts_as_asleep(processes):
    start = time.monotonic() + 0.1  # each is past its first line: sleeping, computing, reading
    samplers = {
        name: asleep.Sampler([process.pid], start, start + 1.0)
        for name, process in processes.items()
    }
    shares = {name: sampler.share() for name, sampler in samplers.items()}
    assert shares["naps"] >= 0.9
    assert shares["computes"] <= 0.05
    assert shares["waits"] <= 0.05  # blocked on a read: waiting, not backing off
    assert 0.2 <= shares["both"] <= 0.8


def test_the_share_is_over_every_process_sampled(processes):
    start = time.monotonic() + 0.1
    pids = [processes["naps"].pid, processes["computes"].pid]
    share = asleep.Sampler(pids, start, start + 1.0).share()
    assert 0.4 <= share <= 0.6


def test_nothing_is_reported_of_processes_that_are_gone():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    start = time.monotonic()
    assert asleep.wait_channel(gone.pid) is None
    assert asleep.Sampler([gone.pid], start, start + 0.1).share() is None
