"""Integrating particles: the Runge-Kutta tableaus, the step plan (steps, saved slots, memory
bounds) and :class:`Run`, the particles of one integration from t0 to t1 through a velocity source
(:mod:`vdbflow.temporal.sources`)."""

from __future__ import annotations

import copy

import numpy as np

from vdbflow.core import schema
from vdbflow.errors import SamplingError, TimeError
from vdbflow.temporal.series_kernels import SeriesPlan, TopologyGroups
from vdbflow.temporal.sources import Source
from vdbflow.temporal.steps import (
    TABLEAUS,
    check_trajectory_memory,
    save_every_of,
    saved_bytes_per_step,
    saved_steps,
    step_count,
)

ACTIVE, LEFT_DATA, NON_FINITE = schema.STATUS_VALUES  # particle status (kernels/vdbflow/advect.h)


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


def kernel_tableau(method: str) -> tuple[np.ndarray, np.ndarray]:
    """A method's stage coefficients (s, s) and weights (s,) as the kernels take them."""
    c, a, b = TABLEAUS[method]
    A = np.zeros((len(c), len(c)))
    for s, row in enumerate(a):
        A[s, : len(row)] = row
    return A, np.array(b)


def save_slots(n: int, save_steps: np.ndarray) -> np.ndarray:
    """(n + 1,) int64 the output slot of each step (-1: not kept), as the kernels take it."""
    slot = np.full(n + 1, -1, np.int64)
    slot[save_steps] = np.arange(len(save_steps))
    return slot


