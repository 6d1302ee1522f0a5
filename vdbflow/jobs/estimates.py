"""How long and how large a job is, in words and numbers: the measured costs the dry run's time estimate
is made of (by sampling mode, a Hessian or not) and the human forms of bytes and seconds."""

from __future__ import annotations

import numpy as np

# how long a job takes, for the plan: configs/demo.yaml at 8M points sampled and wrote 2.0-2.3 M points/s
# on one workstation (README); a job's own rate depends on its workers, mode and outputs
REFERENCE_POINTS_PER_S = 2.0e6
# what a point costs by sampling.mode (the stencil's size): CPU seconds a point of sample_grad_arrays with the
# Jacobian, against linear's, measured 2026-12-06 on the shared 2-core machine at load 7-8 (other sessions'
# work: CPU time of one thread, time.thread_time, OMP_NUM_THREADS=1, median of 3 interleaved rounds of 400k
# random points in a 96^3 vec3f volume; linear 19.9 M points/s): benchmarks/bench_mode_costs.py
KERNEL_COST = {
    "closest": 0.63,
    "linear": 1.0,
    "fd2": 13.7,
    "bspline3": 16.5,
    "catmull_rom": 17.7,
    "lag4": 21.4,
    "fd4": 28.7,
    "lag6": 50.5,
    "fd6": 51.9,
    "fd4lag4": 65.8,
    "fd8": 84.7,
    "m2q8": 96.3,
    "lag8": 102.8,
}
# a Hessian (sampling.outputs with a second derivative) multiplies the kernel's cost: sample_hessian_arrays
# against sample_grad_arrays, same day and way (200k points): linear 7.2x, lag4 3.3x, fd4 3.2x, bspline3 2.4x
HESSIAN_COST = {"closest": 7.2, "linear": 7.2}
HESSIAN_COST_HIGHER = 3.2
# the kernel's share of a linear job's time (the rest: points, routing, writing, Dask): fitted by least
# squares to the demo job (configs/demo.yaml, 1M points, 2 workers of 1 thread) by mode, same day, load 7:
# sample + write linear 1.32 s, lag4 2.53 s (1.9x), fd4 3.97 s (3.0x), lag8 17.25 s (13.1x), second of
# two interleaved rounds; the fit gives 3.3x, 4.1x and 12.5x (the wide stencils right, lag4 high)
KERNEL_SHARE = 0.11
# and Dask's cost of each chunk (its tasks: points, routing, sampling, writing): 0.1-0.2 s measured for
# the demo's outputs on 2 shared cores, less on a workstation
REFERENCE_SECONDS_PER_CHUNK = 0.05

