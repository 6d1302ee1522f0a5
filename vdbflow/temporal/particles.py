"""Lagrangian particles: trajectories (:func:`advect`) and finite-time Lyapunov exponents
(:func:`ftle`) through a steady :class:`~vdbflow.Volume`, a :class:`~vdbflow.VolumeSeries` or a
:class:`~vdbflow.DistributedVolume` of vec3 velocity, in world space.

Integrators (explicit Runge-Kutta, ``h = (t1 - t0) / n`` with ``n = ceil(|t1 - t0| / dt)``):
``euler`` (first order), ``rk2`` (the explicit midpoint rule, second order), ``rk4`` (the classical
fourth-order method).  Three engines give the same trajectories bit for bit: through a steady float
Volume, whole trajectories in the kernels (``kernels/vdbflow/advect.h``); through a DistributedVolume,
a step at a time, the particles routed to the partitions owning their cells and stepped there in the
kernels (a step that leaves its partition's leaves and halo is redone stage by stage); otherwise stage
by stage, every stage sampling all live particles in one call.

A particle stops, with a status, the first time a stage point is non-finite or samples a non-finite
value (``status`` 2) or the stencil of ``mode`` there leaves the active voxels (``status`` 1, see
:func:`vdbflow.ops.coverage.stencil_inside`); its later positions are NaN and ``end_time`` is the time of
its last valid position.  Every stored position is one where the field is defined.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core.volume import Volume
from vdbflow.errors import DeviceError, PointsError, SamplingError, TimeError
from vdbflow.ops.coverage import InsideCheck

ACTIVE, LEFT_DATA, NON_FINITE = 0, 1, 2
MAX_STEPS = 10_000_000  # steps of one integration (its step plan and saved slots are held in memory)
STATUS_MEANINGS = "active left_data non_finite"

# Butcher tableaus: nodes c, stage coefficients a (lower triangular), weights b
TABLEAUS: dict[str, tuple[tuple[float, ...], tuple[tuple[float, ...], ...], tuple[float, ...]]] = {
    "euler": ((0.0,), ((),), (1.0,)),
    "rk2": ((0.0, 0.5), ((), (0.5,)), (0.0, 1.0)),
    "rk4": ((0.0, 0.5, 0.5, 1.0), ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6)),
}


class _Source:
    """Velocity (M, 3) and world Jacobians (M, 3, 3), float64, at world points (M, 3) and a time."""

    kind = "volume"
    name = "velocity"
    component_names: tuple[str, ...] = ("u", "v", "w")
    units: str | None = None
    length_units: str | None = None
    time_range: tuple[float, float] | None = None

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return np.ones(len(points), bool)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    compiled = False  # whether ``advect`` integrates whole trajectories in the kernels
    partitioned = False  # whether ``step`` integrates a step of every particle in its partition

    def advect(self, x: np.ndarray, *args: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError


def _point_order(n: int) -> str:
    """The CPU loop for n particles: below 65,536 points measuring the access pattern ("auto") costs
    more than it saves (results are identical either way)."""
    return "coherent" if n < 65536 else "auto"


def _check_vec3(components: int, what: str) -> None:
    if components != 3:
        raise SamplingError(f"expected a vec3 velocity {what} to advect particles, got {components} component(s)")


class _VolumeSource(_Source):
    def __init__(self, vol: Volume, mode: str, device: str = "cpu"):
        _check_vec3(vol.components, "volume")
        self.vol, self.mode, self.device = vol, mode, device
        self._names(vol)
        self._inside = InsideCheck(vol.topology, mode)

    @property
    def compiled(self) -> bool:  # type: ignore[override]
        return self.vol.value_type.is_float

    def advect(self, x: np.ndarray, *args: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Whole trajectories in one kernel call (``vdbflow.devices.cpu.advect``): steady, so every stage
        reads the one volume; results equal the stage-by-stage integration bit for bit."""
        from vdbflow.ops.sampling import MODES

        k, mode = self.vol.kernel_arrays(), MODES[self.mode]
        if self.device == "cpu":
            from vdbflow.devices import cpu

            return cpu.advect(k, mode, x, *args)
        import cupy

        from vdbflow.devices import cuda

        a, b, h, save_slot, *outputs = args
        on_gpu = [None if arr is None else cupy.asarray(arr) for arr in (x, *outputs)]
        status, last_step, evaluations = cuda.advect(k, mode, on_gpu[0], a, b, h, save_slot, *on_gpu[1:])
        for host, dev in zip((x, *outputs), on_gpu, strict=True):
            if host is not None:
                host[...] = dev.get()
        return status.get(), last_step.get(), evaluations.get()

    def _names(self, vol: Any) -> None:
        self.name, self.component_names = vol.name, tuple(vol.component_names)
        self.units, self.length_units = vol.units, vol.length_units

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return self._inside(points)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        from vdbflow.ops.sampling import sample_grad_arrays

        u, J = sample_grad_arrays(
            self.vol,
            points,
            self.mode,
            space="world",
            jacobian_space="world",
            jacobian=jacobian,
            point_order=_point_order(len(points)),
        )
        return u.astype(np.float64), None if J is None else J.astype(np.float64)