class Run:
    """Particles integrated from t0 to t1: positions (and optionally velocities, Jacobians) at saved
    steps, status, end time and (variational) the flow-map gradient."""

    def __init__(
        self,
        src: Source,
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
        resident = src.resident_for(t0, t1)  # the particles and results stay on the workers (temporal.resident)
        if not resident:
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
        self.variational, self.with_velocity, self.with_jacobian = variational, with_velocity, with_jacobian
        self.evaluations, self.undecided = 0, None
        self.resident = resident
        if resident:  # the caller integrates (vdbflow.temporal.resident): results stay on the workers
            return
        N, S = len(seeds), len(saves)
        self.position = np.full((N, S, 3), np.nan)
        self.velocity = np.full((N, S, 3), np.nan) if with_velocity else None
        self.jacobian = np.full((N, S, 3, 3), np.nan) if with_jacobian else None
        self.status = np.zeros(N, np.int8)
        self.end_time = np.full(N, np.nan)
        self.F = np.broadcast_to(np.eye(3), (N, 3, 3)).copy() if variational else None
        self.sampled = np.zeros(N, np.int64)  # stage points each particle sampled
        x = np.array(seeds, np.float64)
        if src.compiled:
            self._integrate_compiled(x)
        elif src.windowed:
            self._integrate_windows(x)
        else:
            self._integrate(x)
        if self.F is not None:
            self.F[self.status != ACTIVE] = np.nan
        # sample calls of the stage-by-stage engine: each particle's sampled stages are a prefix of them
        self.evaluations = int(self.sampled.max(initial=0))

    @classmethod
    def on_steps(
        cls,
        src: Source,
        method: str,
        t0: float,
        t1: float,
        h: float,
        n: int,
        save_steps: np.ndarray,
        with_velocity: bool,
        with_jacobian: bool,
        variational: bool,
    ) -> Run:
        """A run of no particles on a given step plan (``n`` steps of ``h`` from ``t0`` to ``t1``,
        positions kept at ``save_steps``): the template of :meth:`subset`.  ``undecided`` (set by
        :meth:`subset`) marks particles stopped at a stage point their source could not judge
        (``src.undecided``: a partition's stage point outside its data and its cells)."""
        run = cls.__new__(cls)
        run.src, run.method, run.t0, run.t1, run.h, run.n = src, method, float(t0), float(t1), float(h), int(n)
        run.save_steps = np.asarray(save_steps, np.int64)
        run.times = np.array([float(t1) if k == n else float(t0) + k * float(h) for k in run.save_steps.tolist()])
        run._slot = {k: s for s, k in enumerate(run.save_steps.tolist())}
        run.variational, run.with_velocity, run.with_jacobian = variational, with_velocity, with_jacobian
        run.evaluations, run.undecided = 0, None
        return run.subset(0, np.zeros((0, 3, 3)) if variational else None)

    def subset(self, particles: int, F: np.ndarray | None = None, judge: bool = False) -> Run:
        """A run of ``particles`` particles on this run's steps, not integrated: NaN results, status 0,
        and F ``F`` (particles, 3, 3) where variational, for the caller's :meth:`step` calls; with
        ``judge``, ``undecided`` (particles,) bool marks those stopped where the source could not judge."""
        sub = copy.copy(self)
        sub.undecided = np.zeros(particles, bool) if judge else None
        S = len(self.save_steps)
        sub.position = np.full((particles, S, 3), np.nan)
        sub.velocity = np.full((particles, S, 3), np.nan) if self.with_velocity else None
        sub.jacobian = np.full((particles, S, 3, 3), np.nan) if self.with_jacobian else None
        sub.status = np.zeros(particles, np.int8)
        sub.end_time = np.full(particles, np.nan)
        sub.F = np.array(F, np.float64) if self.variational else None
        sub.sampled = np.zeros(particles, np.int64)
        return sub

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
            out = finite & ~ok
            self.status[idx[out]] = LEFT_DATA
            if self.undecided is not None:  # a source holding part of the data: which of them it cannot judge
                self.undecided[idx[out]] |= self.src.undecided(y[out], self._start[idx[out]])
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
        A, B = kernel_tableau(self.method)
        save_slot = save_slots(self.n, self.save_steps)
        status, last, evaluations = self.src.advect(
            x, A, B, self.h, save_slot, self.position, self.velocity, self.jacobian, self.F
        )
        self.status[:] = status
        valid = last >= 0
        self.end_time[valid] = np.where(last[valid] == self.n, self.t1, self.t0 + last[valid] * self.h)
        self.sampled[:] = evaluations

    def _integrate_windows(self, x: np.ndarray) -> None:
        """Through a series, window by window in the kernels (:mod:`vdbflow.temporal.series_kernels`):
        each call integrates every live particle over the steps whose stages read the same few series
        steps, with the same stages, checks and rounding as :meth:`_integrate`; a step whose stages read
        more steps than a window holds is integrated stage by stage."""
        A, B = kernel_tableau(self.method)
        save_slot = save_slots(self.n, self.save_steps)
        last = np.full(len(x), -1, np.int64)
        plan = SeriesPlan(self.src.series, self.src.time, self.t0, self.t1, self.h, self.n, TABLEAUS[self.method][0])
        groups = TopologyGroups()
        for window in plan.windows():
            if isinstance(window, int):  # stage by stage (x_k was left unchecked by the previous window)
                self._mark_end_times(last)
                self.step(np.flatnonzero(self.status == ACTIVE), x, window)
                continue
            vols = [self.src.series.volume(j) for j in range(window.low, window.low + window.grids)]
            k0, m = window.first, window.steps
            self.src.advect_window(
                [v.kernel_arrays() for v in vols],
                groups.of(window.low, vols),
                window.stage_grid,
                window.stage_coef,
                k0,
                x,
                A,
                B,
                self.h,
                save_slot[k0 : k0 + m + 1],
                self.position,
                self.velocity,
                self.jacobian,
                self.F,
                self.status,
                last,
                self.sampled,
                window.validate_end,
            )
            if not (self.status == ACTIVE).any():
                break
        self._mark_end_times(last)

    def _mark_end_times(self, last: np.ndarray) -> None:
        """End times of the particles whose last valid step the kernels reported (then forgotten)."""
        valid = last >= 0
        self.end_time[valid] = np.where(last[valid] == self.n, self.t1, self.t0 + last[valid] * self.h)
        last[valid] = -1

    def _integrate(self, x: np.ndarray) -> None:
        alive = np.arange(len(x))
        for k in range(self.n + 1):
            alive = self.step(alive, x, k)
            if len(alive) == 0:
                break

    def step(self, alive: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
        """Step k of particles ``alive`` (sorted), stage by stage: checks x_k, stores it, and (before
        the last step) moves x and F on to step k + 1.  Returns the particles still going."""
        c, a, b = TABLEAUS[self.method]
        tk = self._time(k)
        slot = self._slot.get(k)
        self._start = x  # x_k of the particles until the step's end (the stage points' anchors)
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
