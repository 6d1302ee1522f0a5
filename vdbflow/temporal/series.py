"""A time series of volumes (one .nvdb per step), read lazily, sampled at ``(points, t)`` with
temporal interpolation.

Temporal interpolation (``time=``) of each component of the values; the Jacobians are the exact
spatial derivatives of the interpolated values (for ``none`` and ``linear`` the same interpolation of
the step Jacobians; for ``pchip`` the chain rule through the node slopes, which depend on the data),
so that values and Jacobians stay consistent, as the variational equation of
:func:`vdbflow.ftle` needs (JHTDB instead interpolates each gradient component by PCHIP; the two
differ where the slopes are nonlinear in the data):

``"none"``
    the nearest step (ties go to the earlier step).
``"linear"``
    ``(1 - w) f_i + w f_{i+1}`` with ``w = (t - t_i) / (t_{i+1} - t_i)``; exact for fields linear in t.
``"pchip"``
    a monotone piecewise cubic Hermite interpolant on the four steps ``t_{i-1} .. t_{i+2}`` around
    ``t`` (JHTDB's four-step PCHIP): the Hermite cubic on ``[t_i, t_{i+1}]`` whose node slopes are
    Fritsch-Butland weighted harmonic means of the neighbouring secants (0 where they change sign),
    and at the first and last step the three-point one-sided slope limited to preserve shape - the
    slopes of :class:`scipy.interpolate.PchipInterpolator`, so that it equals that interpolator over
    the whole series.  Exact for fields linear in t; monotone data stays monotone; third order in
    the step spacing for smooth monotone data, first order near extrema, where the slope is set to 0.
"""

from __future__ import annotations

import glob as _glob
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from vdbflow.core import units
from vdbflow.core.volume import Volume, same_topology
from vdbflow.devices import run
from vdbflow.errors import PointsError, SamplingError, TimeError, VolumeError
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.identity import FileIdentity
from vdbflow.io.nanovdb import open_grid
from vdbflow.io.time_record import TIME_RECORD, record_time
from vdbflow.ops.request import SampleRequest
from vdbflow.temporal.interpolation import TIME_MODES, pchip_combine

_STEPS_NEEDED = {"none": 1, "linear": 2, "pchip": 4}


class StepChangedError(VolumeError):
    """A series step's file is not the one the series was opened with (replaced, rewritten or gone)."""


class StepIdentity(FileIdentity):
    """What a step's file was when the series was opened (device, inode, size, modification time);
    every later opening of the step - in this process or on a worker - checks it is still that file."""

    label = "the series step"
    seen = "the series was opened"
    error = StepChangedError


def _name(src: Any) -> str:
    return repr(src) if isinstance(src, Volume) else os.fspath(src)


def _check_same_grid(where: str, ref: Any, vol: Any) -> None:
    """Raise :class:`VolumeError` unless ``vol`` has ``ref``'s value type, transform, units, length
    units and component names (``where``: which step against which)."""
    if vol.value_type.name != ref.value_type.name:
        raise VolumeError(f"expected {where}: value type {ref.value_type.name}, got {vol.value_type.name}")
    if vol.transform != ref.transform:
        raise VolumeError(
            f"expected {where}: index-to-world {ref.index_to_world.tolist()}, got {vol.index_to_world.tolist()}"
        )
    for what in ("units", "length_units"):
        a, b = getattr(ref, what), getattr(vol, what)
        if not units.same(a, b):
            raise VolumeError(f"expected {where}: {what} {a!r}, got {b!r} (steps are interpolated together)")
    if tuple(vol.component_names) != tuple(ref.component_names):
        raise VolumeError(
            f"expected {where}: component names {list(ref.component_names)}, got {list(vol.component_names)}"
        )