class _SeriesSource(_VolumeSource):
    kind = "series"
    compiled = False  # type: ignore[assignment]  # stages read steps interpolated in time

    def __init__(self, series: Any, mode: str, time: str):
        self.series, self.mode, self.time = series, mode, time
        template = series.template
        _check_vec3(template.components, "series")
        self._names(template)
        self.time_range = (float(series.times[0]), float(series.times[-1]))

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return self.series.stencil_inside(points, t, self.mode, self.time)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        return self.series.sample_grad_arrays(
            points,
            t,
            self.mode,
            self.time,
            space="world",
            jacobian_space="world",
            jacobian=jacobian,
            point_order=_point_order(len(points)),
        )


def _advect_piece(
    volume: Volume,
    x: np.ndarray,
    F: np.ndarray | None,
    A: np.ndarray,
    B: np.ndarray,
    h: float,
    last: bool,
    want_velocity: bool,
    want_jacobian: bool,
    mode: int,
) -> tuple:
    """One step of a partition's particles, on its worker (a task of :meth:`_DistributedSource.step`):
    status, whether x_k was valid, x_{k+1}, the velocity and Jacobian at x_k (as asked), F at
    x_{k+1} and the stage points sampled.  The last step (``last``) only checks and samples x_k."""
    from vdbflow.devices import cpu

    m = len(x)
    x = np.array(x, np.float64)
    position = np.full((m, 1, 3), np.nan)
    velocity = np.full((m, 1, 3), np.nan) if want_velocity else None
    jacobian = np.full((m, 1, 3, 3), np.nan) if want_jacobian else None
    F = None if F is None else np.array(F, np.float64)
    save_slot = np.array([0] if last else [0, -1], np.int64)
    status, last_step, evaluations = cpu.advect(
        volume.kernel_arrays(), mode, x, A, B, h, save_slot, position, velocity, jacobian, F, validate_end=last
    )
    u = None if velocity is None else velocity[:, 0]
    J = None if jacobian is None else jacobian[:, 0]
    return status, last_step >= 0, x, u, J, F, evaluations


class _DistributedSource(_VolumeSource):
    kind = "distributed"
    compiled = False  # type: ignore[assignment]  # the steps are partitioned instead

    def __init__(self, dvol: Any, mode: str):
        self.dvol, self.mode = dvol, mode
        _check_vec3(dvol.template.components, "volume")
        self._names(dvol.template)
        self._inside = InsideCheck(dvol.topology, mode)

    @property
    def partitioned(self) -> bool:  # type: ignore[override]
        return self.dvol.template.value_type.is_float  # the kernels advect float data

    def step(
        self,
        x: np.ndarray,
        F: np.ndarray | None,
        A: np.ndarray,
        B: np.ndarray,
        h: float,
        last: bool,
        want_velocity: bool,
        want_jacobian: bool,
    ) -> tuple:
        """A step of particles x (M, 3): each partition integrates the particles whose cell it owns
        (:func:`_advect_piece`, on the partition's worker).  Returns, in input order, status (M,)
        int8, x_k valid (M,) bool, x_{k+1} (M, 3), velocity (M, 3) and Jacobian (M, 3, 3) at x_k (or
        None), F (M, 3, 3) (or None) and the stage points sampled (M,).  A status of ``LEFT_DATA``
        only says the step left the partition's data."""
        from vdbflow.ops.sampling import MODES

        dvol = self.dvol
        m = len(x)
        order, bounds, grouped = dvol.plan.router.route(x, dvol.template.transform, "world")
        status = np.full(m, LEFT_DATA, np.int8)  # the background-only group (none without a near table)
        valid = np.zeros(m, bool)
        x_next = np.array(x, np.float64)
        u = np.full((m, 3), np.nan) if want_velocity else None
        J = np.full((m, 3, 3), np.nan) if want_jacobian else None
        F_next = None if F is None else np.array(F, np.float64)
        sampled = np.zeros(m, np.int64)
        pieces, futures = [], []
        for p in range(dvol.plan.partitions):
            rows = order[bounds[p + 1] : bounds[p + 2]]
            if len(rows):
                pieces.append(rows)
                futures.append(
                    dvol.client.submit(
                        _advect_piece,
                        dvol.partitions[p],
                        grouped[bounds[p + 1] : bounds[p + 2]],
                        None if F is None else F[rows],
                        A,
                        B,
                        h,
                        last,
                        want_velocity,
                        want_jacobian,
                        MODES[self.mode],
                        pure=False,
                    )
                )
        for rows, result in zip(pieces, dvol.client.gather(futures), strict=True):
            status[rows], valid[rows], x_next[rows] = result[0], result[1], result[2]
            if u is not None:
                u[rows] = result[3]
            if J is not None:
                J[rows] = result[4]
            if F_next is not None:
                F_next[rows] = result[5]
            sampled[rows] = result[6]
        return status, valid, x_next, u, J, F_next, sampled

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return self._inside(points)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        import dask

        name = self.dvol.template.name
        if jacobian:
            ds = self.dvol.sample_grad(points, self.mode, "world", "world")
            u, J = dask.compute(ds[name].data, ds[f"{name}_jacobian"].data, scheduler=self.dvol.client)
            return np.asarray(u, np.float64), np.asarray(J, np.float64)
        ds = self.dvol.sample(points, self.mode, "world")
        (u,) = dask.compute(ds[name].data, scheduler=self.dvol.client)
        return np.asarray(u, np.float64), None


