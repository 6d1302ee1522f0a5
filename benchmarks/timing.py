"""Shared timing helpers of the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` calls, after one warm-up call."""
    return min(timed(fn, repeat))