# particle jobs (advect:): one thread's microseconds of vdbflow.advect a particle step, rk4 with the variational
# FTLE (0-10 % more than without) through a steady 64^3 vec3f ABC volume, by sampling.mode: 2026-12-06 on the
# shared 2-core machine at load 5 (time.thread_time, OMP_NUM_THREADS=1, 2000 seeds x 25 steps, second of two rounds)
PARTICLE_STEP_US = {
    "closest": 0.48,
    "linear": 0.71,
    "fd2": 4.39,
    "bspline3": 4.56,
    "catmull_rom": 4.59,
    "lag4": 4.95,
    "fd4": 9.17,
    "lag6": 14.9,
    "fd6": 18.5,
    "fd4lag4": 23.2,
    "fd8": 34.2,
    "m2q8": 30.3,
    "lag8": 32.9,
}
# through a volume.series, by advect.time: linear reads two steps a sample, pchip four (the double gyre's 41 steps,
# same way: lag4 1.7x / 3.1x the steady cost, catmull_rom 1.6x / 2.9x, lag8 1.5x / 2.8x)
SERIES_TIME_COST = {"none": 1.0, "linear": 1.7, "pchip": 3.1}
METHOD_COST = {"euler": 0.30, "rk2": 0.52, "rk4": 1.0}  # by advect.method, lag4 measured the same way
# what else an advect: job's time holds, fitted to runs on 2 workers of 1 thread of the quiet 2-core machine,
# 2026-12-07 (advection + writing, two runs each, against the model with the kernel's cost above as it is):
# configs/particles.yaml (250,000 seeds x 20 steps, steady linear) 2.5-2.7 s, planned 2.5; 40,000 of its seeds
# with lag4 3.1-4.3 s, planned 2.7; through the double gyre's 41 steps (5.5 MB files, volume.series.cache 4),
# 3,444 plane seeds x 200 steps with FTLE, linear + linear, 2 tasks, 1.8 s, planned 1.5; lag4 + pchip 6.4-8.1 s,
# planned 6.4; 20,000 seeds, 4 tasks, linear 2.8-3.0 s, planned 3.9.  A worker's first task pays its start
# (imports, the first pages of the volume), and every task opens each series step its particles' window reads
# (decoded and checksummed again unless the step stays in the worker's volume.series.cache): the same 3,444
# seeds in 8 tasks took 2.35 s more worker time than in 8 tasks with cache 41, 9.6 ms a step opened.  (A fit
# that put those costs on each particle step, 45 us, planned 18 s and 2 min for the 1.8 s and 3.0 s jobs.)
PARTICLE_TASK_START_S = 0.7
SERIES_OPEN_S = 4.6e-3  # a step opened by a task: this, and SERIES_OPEN_S_PER_BYTE of its file
SERIES_OPEN_S_PER_BYTE = 0.9e-9


def particle_step_seconds(mode: str, method: str = "rk4", time: str | None = None) -> float:
    """About how long one particle step of an ``advect:`` job takes on one worker thread (seconds): the
    kernel's measured cost for ``mode``, ``method`` and the series' ``time`` interpolation (None: a steady
    volume)."""
    kernel = PARTICLE_STEP_US.get(mode, max(PARTICLE_STEP_US.values()))
    kernel *= SERIES_TIME_COST.get(time or "none", max(SERIES_TIME_COST.values())) * METHOD_COST.get(method, 1.0)
    return kernel * 1e-6


def particle_estimate(
    steps: int, threads: int, mode: str, method: str, time: str | None, opened: tuple[int, int] = (0, 0)
) -> tuple[float, str]:
    """(seconds, the plan's words) for ``steps`` particle steps (seeds x steps each) of an ``advect:`` job whose
    workers run ``threads`` tasks at once, at :func:`particle_step_seconds`, with a worker's start and ``opened``
    (series steps its tasks open, their bytes) shared among the threads; the cluster's start not counted."""
    step = particle_step_seconds(mode, method, time)
    files, size = opened
    opening = files * SERIES_OPEN_S + size * SERIES_OPEN_S_PER_BYTE
    seconds = PARTICLE_TASK_START_S + (steps * step + opening) / max(1, threads)
    how = f"mode {mode}, {method}" + (f", time {time}" if time is not None else ", a steady volume")
    opens = f", and {files:,} series steps opened by the tasks ({human_bytes(size)})" if files else ""
    return seconds, (
        f"{'about ' if seconds >= 1 else ''}{human_seconds(seconds)} of advection + writing: {steps:,} particle "
        f"steps at about {1 / step / 1e3:,.0f} k a second on each of {threads} worker thread(s) for {how}{opens} "
        "(fitted to particle jobs on an otherwise idle 2-core machine: docs/jobs.md; the cluster's start not "
        "counted)"
    )


def series_window(steps: tuple[tuple[float, int], ...], t0: float, t1: float, time: str) -> tuple[int, int]:
    """(files, bytes) of the steps of ``steps`` (time, file bytes) a particle's window reads from t0 to t1:
    [t0, t1] and, for pchip, the step before and after."""
    times = np.array([t for t, _ in steps])
    reach = 1 if time == "pchip" else 0
    first = max(0, int(np.searchsorted(times, min(t0, t1), "right")) - 1 - reach)
    last = min(len(times) - 1, int(np.searchsorted(times, max(t0, t1), "left")) + reach)
    return last - first + 1, sum(b for _, b in steps[first : last + 1])