class _AnalyticSource(_Source):
    """A :class:`vdbflow.synthetic.FlowField` (steady) or :class:`vdbflow.synthetic.unsteady.UnsteadyField`."""

    kind = "analytic"

    def __init__(self, field: Any, unsteady: bool):
        self.field, self.unsteady = field, unsteady

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        args = (points, t) if self.unsteady else (points,)
        u = np.asarray(self.field.velocity(*args), np.float64)
        return u, np.asarray(self.field.jacobian(*args), np.float64) if jacobian else None


def _as_source(source: Any, mode: str, time: str, device: str = "cpu") -> _Source:
    from vdbflow.ops.sampling import MODES
    from vdbflow.synthetic.steady import FlowField
    from vdbflow.synthetic.unsteady import UnsteadyField
    from vdbflow.temporal.series import TIME_MODES, VolumeSeries

    if mode not in MODES:
        raise SamplingError(f"expected mode to be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    if time not in TIME_MODES:
        raise SamplingError(f"expected time to be one of {', '.join(map(repr, TIME_MODES))}, got {time!r}")
    if device not in ("cpu", "cuda"):
        raise DeviceError(f"expected device 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not (isinstance(source, Volume) and source.value_type.is_float):
        what = f"a {source.value_type.name} Volume" if isinstance(source, Volume) else type(source).__name__
        raise DeviceError(f"expected a float Volume for device='cuda' (whole trajectories on the GPU), got {what}")
    if isinstance(source, Volume):
        if device == "cuda":
            from vdbflow.devices import cuda

            cuda.cupy_module()  # a clear DeviceError without CuPy or a GPU
        return _VolumeSource(source, mode, device)
    if isinstance(source, VolumeSeries):
        return _SeriesSource(source, mode, time)
    dist = sys.modules.get("vdbflow.distribution.volume")
    if dist is not None and isinstance(source, dist.DistributedVolume):
        return _DistributedSource(source, mode)
    if isinstance(source, FlowField):
        return _AnalyticSource(source, unsteady=False)
    if isinstance(source, UnsteadyField):
        return _AnalyticSource(source, unsteady=True)
    raise SamplingError(
        f"expected a Volume, VolumeSeries, DistributedSeries, DistributedVolume or analytic field to advect through, "
        f"got {type(source).__name__}"
    )


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
            f"(vdbflow.temporal.particles.MAX_TRAJECTORY_BYTES sets the limit), got {particles:,} particles x "
            f"{saved_steps:,} saved steps x {bytes_per_step} bytes = {need / 2**30:,.1f} GiB: save fewer steps "
            f"(a larger save_every), advect fewer seeds at once{hint}, or a shorter integration"
        )


def step_plan(t0: float, t1: float, dt: float, save_every: int = 1) -> tuple[int, float, np.ndarray, np.ndarray]:
    """The steps of an integration from ``t0`` to ``t1``: ``n = ceil(|t1 - t0| / dt)`` equal steps of
    ``h = (t1 - t0) / n`` (signed); the saved steps (every ``save_every``-th, and always the last)
    and their times (the last one exactly ``t1``).  Returns ``(n, h, save_steps (S,), times (S,))``."""
    n = step_count(t0, t1, dt)
    h = (t1 - t0) / n if n else 0.0
    saves = list(range(0, n + 1, save_every_of(save_every)))
    if saves[-1] != n:
        saves.append(n)  # the end is always kept
    times = [float(t1) if k == n else float(t0) + k * h for k in saves]
    return n, h, np.array(saves), np.array(times)


class _Run:
    """Particles integrated from t0 to t1: positions (and optionally velocities, Jacobians) at saved
    steps, status, end time and (variational) the flow-map gradient."""

    def __init__(
        self,
        src: _Source,
        seeds: np.ndarray,
        t0: float,
        t1: float,
        dt: float,
        method: str,
        save_every: int,
        with_velocity: bool,
        with_jacobian: bool,
        variational: bool,
    ):
        if method not in TABLEAUS:
            raise SamplingError(f"expected method to be one of {', '.join(map(repr, TABLEAUS))}, got {method!r}")
        n = step_count(t0, t1, dt)
        save_every = save_every_of(save_every)
        saved = saved_steps(n, save_every)
        check_trajectory_memory(len(seeds), saved, saved_bytes_per_step(with_velocity, with_jacobian))
        if src.time_range is not None:
            lo, hi = src.time_range
            if not (lo <= min(t0, t1) and max(t0, t1) <= hi):
                raise TimeError(
                    f"expected the integration inside the series' times [{lo!r}, {hi!r}], got t0={t0!r}, t1={t1!r}"
                )
        self.src, self.method = src, method
        self.t0, self.t1 = float(t0), float(t1)
        self.n, self.h, self.save_steps, self.times = step_plan(t0, t1, dt, save_every)
        saves = self.save_steps.tolist()
        self._slot = {k: s for s, k in enumerate(saves)}
        N, S = len(seeds), len(saves)
        self.position = np.full((N, S, 3), np.nan)
        self.velocity = np.full((N, S, 3), np.nan) if with_velocity else None
        self.jacobian = np.full((N, S, 3, 3), np.nan) if with_jacobian else None
        self.status = np.zeros(N, np.int8)
        self.end_time = np.full(N, np.nan)
        self.F = np.broadcast_to(np.eye(3), (N, 3, 3)).copy() if variational else None
        self.variational = variational
        self.sampled = np.zeros(N, np.int64)  # stage points each particle sampled
        x = np.array(seeds, np.float64)
        if src.compiled:
            self._integrate_compiled(x)
        elif src.partitioned:
            self._integrate_partitioned(x)
        else:
            self._integrate(x)
        if self.F is not None:
            self.F[self.status != ACTIVE] = np.nan
        # sample calls of the stage-by-stage engine: each particle's sampled stages are a prefix of them
        self.evaluations = int(self.sampled.max(initial=0))

    def _time(self, k: int) -> float:
        return self.t1 if k == self.n else self.t0 + k * self.h

    def _evaluate(self, idx: np.ndarray, y: np.ndarray, t: float, jacobian: bool):
        """Check and sample the stage points y of particles idx: (kept mask, u, J) for those kept;
        the others get their status here."""
        lo, hi = min(self.t0, self.t1), max(self.t0, self.t1)
        t = min(max(t, lo), hi)  # stage times stay inside [t0, t1] despite rounding
        finite = np.isfinite(y).all(axis=1)
        if finite.all():
            ok = self.src.inside(y, t)
        else:
            ok = finite.copy()
            if finite.any():
                ok[finite] = self.src.inside(y[finite], t)
            self.status[idx[~finite]] = NON_FINITE
        every = bool(ok.all())
        if not every:
            self.status[idx[finite & ~ok]] = LEFT_DATA
        u = np.empty((0, 3))
        J = np.empty((0, 3, 3)) if jacobian else None
        if ok.any():
            self.sampled[idx[ok]] += 1
            u, J = self.src.sample(y if every else y[ok], t, jacobian)
            good = np.isfinite(u).all(axis=1)
            if J is not None:
                good &= np.isfinite(J).all(axis=(1, 2))
            if not good.all():
                rows = np.nonzero(ok)[0]
                self.status[idx[rows[~good]]] = NON_FINITE
                ok[rows[~good]] = False
                u = u[good]
                J = None if J is None else J[good]
        return ok, u, J

    def _integrate_compiled(self, x: np.ndarray) -> None:
        """All steps of every particle in the kernels (a steady volume): the same stages, checks and
        rounding as :meth:`_integrate`."""
        A, B = self._tableau()
        save_slot = np.full(self.n + 1, -1, np.int64)
        save_slot[self.save_steps] = np.arange(len(self.save_steps))
        status, last, evaluations = self.src.advect(
            x, A, B, self.h, save_slot, self.position, self.velocity, self.jacobian, self.F
        )
        self.status[:] = status
        valid = last >= 0
        self.end_time[valid] = np.where(last[valid] == self.n, self.t1, self.t0 + last[valid] * self.h)
        self.sampled[:] = evaluations

    def _tableau(self) -> tuple[np.ndarray, np.ndarray]:
        """The method's stage coefficients (s, s) and weights (s,) as the kernels take them."""
        c, a, b = TABLEAUS[self.method]
        A = np.zeros((len(c), len(c)))
        for s, row in enumerate(a):
            A[s, : len(row)] = row
        return A, np.array(b)

    def _integrate_partitioned(self, x: np.ndarray) -> None:
        """A step at a time through a DistributedVolume: the live particles are routed to the partitions
        owning their cells, and each partition integrates its particles' step in the kernels, as
        :meth:`_integrate_compiled` does.  A particle whose step leaves its partition's data (its leaves
        and halo) is stepped again stage by stage through the whole volume (:meth:`_step`); the results
        are the same, bit for bit."""
        A, B = self._tableau()
        alive = np.arange(len(x))
        for k in range(self.n + 1):
            tk, slot, last = self._time(k), self._slot.get(k), k == self.n
            want_velocity = slot is not None and self.velocity is not None
            want_jacobian = slot is not None and self.jacobian is not None
            F = None if self.F is None else self.F[alive]
            status, valid, x_next, u, J, F_next, sampled = self.src.step(
                x[alive], F, A, B, self.h, last, want_velocity, want_jacobian
            )
            redo = status == LEFT_DATA  # left the partition's data: maybe not the volume's
            done, kept = alive[~redo], ~redo
            ok = kept & valid  # x_k checked valid
            self.sampled[done] += sampled[kept]
            self.end_time[alive[ok]] = tk
            if slot is not None:
                self.position[alive[ok], slot] = x[alive[ok]]
                if want_velocity:
                    self.velocity[alive[ok], slot] = u[ok]
                if want_jacobian:
                    self.jacobian[alive[ok], slot] = J[ok]
            self.status[done] = status[kept]
            going = kept & (status == ACTIVE)
            if not last:
                x[alive[going]] = x_next[going]
                if self.F is not None:
                    self.F[alive[going]] = F_next[going]
            redone = self._step(alive[redo], x, k) if redo.any() else alive[:0]
            alive = np.sort(np.concatenate([alive[going], redone]))
            if len(alive) == 0:
                break

    def _integrate(self, x: np.ndarray) -> None:
        alive = np.arange(len(x))
        for k in range(self.n + 1):
            alive = self._step(alive, x, k)
            if len(alive) == 0:
                break

    def _step(self, alive: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
        """Step k of particles ``alive`` (sorted), stage by stage: checks x_k, stores it, and (before
        the last step) moves x and F on to step k + 1.  Returns the particles still going."""
        c, a, b = TABLEAUS[self.method]
        tk = self._time(k)
        slot = self._slot.get(k)
        # stage 1 at x_k validates x_k: stored only once its stencil is known to be in the data
        need_j = self.variational or (slot is not None and self.jacobian is not None)
        ok, u, J = self._evaluate(alive, x[alive], tk, need_j)
        alive = alive[ok]
        self.end_time[alive] = tk
        if slot is not None:
            self.position[alive, slot] = x[alive]
            if self.velocity is not None:
                self.velocity[alive, slot] = u
            if self.jacobian is not None:
                self.jacobian[alive, slot] = J
        if k == self.n or len(alive) == 0:
            return alive
        ks, kf = [u], []
        if self.variational:
            kf.append(J @ self.F[alive])
        cur = alive
        for s in range(1, len(c)):
            y = x[cur] + self.h * sum(coef * ks[j] for j, coef in enumerate(a[s]) if coef)
            ok, u, J = self._evaluate(cur, y, tk + c[s] * self.h, self.variational)
            if not ok.all():  # particles that stopped leave the stage arrays
                cur = cur[ok]
                ks = [kk[ok] for kk in ks]
                kf = [kk[ok] for kk in kf]
            ks.append(u)
            if self.variational:
                Fs = self.F[cur] + self.h * sum(coef * kf[j] for j, coef in enumerate(a[s]) if coef)
                kf.append(J @ Fs)
        x[cur] = x[cur] + self.h * sum(w * kk for w, kk in zip(b, ks, strict=True) if w)
        if self.variational:
            self.F[cur] = self.F[cur] + self.h * sum(w * kk for w, kk in zip(b, kf, strict=True) if w)
        return cur


def _real(value: Any, name: str) -> float:
    """A time, step or interval as a float; a TimeError naming it otherwise."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TimeError(f"expected a real number for {name}, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TimeError(f"expected a real number for {name}, got {value!r}") from None


def _seeds(seeds: Any) -> np.ndarray:
    try:
        arr = np.asarray(seeds, np.float64)
    except (TypeError, ValueError) as err:
        raise PointsError(f"expected seeds as a (..., 3) numeric array, got {type(seeds).__name__}: {err}") from None
    if arr.ndim < 1 or arr.shape[-1] != 3 or arr.size == 0:
        raise PointsError(f"expected seeds of shape (N, 3) or (..., 3), at least one, got {arr.shape}")
    return arr


def _status_attrs() -> dict[str, Any]:
    return {
        "long_name": "particle status",
        "flag_values": np.array([ACTIVE, LEFT_DATA, NON_FINITE], np.int8),
        "flag_meanings": STATUS_MEANINGS,
    }


def advect(
    source: Any,
    seeds: Any,
    t0: float,
    t1: float,
    dt: float,
    method: str = "rk4",
    mode: str = "linear",
    *,
    save_every: int = 1,
    with_velocity: bool = False,
    with_jacobian: bool = False,
    time: str = "linear",
    device: str = "cpu",
    with_ftle: bool = False,
) -> xr.Dataset:
    """Trajectories of particles through a velocity field, in world space.

    The particles start at ``seeds`` at time ``t0`` and are integrated to ``t1`` (backwards when
    ``t1 < t0``) with ``n = ceil(|t1 - t0| / dt)`` equal steps of at most ``dt``.  A particle stops
    the first time a stage point is non-finite, samples a non-finite value or its ``mode`` stencil
    leaves the active voxels (module docstring).

    Parameters
    ----------
    source : Volume, VolumeSeries, DistributedVolume or analytic field
        A vec3 velocity: a Volume (steady), a VolumeSeries or DistributedSeries (interpolated in time
        with ``time``), a DistributedVolume (a halo of one leaf, ``distribute(..., halo=8)``, keeps
        most steps inside their partition), or an analytic field (:mod:`vdbflow.synthetic`,
        :mod:`vdbflow.synthetic.unsteady`).
        Velocity in length units per time unit.
    seeds : array_like, shape (N, 3) or (..., 3)
        Start positions in world space (the volume's length units), at least one; flattened in C
        order to the ``particle`` dim.
    t0, t1 : float
        Start and end times (finite; inside the series' times for a VolumeSeries).
    dt : float
        The largest time step, > 0.
    method : {"euler", "rk2", "rk4"}, default ``"rk4"``
        The explicit Runge-Kutta integrator.
    mode : str, default ``"linear"``
        The sampling scheme (see :func:`vdbflow.sample`).
    save_every : int, default 1
        Keep positions every ``save_every`` steps (and always at ``t1``).
    with_velocity : bool, default False
        Also return the velocity at the stored positions.
    with_jacobian : bool, default False
        Also return the world-space velocity Jacobian at the stored positions.
    time : {"none", "linear", "pchip"}, default ``"linear"``
        Interpolation in time between the steps of a VolumeSeries.
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the trajectories through a float Volume are integrated ("cuda": one GPU thread a
        particle, CuPy).  Series, distributed and analytic sources run on the CPU.
    with_ftle : bool, default False
        Also integrate the flow-map gradient along each path (the variational equation, as
        :func:`ftle`) and return each particle's FTLE over ``[t0, t1]``.

    Returns
    -------
    xarray.Dataset
        ``position`` (particle, time, axis) float64, in length units, NaN after a particle
        stopped; ``status`` (particle) int8 (0 active, 1 left the data, 2 non-finite);
        ``end_time`` (particle), the time of its last valid position; with ``with_velocity`` the
        velocity, named after the source's volume (``velocity`` for an analytic field), dims
        (particle, time, component), and with ``with_jacobian`` ``<name>_jacobian``
        (particle, time, component, axis) = d u_c / d x_a, both at
        the stored positions, in the source's units (per length unit); with ``with_ftle`` ``ftle``
        (particle), per unit of time, NaN for a particle that stopped.  Attrs record the method,
        mode, times, step and number of sample calls.

    Raises
    ------
    SamplingError
        An unknown ``method``, ``mode`` or ``time``, a source that is not a vec3 velocity of a known
        kind, or ``save_every`` < 1.
    TimeError
        Non-finite ``t0`` or ``t1``, ``dt`` <= 0, or times outside a series.
    PointsError
        Seeds that are not a non-empty (..., 3) numeric array.
    DeviceError
        An unknown ``device``, or ``"cuda"`` for a source other than a float Volume, or without CuPy
        and a GPU.

    See Also
    --------
    ftle : finite-time Lyapunov exponents of the same flow.
    """
    src = _as_source(source, mode, time, device)
    pts = _seeds(seeds)
    t0, t1, dt = _real(t0, "t0"), _real(t1, "t1"), _real(dt, "dt")
    if with_ftle and not (math.isfinite(t1 - t0) and t1 != t0):
        raise TimeError(f"expected t1 != t0 for with_ftle (an FTLE needs a nonzero time), got t0 = t1 = {t0!r}")
    run = _Run(
        src,
        pts.reshape(-1, 3),
        float(t0),
        float(t1),
        float(dt),
        method,
        save_every,
        with_velocity,
        with_jacobian,
        variational=with_ftle,
    )
    N = run.position.shape[0]
    from vdbflow.core import units as _u

    length = _u.normalize(src.length_units)
    vunits = _u.normalize(src.units)
    lattrs = {"units": length} if length else {}
    coords = {
        "particle": ("particle", np.arange(N), {"long_name": "particle index (seeds in C order)"}),
        "time": ("time", run.times, {"long_name": "time", "standard_name": "time"}),
        "axis": ("axis", np.array(["x", "y", "z"], object), {"long_name": "axis (world space)"}),
    }
    data = {
        "position": (("particle", "time", "axis"), run.position, {"long_name": "particle position", **lattrs}),
        "status": (("particle",), run.status, _status_attrs()),
        "end_time": (("particle",), run.end_time, {"long_name": "time of the last valid position"}),
    }
    if run.velocity is not None or run.jacobian is not None:
        coords["component"] = (
            "component",
            np.array(src.component_names, object),
            {"long_name": f"component of {src.name}"},
        )
    if run.velocity is not None:
        data[src.name] = (
            ("particle", "time", "component"),
            run.velocity,
            {"long_name": f"{src.name} along the path", **({"units": vunits} if vunits else {})},
        )
    if run.jacobian is not None:
        junits = _u.divide(vunits, length)
        data[f"{src.name}_jacobian"] = (
            ("particle", "time", "component", "axis"),
            run.jacobian,
            {
                "long_name": f"Jacobian of {src.name} along the path",
                **({"units": junits} if junits else {}),
                "convention": f"{src.name}_jacobian[component, axis] = d {src.name}[component] / d axis",
            },
        )
    if run.F is not None:
        data["ftle"] = (("particle",), _ftle_of(run.F, float(t1) - float(t0)), _FTLE_ATTRS)
    attrs = {
        "method": method,
        "sampling_mode": mode,
        "source": src.kind,
        "t0": run.t0,
        "t1": run.t1,
        "dt": run.h,
        "steps": run.n,
        "save_every": int(save_every),
        "seed_shape": np.array(pts.shape[:-1]),
        "sample_calls": run.evaluations,
    }
    if src.kind == "series":
        attrs["time_interpolation"] = time
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _largest_stretch(F: np.ndarray) -> np.ndarray:
    """lambda_max(F^T F) of (..., 3, 3) flow-map gradients (NaN where F is)."""
    out = np.full(F.shape[:-2], np.nan)
    good = np.isfinite(F).all(axis=(-2, -1))
    C = np.einsum("...ca,...cb->...ab", F[good], F[good])
    out[good] = np.linalg.eigvalsh(C)[..., -1]
    return out


_FTLE_ATTRS = {"long_name": "finite-time Lyapunov exponent", "method": "variational"}


def _ftle_of(F: np.ndarray, T: float) -> np.ndarray:
    """log(sqrt(lambda_max(F^T F))) / |T| of (..., 3, 3) flow-map gradients (NaN where F is)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_largest_stretch(F)) / (2 * abs(T))


def ftle(
    source: Any,
    seeds: Any,
    t0: float,
    T: float,
    dt: float | None = None,
    *,
    method: str = "variational",
    integrator: str = "rk4",
    mode: str = "linear",
    time: str = "linear",
    dims: Any = None,
    device: str = "cpu",
) -> xr.Dataset:
    """Finite-time Lyapunov exponents of the flow map from ``t0`` to ``t0 + T``.

    FTLE = ``log(sqrt(lambda_max(F^T F))) / |T|``, with F the gradient of the flow map (backward
    for T < 0).  ``method="variational"`` integrates dF/dt = J(x(t), t) F with the sampled
    Jacobians alongside each particle (the same ``integrator``), F(t0) = I.
    ``method="finite_difference"`` takes F from the final positions of neighbouring seeds
    (numpy.gradient along each lattice dim, one-sided at the edges) through the lattice's own
    directions: ``F = P G^+`` with ``P`` and ``G`` the gradients of the final and initial positions
    along the lattice dims - for a plane of seeds, the stretching within the plane.  Seeds whose
    particle stops (``status`` != 0) get NaN (and, for finite_difference, so do their neighbours).

    Parameters
    ----------
    source : Volume, VolumeSeries, DistributedVolume or analytic field
        A vec3 velocity, as for :func:`advect`.
    seeds : array_like, shape (N, 3) or (..., 3)
        Start positions in world space (length units); a lattice (..., 3) keeps its shape in the
        result.  ``finite_difference`` needs a lattice of at most 3 dims with at least 2 seeds
        along each.
    t0 : float
        Start time.
    T : float
        Integration time, finite and nonzero (negative: backward).
    dt : float, optional
        The largest time step; default ``|T| / 100``.
    method : {"variational", "finite_difference"}, default ``"variational"``
        How F is found (above).
    integrator : {"euler", "rk2", "rk4"}, default ``"rk4"``
        The Runge-Kutta integrator of the particles (and of F).
    mode : str, default ``"linear"``
        The sampling scheme (see :func:`vdbflow.sample`).
    time : {"none", "linear", "pchip"}, default ``"linear"``
        Interpolation in time between the steps of a VolumeSeries.
    dims : str or sequence of str, optional
        Names of the seeds' leading dims (as in :func:`vdbflow.sample`).
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the particles (and F) are integrated through a float Volume, as for :func:`advect`.

    Returns
    -------
    xarray.Dataset
        On the seeds' leading dims: ``ftle`` float64, per unit of time (no ``units`` attr),
        ``status`` int8 (as in :func:`advect`), and ``final_position`` (..., axis), the position at
        ``t0 + T`` in length units; coordinates ``x, y, z`` (the seeds at ``t0``) and ``axis``.

    Raises
    ------
    SamplingError
        An unknown ``method``, ``integrator``, ``mode`` or ``time``, or a source that is not a vec3
        velocity of a known kind.
    TimeError
        A non-finite or zero ``T``, a non-finite ``t0``, ``dt`` <= 0, or times outside a series.
    PointsError
        Seeds that are not a non-empty (..., 3) numeric array, or not a lattice fit for
        ``finite_difference``.
    DeviceError
        As for :func:`advect`.

    See Also
    --------
    advect : the trajectories themselves.
    """
    from vdbflow.ops.sampling import points_in

    if method not in ("variational", "finite_difference"):
        raise SamplingError(f"expected method 'variational' or 'finite_difference', got {method!r}")
    t0, T = _real(t0, "t0"), _real(T, "T")
    dt = None if dt is None else _real(dt, "dt")
    if not (math.isfinite(T) and T != 0):
        raise TimeError(f"expected a finite, nonzero integration time T, got {T!r}")
    pts, lead, dims_, _ = points_in(_seeds(seeds), dims)
    pts = np.asarray(pts, np.float64)
    if method == "finite_difference" and (len(lead) > 3 or min(lead) < 2):
        raise PointsError(
            f"expected a lattice of seeds (..., 3) with at least 2 seeds along each of at most 3 "
            f"dims for method='finite_difference', got shape {pts.shape}"
        )
    src = _as_source(source, mode, time, device)
    step = abs(T) / 100 if dt is None else float(dt)
    run = _Run(
        src,
        pts.reshape(-1, 3),
        float(t0),
        float(t0) + float(T),
        step,
        integrator,
        1_000_000_000,
        False,
        False,
        variational=method == "variational",
    )
    final = run.position[:, -1].reshape(lead + (3,))
    if method == "variational":
        F = run.F.reshape(lead + (3, 3))
    else:
        axes = range(len(lead))
        P = np.stack([np.gradient(final, axis=d) for d in axes], axis=-1)  # (..., 3, L)
        G = np.stack([np.gradient(pts, axis=d) for d in axes], axis=-1)
        F = np.full(lead + (3, 3), np.nan)
        good = np.isfinite(P).all(axis=(-2, -1))
        F[good] = P[good] @ np.linalg.pinv(G[good])
    value = _ftle_of(F, T)
    from vdbflow.core import units as _u

    coords: dict[str, Any] = {"axis": ("axis", np.array(["x", "y", "z"], object), {"long_name": "axis (world space)"})}
    for a, label in enumerate("xyz"):
        coords[label] = (dims_, pts[..., a], {"long_name": f"{label} of the seed at t0"})
    length = _u.normalize(src.length_units)
    data = {
        "ftle": (dims_, value, {**_FTLE_ATTRS, "method": method}),
        "status": (dims_, run.status.reshape(lead), _status_attrs()),
        "final_position": (
            dims_ + ("axis",),
            final,
            {"long_name": "position at t0 + T", **({"units": length} if length else {})},
        ),
    }
    attrs = {
        "t0": float(t0),
        "T": float(T),
        "method": method,
        "integrator": integrator,
        "sampling_mode": mode,
        "dt": run.h,
        "steps": run.n,
        "source": src.kind,
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)
