"""The arithmetic of an integration's steps, free of any sampling: the Runge-Kutta tableaus, step counts,
saved steps and the memory bound of saved trajectories (read by job configs as well as the integrator)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from vdbflow.errors import SamplingError, TimeError

MAX_STEPS = 10_000_000  # steps of one integration (its step plan and saved slots are held in memory)

# Butcher tableaus: nodes c, stage coefficients a (lower triangular), weights b
TABLEAUS: dict[str, tuple[tuple[float, ...], tuple[tuple[float, ...], ...], tuple[float, ...]]] = {
    "euler": ((0.0,), ((),), (1.0,)),
    "rk2": ((0.0, 0.5), ((), (0.5,)), (0.0, 1.0)),
    "rk4": ((0.0, 0.5, 0.5, 1.0), ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)),
}


def step_count(t0: float, t1: float, dt: float) -> int:
    """``n = ceil(|t1 - t0| / dt)``, the steps of an integration (0 when t1 = t0); a TimeError for
    non-finite times, ``dt`` <= 0, or more than ``MAX_STEPS`` steps (computed without overflow)."""
    if not (math.isfinite(t0) and math.isfinite(t1)):
        raise TimeError(f"expected finite start and end times, got t0={t0!r}, t1={t1!r}")
    if not (math.isfinite(dt) and dt > 0):
        raise TimeError(f"expected a finite time step dt > 0, got {dt!r}")
    T = abs(t1 - t0)
    ratio = T / dt if math.isfinite(T) else math.inf  # inf: more steps than any float can count
    if not ratio <= MAX_STEPS + 1:
        raise TimeError(
            f"expected at most {MAX_STEPS:,} steps (|t1 - t0| / dt), got "
            f"{f'{ratio:.3g}' if math.isfinite(ratio) else 'more than a float can count'}: t0={t0!r}, t1={t1!r}, "
            f"dt={dt!r}"
        )
    n = max(1, math.ceil(ratio - 1e-9)) if t1 != t0 else 0
    if n > MAX_STEPS:
        raise TimeError(
            f"expected at most {MAX_STEPS:,} steps (|t1 - t0| / dt), got {n:,}: t0={t0!r}, t1={t1!r}, dt={dt!r}"
        )
    return n


def save_every_of(value: Any) -> int:
    """``save_every`` as an int >= 1; a SamplingError saying what it got otherwise (NaN, inf, 2.5, 'a')."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SamplingError(f"expected save_every to be an integer >= 1, got {value!r}")
    if not (math.isfinite(value) and value >= 1 and int(value) == value):
        raise SamplingError(f"expected save_every to be an integer >= 1, got {value!r}")
    return int(value)


# the saved trajectories of one integration (positions, velocities, Jacobians at the saved steps) are
# held in memory: at most this fraction of the machine's memory (or DEFAULT_TRAJECTORY_BYTES where
# the memory cannot be read); set MAX_TRAJECTORY_BYTES to an int to choose the limit yourself
TRAJECTORY_MEMORY_FRACTION = 0.5
DEFAULT_TRAJECTORY_BYTES = 8 << 30
MAX_TRAJECTORY_BYTES: int | None = None


def trajectory_bytes_limit() -> int:
    """The most bytes the saved trajectories of one :func:`advect` may take (see ``MAX_TRAJECTORY_BYTES``)."""
    if MAX_TRAJECTORY_BYTES is not None:
        return int(MAX_TRAJECTORY_BYTES)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return DEFAULT_TRAJECTORY_BYTES
    return int(memory * TRAJECTORY_MEMORY_FRACTION) if memory > 0 else DEFAULT_TRAJECTORY_BYTES


def saved_steps(n: int, save_every: int) -> int:
    """How many of ``n`` steps' positions are kept: every ``save_every``-th from 0, and the last."""
    return len(range(0, n + 1, save_every)) + (n % save_every != 0)


def saved_bytes_per_step(with_velocity: bool, with_jacobian: bool) -> int:
    """Bytes a particle's saved step takes: its position, and as asked velocity and Jacobian (float64)."""
    return 8 * (3 + 3 * bool(with_velocity) + 9 * bool(with_jacobian))


def check_trajectory_memory(particles: int, saved_steps: int, bytes_per_step: int, hint: str = "") -> None:
    """A TimeError when ``particles`` x ``saved_steps`` x ``bytes_per_step`` exceeds
    :func:`trajectory_bytes_limit`, saying the estimate, the limit and how to make it smaller."""
    need, limit = particles * saved_steps * bytes_per_step, trajectory_bytes_limit()
    if need > limit:
        raise TimeError(
            f"expected the saved trajectories to fit in {limit / 2**30:,.1f} GiB "
            f"(vdbflow.temporal.steps.MAX_TRAJECTORY_BYTES sets the limit), got {particles:,} particles x "
            f"{saved_steps:,} saved steps x {bytes_per_step} bytes = {need / 2**30:,.1f} GiB: save fewer steps "
            f"(a larger save_every), advect fewer seeds at once{hint}, or a shorter integration"
        )
