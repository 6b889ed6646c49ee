"""bench.cpu: the CPU time a point's groups of processes used, read with psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench import cpu

pytestmark = pytest.mark.skipif(not cpu.available(), reason="cannot read processes' CPU times")

# Says "ready", reads "<monotonic start> <cpu seconds>", waits for the start, computes that
# long, prints when it finished and sleeps.
SPIN_AT = """
import sys, time
print("ready", flush=True)
start, seconds = map(float, sys.stdin.readline().split())
time.sleep(max(0.0, start - time.monotonic()))
end = time.process_time() + seconds
while time.process_time() < end:
    pass
print(time.monotonic(), flush=True)
time.sleep(30)
"""


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_process_cpu_time_grows_while_it_computes_and_a_gone_one_has_none():
    before = cpu.cpu_seconds(os.getpid())
    spin(0.2)
    assert cpu.cpu_seconds(os.getpid()) - before >= 0.15
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert cpu.cpu_seconds(gone.pid) is None


def test_descendants_are_found_through_every_generation():
    # A child that starts a grandchild, both sleeping until the test has looked.
    sleeper = "import time; time.sleep(30)"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {sleeper!r}])"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(found := cpu.with_descendants(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert found[0] == child.pid and len(found) == 2
        assert os.getpid() not in found
    finally:
        for pid in cpu.with_descendants(child.pid)[::-1]:
            os.kill(pid, 9)
        child.wait()


def test_a_window_charges_each_group_what_it_used_between_its_two_readings():
    # The busy child computes a fixed 0.2 s of CPU, starting well after the window's first
    # reading, and the window ends long after the child can have finished, even on a host
    # whose cores are taken by other work: the figure depends on nothing the scheduler does.
    child = subprocess.Popen(
        [sys.executable, "-c", SPIN_AT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    idle = subprocess.Popen(
        [sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(10)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Both children's start-up is over before the window opens.
        assert child.stdout.readline() == idle.stdout.readline() == "ready\n"
        now = time.monotonic()
        child.stdin.write(f"{now + 0.5} 0.2\n")
        child.stdin.flush()
        window = cpu.Window({"busy": lambda: [child.pid], "idle": lambda: [idle.pid]}, now + 2.5)
        used = window.result(selections=10)
        finished_at = float(child.stdout.readline())
    finally:
        child.kill()
        idle.kill()
        child.wait()
        idle.wait()
    assert finished_at < now + 2.5, "the child had not finished its work when the window ended"
    # 0.2 s of CPU per 10 selections: 20 ms each, read in clock ticks of 10 ms.
    assert 18 <= used["busy"] <= 24
    assert used["idle"] < 2
    assert cpu.Window({"busy": lambda: [child.pid]}, now).result(selections=0) == {}


def test_a_window_reads_its_start_before_it_is_returned():
    # Its thread may first run after the point has ended, on a busy host: had that thread taken
    # the first reading, the two would come back to back and charge the point nothing.
    read_at = []

    def group():
        read_at.append(time.monotonic())
        return [os.getpid()]

    window = cpu.Window({"self": group}, time.monotonic() + 0.3)
    made_at = time.monotonic()
    spin(0.2)
    used = window.result(selections=1)
    assert len(read_at) == 2 and read_at[0] <= made_at < read_at[1]
    assert used["self"] >= 150  # the spin, in CPU milliseconds


def test_describe_names_each_group_or_says_it_was_not_measured():
    assert cpu.describe({"web": 2.771, "postgres": 1.3}) == "web 2.77 postgres 1.30"
    assert cpu.describe({}) == "-"