class VolumeSeries:
    """Volumes at increasing ``times`` (s, (T,)), read lazily: a step is opened when a sample needs it
    and at most ``cache`` steps stay open (least recently used first out; pchip needs 4).

    Every step must share the first one's value type, component count, component names, units,
    length units and index-to-world transform (its active voxels may differ).  Each file step's
    identity (:class:`StepIdentity`) is recorded when the series is made and checked whenever the
    step is opened, here or on a worker that unpickled the series (:class:`StepChangedError`); with
    ``check_time_records`` (times read from the steps' records) a step's record must still say its
    time.  Sample with :meth:`sample`, :meth:`sample_grad` or :meth:`sample_grad_arrays` at
    ``(points, t)``.
    """

    def __init__(
        self,
        sources: Sequence[str | os.PathLike | Volume],
        times: Sequence[float],
        grid: int | str | None = None,
        cache: int = 4,
        *,
        identities: Sequence[StepIdentity | None] | None = None,
        check_time_records: bool = False,
    ):
        self._sources = list(sources)
        try:
            t = np.array(times, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            raise TimeError(f"expected times as real numbers, one per step, got {times!r}") from None
        if len(self._sources) == 0:
            raise VolumeError("expected at least one step in a series, got none")
        if len(t) != len(self._sources):
            raise TimeError(f"expected one time per step ({len(self._sources)} steps), got {len(t)} times")
        if not np.all(np.isfinite(t)):
            raise TimeError(f"expected finite times, got {t[~np.isfinite(t)][:3].tolist()}")
        if len(t) > 1 and np.any(np.diff(t) <= 0):
            k = int(np.argmax(np.diff(t) <= 0)) + 1
            raise TimeError(
                f"expected strictly increasing times, got times[{k}] = {float(t[k])!r} after "
                f"times[{k - 1}] = {float(t[k - 1])!r}"
            )
        if int(cache) < 1:
            raise VolumeError(f"expected cache >= 1 open steps, got {cache}")
        t.setflags(write=False)
        self.times = t
        if identities is None:  # each file step's identity, checked whenever the step is opened: recorded now
            identities = [None if isinstance(s, Volume) else StepIdentity.of(s) for s in self._sources]
        self._refs = [
            s if isinstance(s, Volume) else GridRef(os.fspath(s), grid, None, i)
            for s, i in zip(self._sources, identities, strict=True)
        ]
        self._check_time_records = bool(check_time_records)  # times came from the steps' time records
        self.grid = grid
        self.cache = int(cache)
        self._open: OrderedDict[int, Volume] = OrderedDict()
        self._reference: Volume | None = None  # the first step opened: the grid all steps must share
        self._reference_step = -1
        self._same_topology: dict[int, bool] = {}
        self._inside: dict[tuple[int, str], Any] = {}  # per open step and mode: its InsideCheck
        self.opened = 0  # steps read so far (a step evicted and needed again counts again)

    def __len__(self) -> int:
        return len(self.times)

    def __repr__(self) -> str:
        return (
            f"<vdbflow.VolumeSeries of {len(self)} steps, t in [{self.times[0]:g}, {self.times[-1]:g}], "
            f"open steps {sorted(self._open)}>"
        )

    @property
    def open_steps(self) -> tuple[int, ...]:
        """Indices of the steps open now, least recently used first."""
        return tuple(self._open)

    def volume(self, k: int) -> Volume:
        """Step ``k``'s volume (opened if needed; at most ``cache`` stay open)."""
        k = int(k)
        if not 0 <= k < len(self):
            raise TimeError(f"expected a step in [0, {len(self)}), got {k}")
        if k in self._open:
            self._open.move_to_end(k)
            return self._open[k]
        step = self._refs[k]
        vol = step if isinstance(step, Volume) else step.read(when=f"when step {k} was opened")
        if not isinstance(vol, Volume):
            raise VolumeError(f"expected a value grid at step {k} ({step.path}), got an index grid")
        self._check_time(k, vol)
        self._check_grid(k, vol)
        self.opened += 1
        self._open[k] = vol
        while len(self._open) > self.cache:
            gone, _ = self._open.popitem(last=False)
            for key in [key for key in self._inside if key[0] == gone]:
                del self._inside[key]
        return vol

    def _describe(self, k: int) -> str:
        src = self._sources[k]
        return f"step {k} (t={self.times[k]:g}{'' if isinstance(src, Volume) else f', {os.fspath(src)}'})"

    def _check_time(self, k: int, vol: Volume) -> None:
        """A step whose time came from its time record must still hold that record."""
        if not self._check_time_records:
            return
        found = record_time(vol.blind_data)
        if found != float(self.times[k]):
            raise TimeError(
                f"expected {self._describe(k)} to hold a {TIME_RECORD!r} record of t={float(self.times[k])!r} "
                f"(what the series was opened with), found {'none' if found is None else f't={found!r}'}"
            )

    def _check_grid(self, k: int, vol: Volume) -> None:
        ref = self._reference
        if ref is None:
            self._reference, self._reference_step = vol, k
            self._same_topology[k] = True
            return
        _check_same_grid(f"{self._describe(k)} on the grid of {self._describe(self._reference_step)}", ref, vol)
        self._same_topology[k] = same_topology(vol.topology, ref.topology)

    @property
    def template(self) -> Volume:
        """The first step opened (names, units, transform of every step)."""
        if self._reference is None:
            self.volume(0)
        assert self._reference is not None
        return self._reference

    # -- time stencils ----------------------------------------------------------------------------
    def _steps(self, t: np.ndarray, time: str) -> np.ndarray:
        """(N, K) step indices each point's interpolation reads (-1: none, at the series' ends)."""
        if time not in TIME_MODES:
            raise SamplingError(f"expected time to be one of {', '.join(map(repr, TIME_MODES))}, got {time!r}")
        T = self.times
        bad = ~(np.isfinite(t) & (t >= T[0]) & (t <= T[-1]))
        if np.any(bad):
            raise TimeError(
                f"expected times in [{T[0]:g}, {T[-1]:g}] (the series' first and last steps), got "
                f"{int(bad.sum())} outside, e.g. {float(t[bad][0])!r}"
            )
        n = len(T)
        if n == 1:
            return np.zeros((len(t), 1), np.int64)
        if time == "none":
            k = np.clip(np.searchsorted(T, t), 1, n - 1)
            earlier = (t - T[k - 1]) <= (T[k] - t)
            return np.where(earlier, k - 1, k)[:, None]
        i = np.clip(np.searchsorted(T, t, side="right") - 1, 0, n - 2)
        if time == "linear":
            return np.stack([i, i + 1], axis=1)
        steps = np.stack([i - 1, i, i + 1, i + 2], axis=1)
        return np.where((steps >= 0) & (steps < n), steps, -1)

    def steps_at(self, t: Any, time: str) -> np.ndarray:
        """(N, K) the steps the interpolation ``time`` reads at times ``t`` (N,) (-1: none, at the ends):
        what :meth:`sample_arrays` gathers."""
        return self._steps(np.asarray(t, np.float64).reshape(-1), time)

    def stencil_inside(
        self, points: Any, t: Any, mode: str = "linear", time: str = "linear", space: str = "world"
    ) -> np.ndarray:
        """(N,) bool: points (N, 3) whose ``mode`` stencil reads only active voxels in every step the
        interpolation at ``t`` (scalar or (N,)) reads; see :func:`vdbflow.ops.coverage.stencil_inside`."""
        from vdbflow.ops.coverage import InsideCheck

        pts = np.asarray(points, np.float64)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise PointsError(f"expected points of shape (N, 3), got {pts.shape}")
        tt = self._times_for(t, (len(pts),))
        steps = self._steps(tt, time)
        inside = np.ones(len(pts), bool)
        checked_reference = np.zeros(len(pts), bool)
        for s in np.unique(steps[steps >= 0]):
            rows = np.nonzero((steps == s).any(axis=1))[0]
            vol = self.volume(s)
            if self._same_topology.get(int(s)):
                rows = rows[~checked_reference[rows]]
                checked_reference[rows] = True
            if len(rows):
                check = self._inside.get((int(s), mode))
                if check is None:
                    check = self._inside[(int(s), mode)] = InsideCheck(vol, mode)
                inside[rows] &= check(pts[rows], space)
        return inside

    @staticmethod
    def _times_for(t: Any, lead: tuple[int, ...]) -> np.ndarray:
        tt = np.asarray(t, np.float64)
        try:
            return np.broadcast_to(tt, lead).reshape(-1)
        except ValueError:
            raise TimeError(f"expected a scalar time or one per point (shape {lead}), got shape {tt.shape}") from None

    # -- sampling -------------------------------------------------------------------------------
    def sample_grad_arrays(
        self,
        points: Any,
        t: Any,
        mode: str = "linear",
        time: str = "linear",
        *,
        space: str = "world",
        jacobian_space: str | None = None,
        jacobian: bool = True,
        point_order: str = "auto",
        device: str = "cpu",
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Values (N,) / (N, C) and Jacobians (N, 3) / (N, C, 3), float64, at points (N, 3) and times
        ``t`` (scalar or (N,)), interpolated in time with ``time`` (module docstring).  ``point_order``:
        see :func:`vdbflow.sample_grad_arrays`; ``device="cuda"``: each step sampled on the GPU."""
        outputs = ("value", "jacobian") if jacobian else ("value",)
        request = SampleRequest(mode, outputs, space, jacobian_space, point_order=point_order, device=device)
        arrays = self.sample_arrays(request, points, t, time)
        return arrays["value"], arrays.get("jacobian")

    def sample_arrays(self, request: SampleRequest, points: Any, t: Any, time: str = "linear") -> dict[str, np.ndarray]:
        """Each output of ``request`` (values, Jacobians, derived quantities; no Hessians) at points (N, 3)
        and times ``t`` (scalar or (N,)), interpolated in time with ``time``: float64 arrays on the host,
        the array-level door every volume-like object has.  Derived quantities are those of the
        interpolated Jacobian (and velocity), by the kernels' function (never interpolated themselves)."""
        if request.hessian:
            raise SamplingError("expected outputs ('value',) or ('value', 'jacobian') for a series, got a Hessian")
        derived = request.derived
        if derived:
            request.for_value_type(self.template.value_type)
            asked, request = request, request.replace(outputs=("value", "jacobian"))
        pts = np.asarray(points)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise PointsError(f"expected points of shape (N, 3), got {pts.shape}")
        N = len(pts)
        tt = self._times_for(t, (N,))
        steps = self._steps(tt, time)
        if self._reference is None:  # the first step this call reads becomes the reference grid
            needed = steps[steps >= 0]
            self.volume(int(needed.min()) if needed.size else 0)
        C = self.template.components
        D = C * (4 if request.jacobian else 1)
        gathered = np.full((N, steps.shape[1], D), np.nan)
        for s in np.unique(steps[steps >= 0]):
            rows, slots = np.nonzero(steps == s)
            arrays = self._step_arrays(int(s), pts[rows], request)
            gathered[rows, slots, :C] = arrays["value"].reshape(len(rows), C)
            if request.jacobian:
                gathered[rows, slots, C:] = arrays["jacobian"].reshape(len(rows), 3 * C)
        out = self._interpolate(gathered, steps, tt, time, C)
        shapes = request.shapes((N,), C)
        result = {"value": out[:, :C].reshape(shapes["value"])}
        if request.jacobian:
            result["jacobian"] = out[:, C:].reshape(shapes["jacobian"])
        if derived:
            shapes = asked.shapes((N,), C)
            quantities = {name: np.empty(shapes[name]) for name in derived}
            run("derive", np.ascontiguousarray(result["jacobian"]), np.ascontiguousarray(result["value"]), quantities)
            result = {name: quantities.get(name, result.get(name)) for name in asked.outputs}
        return result

    def _step_arrays(self, k: int, points: np.ndarray, request: SampleRequest) -> dict[str, Any]:
        """The outputs of ``request`` from step ``k`` at points (M, 3), on the host (``request.device``
        "cuda": sampled on the GPU through this thread's pinned pipeline)."""
        from vdbflow.ops.sampling import sample_host_arrays

        return sample_host_arrays(self.volume(k), request, points)

    def distribute(
        self,
        client: Any = None,
        partitions: int | None = None,
        halo: int = 1,
        *,
        spill: str | os.PathLike | bool | None = None,
        cache: int = 4,
    ) -> DistributedSeries:
        """This series with its steps distributed across a Dask cluster (:class:`DistributedSeries`);
        ``client``, ``partitions``, ``halo`` and ``spill`` as for :func:`vdbflow.distribute`, ``cache``
        the steps kept distributed at once (4: what ``pchip`` reads)."""
        return DistributedSeries(self, client, partitions, halo, spill=spill, cache=cache)

    def _interpolate(self, g: np.ndarray, steps: np.ndarray, t: np.ndarray, time: str, components: int) -> np.ndarray:
        """Combine the gathered (N, K, D) step values (C components, then 3 C Jacobian entries when
        D = 4 C) at times t (N,)."""
        if steps.shape[1] == 1:
            return g[:, 0]
        T = self.times
        if time == "linear":
            t0, t1 = T[steps[:, 0]], T[steps[:, 1]]
            w = ((t - t0) / (t1 - t0))[:, None]
            return (1 - w) * g[:, 0] + w * g[:, 1]
        tk = np.where(steps >= 0, T[np.maximum(steps, 0)], np.nan)
        C = components
        if g.shape[2] == C:
            return pchip_combine(g, tk, t)[0]
        value, grad = pchip_combine(g[:, :, :C], tk, t, g[:, :, C:].reshape(len(g), 4, C, 3))
        return np.concatenate([value, grad.reshape(len(g), 3 * C)], axis=1)

    def _dataset(self, request: SampleRequest, points: Any, t: Any, time: str, dims: Any, inside: bool = False) -> Any:
        from vdbflow.ops.results import is_dask, points_in
        from vdbflow.ops.sampling import Executor, sample_dataset

        lead, dims_ = points_in(points, dims)[1:3]
        tt = self._times_for(t, lead)

        def arrays(request: SampleRequest, pts: Any, lead: tuple) -> tuple[Any, dict[str, Any]]:
            if is_dask(pts):
                raise PointsError("expected NumPy points for a VolumeSeries (Dask points are not supported), got Dask")
            pts = np.asarray(pts)
            flat = self.sample_arrays(request, pts.reshape(-1, 3), tt, time)
            return pts, {name: a.reshape(lead + a.shape[1:]) for name, a in flat.items()}

        def inside_flags(request: SampleRequest, pts: Any, lead: tuple) -> Any:
            # every step the interpolation reads: its stencil on defined voxels
            return self.stencil_inside(pts.reshape(-1, 3), tt, request.mode, time, request.space).reshape(lead)

        ds = sample_dataset(self, request, points, dims, inside, executor=Executor(arrays, inside_flags))
        tattrs = {"long_name": "time", "standard_name": "time", "time_interpolation": time}
        if np.ndim(t) == 0:
            ds = ds.assign_coords(time=((), float(t), tattrs))
        else:
            ds = ds.assign_coords(time=(dims_, tt.reshape(lead), tattrs))
        ds.attrs["time_interpolation"] = time
        for name in ds.data_vars:
            ds[name].attrs["time_interpolation"] = time
        return ds

    def sample(
        self,
        points: Any,
        t: Any,
        mode: str = "linear",
        time: str = "linear",
        space: str = "world",
        *,
        dims: Any = None,
        device: str = "cpu",
    ) -> Any:
        """Values at ``points`` (N, 3) or (..., 3) and times ``t`` (scalar, or one per point) as a
        Dataset laid out like :func:`vdbflow.sample`'s, with a ``time`` coordinate (scalar or on the
        point dims); values are float64 (interpolated in time).  ``device="cuda"``: each step sampled on
        the GPU (host points through the pinned pipeline), interpolated in time on the host."""
        return self._dataset(SampleRequest(mode, ("value",), space, device=device), points, t, time, dims)

    def sample_grad(
        self,
        points: Any,
        t: Any,
        mode: str = "linear",
        time: str = "linear",
        space: str = "world",
        jacobian_space: str | None = None,
        *,
        dims: Any = None,
        device: str = "cpu",
        outputs: Sequence[str] = ("value", "jacobian"),
    ) -> Any:
        """Values and Jacobians at ``(points, t)`` as a Dataset laid out like
        :func:`vdbflow.sample_grad`'s, with a ``time`` coordinate (``device`` as for :meth:`sample`).
        ``outputs`` as for :meth:`Volume.sample_grad`: derived quantities are those of the Jacobian (and
        velocity) interpolated in time; ``"inside"`` flags points whose stencil reads only defined voxels in
        every step the interpolation reads."""
        from vdbflow.ops.sampling import split_inside

        kernel_outputs, inside = split_inside(outputs)
        request = SampleRequest(mode, kernel_outputs, space, jacobian_space, device=device)
        return self._dataset(request, points, t, time, dims, inside)


class DistributedSeries(VolumeSeries):
    """A :class:`VolumeSeries` whose steps are sampled on a Dask cluster: each step is distributed
    (:func:`vdbflow.distribute`) when a sample first needs it, and at most ``cache`` steps stay
    distributed (default 4, what ``pchip`` reads; least recently used first out, its partitions
    released).  Steps that share a topology share one partition plan, so a point goes to the same
    partition - and worker - at every step.  Sampling, interpolation in time and
    :func:`vdbflow.advect` work as on the series, with the same results bit for bit; the client reads
    only the steps' topologies (values stay in the memory-mapped files, or, for in-memory steps, go to
    the workers).  Close it (or use it as a context manager) to release the steps.
    """

    def __init__(
        self,
        series: VolumeSeries,
        client: Any = None,
        partitions: int | None = None,
        halo: int = 1,
        *,
        spill: str | os.PathLike | bool | None = None,
        cache: int = 4,
    ):
        if int(cache) < 1:
            raise VolumeError(f"expected cache >= 1 distributed steps, got {cache}")
        super().__init__(
            series._sources,
            series.times,
            series.grid,
            series.cache,
            identities=[None if isinstance(s, Volume) else s.identity for s in series._refs],
            check_time_records=series._check_time_records,
        )
        from vdbflow.distribution.volume import resolve_client

        client, self._owns_client = resolve_client(client)  # one cluster for every step
        self.client, self.partitions, self.halo, self.spill = client, partitions, int(halo), spill
        self.distributed_cache = int(cache)
        self._distributed: OrderedDict[int, Any] = OrderedDict()
        self._plans: list[tuple[Any, Any]] = []  # (topology, plan) of each distinct topology so far
        self.distributed = 0  # steps distributed so far (an evicted step needed again counts again)

    def __repr__(self) -> str:
        return (
            f"<vdbflow.DistributedSeries of {len(self)} steps, t in [{self.times[0]:g}, {self.times[-1]:g}], "
            f"distributed steps {sorted(self._distributed)}, {len(self._plans)} partition plan(s)>"
        )

    def _plan_for(self, topology: Any) -> Any:
        for known, plan in self._plans:
            if known is topology or same_topology(known, topology):
                return plan
        return None

    def step(self, k: int) -> Any:
        """Step ``k`` as a :class:`~vdbflow.DistributedVolume` (distributed now if it is not)."""
        from vdbflow.distribution.volume import distribute

        k = int(k)
        if k in self._distributed:
            self._distributed.move_to_end(k)
            return self._distributed[k]
        vol = self.volume(k)  # checks the grid; the values stay in the mapped file
        step = self._refs[k]  # a file's identity is also checked by every worker that reads a partition of it
        identity = None if isinstance(step, Volume) else step.identity
        plan = self._plan_for(vol.topology)
        when = f"when step {k} was distributed"
        if identity is not None:
            identity.check(when)
        dvol = distribute(step, self.client, self.partitions, self.halo, spill=self.spill, plan=plan)
        if identity is not None:  # the workers read their leaves while distribute waited
            try:
                identity.check(when)
            except StepChangedError:
                dvol.close()
                raise
        if plan is None:
            self._plans.append((vol.topology, dvol.plan))
        self.distributed += 1
        self._distributed[k] = dvol
        while len(self._distributed) > self.distributed_cache:
            _, gone = self._distributed.popitem(last=False)
            gone.close()
        return dvol

    def _step_arrays(self, k: int, points: np.ndarray, request: SampleRequest) -> dict[str, Any]:
        import dask

        arrays = self.step(k).sample_arrays(request, points)
        computed = dask.compute(*arrays.values(), scheduler=self.client)
        return {name: np.asarray(a) for name, a in zip(arrays, computed, strict=True)}

    def distribute(self, *args: Any, **kwargs: Any) -> DistributedSeries:
        raise VolumeError("expected a VolumeSeries to distribute, got a DistributedSeries (distributed already)")

    def close(self) -> None:
        """Release every distributed step (and the embedded cluster, if this series started it).  Idempotent."""
        while self._distributed:
            self._distributed.popitem(last=False)[1].close()
        if self._owns_client:
            from vdbflow.distribution.volume import close_client

            self._owns_client = False
            close_client(self.client)

    def __enter__(self) -> DistributedSeries:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_series(
    paths_or_glob: str | os.PathLike | Sequence[str | os.PathLike | Volume],
    times: Any = None,
    grid: int | str | None = None,
    *,
    cache: int = 4,
    identities: Sequence[StepIdentity] | None = None,
) -> VolumeSeries:
    """A time series of volumes, read lazily, for sampling in space and time.

    Only headers and the time records are read here; a step's values are read when a sample needs
    them.  Every step must share the first one's value type, component count and index-to-world
    transform (see :class:`VolumeSeries`).

    Parameters
    ----------
    paths_or_glob : str, os.PathLike or sequence of str, os.PathLike or Volume
        .nvdb files (or Zarr stores, or Volumes): a glob pattern (in name order when ``times`` is
        given) or a sequence (in time order when ``times`` is given).
    times : array_like, shape (T,), optional
        The time of each step (the series' time units, e.g. s), finite and strictly increasing.
        By default each step's ``vdbflow.time`` record (written by
        :func:`vdbflow.synthetic.unsteady.write_series`), steps then ordered by time.
    grid : int or str, optional
        The grid of each .nvdb file to read (index or name; default the first).
    cache : int, default 4
        How many steps stay open at once (least recently used first out; ``pchip`` needs 4).
    identities : sequence of StepIdentity, optional
        What the files must be (recorded by an earlier ``open_series``, e.g. on the client of a
        job); default what they are now.  Every opening of a step checks its file against its
        identity (:class:`StepChangedError` when it was replaced or rewritten).

    Returns
    -------
    VolumeSeries
        T steps at ``times``; sample with its ``sample``, ``sample_grad`` or
        ``sample_grad_arrays`` at ``(points, t)``, or pass it to :func:`vdbflow.advect`.

    Raises
    ------
    VolumeError
        A pattern that matches no file, an empty sequence, ``cache`` < 1, or steps whose value
        type, transform, units, length units or component names differ.
    StepChangedError
        A file that is not the one ``identities`` names (also raised later, when a step is opened).
    TimeError
        Steps without a time record when ``times`` is not given, or ``times`` that do not match
        the steps in number, are not finite or are not strictly increasing.
    NanoVDBError
        A file that is not a readable .nvdb file, or that lacks ``grid``.
    """
    if isinstance(paths_or_glob, (str, os.PathLike)):
        pattern = os.fspath(paths_or_glob)
        sources: list[Any] = sorted(_glob.glob(pattern))
        if not sources:
            raise VolumeError(f"expected files matching {pattern!r}, found none")
    else:
        sources = list(paths_or_glob)
        if not sources:
            raise VolumeError("expected at least one path or Volume for a series, got an empty sequence")
    known = {i.path: i for i in identities or ()}

    def identity(src: Any) -> StepIdentity | None:
        if isinstance(src, Volume):
            return None
        if identities is None:
            return StepIdentity.of(src)
        if os.fspath(src) not in known:  # a fresh identity here would defeat the check
            raise StepChangedError(
                f"expected an identity recorded for every step, found none for {os.fspath(src)} (recorded: "
                f"{sorted(known)[:3]}{' ...' if len(known) > 3 else ''})"
            )
        return known[os.fspath(src)]

    steps = [identity(s) for s in sources]
    from_records = times is None
    if from_records:
        found: list[float | None] = []
        first: tuple[Any, Any] | None = None  # (source, header) the other steps' headers must match
        for src, identity in zip(sources, steps, strict=True):
            if isinstance(src, Volume):
                head: Any = src
            elif os.path.isdir(src):  # a Zarr store keeps no time record
                found.append(None)
                continue
            else:
                head = identity.opened(  # type: ignore[union-attr]
                    lambda src=src: open_grid(src, grid, leaves=np.zeros(0, np.int64), checksum=False),
                    "when its header was read",
                )
            found.append(record_time(head.blind_data))
            if first is None:
                first = (src, head)
            elif isinstance(head, Volume) and isinstance(first[1], Volume):
                _check_same_grid(f"{_name(src)} on the grid of {_name(first[0])}", first[1], head)
        missing = [_name(s) for s, t in zip(sources, found, strict=True) if t is None]
        if missing:
            raise TimeError(
                f"expected times=... or steps holding a {TIME_RECORD!r} record (vdbflow.synthetic.unsteady."
                f"write_series writes one), got {len(missing)} without, e.g. {missing[0]}"
            )
        order = np.argsort(np.asarray(found), kind="stable")
        sources, steps = [sources[k] for k in order], [steps[k] for k in order]
        times = [found[k] for k in order]
        same = [k for k in range(1, len(times)) if times[k] == times[k - 1]]
        if same:
            k = same[0]
            raise TimeError(
                f"expected one step per time, got {len(same) + 1} or more steps at t={times[k]!r}: "
                f"{_name(sources[k - 1])} and {_name(sources[k])} (a file left from another series?)"
            )
    return VolumeSeries(sources, times, grid=grid, cache=cache, identities=steps, check_time_records=from_records)