def series_opened(
    steps: tuple[tuple[float, int], ...], t0: float, t1: float, time: str, cache: int, tasks: int, workers: int
) -> tuple[int, int]:
    """(files, bytes) a series job's ``tasks`` open: each task every step of its particles' window
    (:func:`series_window`); a worker opens them once when they all stay in its ``cache``
    (``volume.series.cache``) between its tasks."""
    files, size = series_window(steps, t0, t1, time)
    opens = min(tasks, workers) if cache >= files else tasks
    return files * opens, size * opens


# volume.series.cache "auto": every step of the window stays open in a worker where the window's files take at most
# this share of its memory limit (the pages its tasks read count in its memory, on which Dask's monitor acts),
# else SERIES_CACHE_STEPS, the steps pchip reads at once
SERIES_CACHE_MEMORY_FRACTION = 0.25
SERIES_CACHE_STEPS = 4


def series_cache(
    steps: tuple[tuple[float, int], ...], t0: float, t1: float, time: str, cache: int | str, worker_memory: int | None
) -> int:
    """The steps a worker keeps open between its tasks: ``cache`` (``volume.series.cache``) if a number; for
    ``"auto"`` every step of the window (:func:`series_window`) where its files take at most
    ``SERIES_CACHE_MEMORY_FRACTION`` of ``worker_memory`` (bytes; None or 0: not known), else ``SERIES_CACHE_STEPS``."""
    if cache != "auto":
        return int(cache)
    files, size = series_window(steps, t0, t1, time)
    if worker_memory and size <= SERIES_CACHE_MEMORY_FRACTION * worker_memory:
        return max(files, SERIES_CACHE_STEPS)
    return SERIES_CACHE_STEPS


def series_cache_advice(
    steps: tuple[tuple[float, int], ...], t0: float, t1: float, time: str, cache: int | str, worker_memory: int | None
) -> str:
    """What the workers of a series job keep open between tasks, in the plan's words: for a cache that does not hold
    the window, which one would (and the bytes of files it maps); for ``"auto"``, what it chose and why."""
    files, size = series_window(steps, t0, t1, time)
    kept = series_cache(steps, t0, t1, time, cache, worker_memory)
    if kept >= files:
        if cache != "auto":
            return ""
        return f"; volume.series.cache auto keeps the window's {files} steps open in each worker ({human_bytes(size)})"
    if cache != "auto":
        why = f"volume.series.cache: {cache}"
    elif worker_memory:
        window, memory = human_bytes(size), human_bytes(worker_memory)
        why = f"volume.series.cache auto: {kept}, the window's {window} over a quarter of a worker's {memory}"
    else:
        why = f"volume.series.cache auto: {kept} here, the workers' memory not known before the job starts"
    return (
        f"; each task opens the {files} steps of the window again ({why}): "
        f"volume.series.cache: {files} keeps them open in each worker, {human_bytes(size)} of files mapped"
    )


def mode_factor(mode: str, hessian: bool = False) -> float:
    """How many times a linear job's time a job of ``mode`` takes (``hessian``: its outputs need second
    derivatives): ``1 + KERNEL_SHARE * (cost - 1)`` with the kernel's measured relative cost."""
    cost = KERNEL_COST.get(mode, max(KERNEL_COST.values()))
    if hessian:
        cost *= HESSIAN_COST.get(mode, HESSIAN_COST_HIGHER)
    return 1.0 + KERNEL_SHARE * (cost - 1.0)


def human_bytes(n: float) -> str:
    """``1.5 GB`` (powers of 1000)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} PB"  # pragma: no cover - the loop returns


def human_seconds(s: float) -> str:
    """``under 1 s``, ``45 s``, ``12 min``, ``3.5 h``, ``6.2 days``."""
    if s < 1:
        return "under 1 s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h" if s < 86400 else f"{s / 86400:,.1f} days"
