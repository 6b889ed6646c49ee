"""Run a fixed sequence of cycles in this process and say what each cost: CPU and wall time.

Shared by the in-process cost tools (``bench.rest_cpu``, ``bench.library_cpu``): a warm-up of
``WARM_UP`` cycles (numbered below zero) first, so that connections, prepared statements and
caches are as a running process has them, then ``cycles`` measured ones (numbered from zero),
under cProfile when asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable

WARM_UP = 200


def measure(
    cycle: Callable[[int], None], cycles: int, profile: bool = False, top: int = 40
) -> tuple[float, float]:
    """Return (CPU ms, wall ms) per measured cycle; with ``profile`` print cProfile's view."""
    for number in range(-WARM_UP, 0):
        cycle(number)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    cpu, wall = time.process_time(), time.perf_counter()
    for number in range(cycles):
        cycle(number)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)
    return 1000 * cpu / cycles, 1000 * wall / cycles
