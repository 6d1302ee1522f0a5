"""Where particles read their velocity: a steady Volume (whole trajectories in the kernels), a
VolumeSeries (windows of steps in the kernels, interpolated in time), a DistributedVolume (particles
resident on the partitions' workers: :mod:`vdbflow.temporal.resident`) or an analytic field.  Each gives velocity
(M, 3) and world Jacobians (M, 3, 3), float64, at world points (M, 3) and a time."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from vdbflow.core import schema
from vdbflow.core.topology import same_topology
from vdbflow.core.volume import Volume
from vdbflow.devices import array_module, particle_kernels
from vdbflow.errors import DeviceError, SamplingError
from vdbflow.ops.coverage import InsideCheck
from vdbflow.ops.sampling import MODES, sample_grad_arrays
from vdbflow.synthetic.steady import FlowField
from vdbflow.synthetic.unsteady import UnsteadyField
from vdbflow.temporal.series import TIME_MODES, DistributedSeries, VolumeSeries
from vdbflow.temporal.series_kernels import TIME_KINDS


class Source:
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

    def resident_for(self, t0: float, t1: float) -> bool:
        """Whether an integration from t0 to t1 keeps its particles on the workers of a cluster
        (:mod:`vdbflow.temporal.resident`)."""
        return False

    def undecided(self, points: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Which of the stage points (M, 3) that :meth:`inside` found outside the data it cannot judge,
        given the positions (M, 3) their steps started from (a source holding part of a volume:
        :class:`vdbflow.temporal.particle_tasks.PartitionSource`)."""
        return np.zeros(len(points), bool)

    compiled = False  # whether ``advect`` integrates whole trajectories in the kernels
    partitioned = False  # whether the particles live on the partitions of a DistributedVolume
    windowed = False  # whether ``advect_window`` integrates windows of a series' steps in the kernels
    device = "cpu"  # where the kernels integrate (VolumeSource, SeriesSource, DistributedSource)
    transform: Any = None  # the index-to-world Transform of a source with periods
    periodic: Any = None  # its periods (a vdbflow.core.periodic.Periodicity): trajectories cross them unwrapped

    @property
    def on_gpu(self) -> bool:
        """Whether its trajectories can be integrated in the kernels on a GPU (``device="cuda"``)."""
        return False

    def advect(self, x: np.ndarray, *args: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError


def point_order(n: int) -> str:
    """The CPU loop for n particles: below 65,536 points measuring the access pattern ("auto") costs
    more than it saves (results are identical either way)."""
    return "coherent" if n < 65536 else "auto"


def check_vec3(components: int, what: str) -> None:
    if components != 3:
        raise SamplingError(f"expected a vec3 velocity {what} to advect particles, got {components} component(s)")


class VolumeSource(Source):
    def __init__(self, vol: Volume, mode: str, device: str = "cpu"):
        check_vec3(vol.components, "volume")
        self.vol, self.mode, self.device = vol, mode, device
        self.transform, self.periodic = vol.transform, vol.periodic
        self._names(vol)
        self._inside = InsideCheck(vol.topology, mode)

    @property
    def compiled(self) -> bool:  # type: ignore[override]
        return self.vol.value_type.is_float

    @property
    def on_gpu(self) -> bool:
        return self.compiled

    def advect(self, x: np.ndarray, *args: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Whole trajectories in one kernel call of the source's device (``advect`` of
        :func:`vdbflow.devices.particle_kernels`): steady, so every stage reads the one volume; on the CPU
        the results equal the stage-by-stage integration bit for bit."""

        return particle_kernels(self.device)[0](self.vol.kernel_arrays(), MODES[self.mode], x, *args)

    def _names(self, vol: Any) -> None:
        self.name, self.component_names = vol.name, tuple(vol.component_names)
        self.units, self.length_units = vol.units, vol.length_units

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return self._inside(points)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        u, J = sample_grad_arrays(
            self.vol,
            points,
            self.mode,
            space="world",
            jacobian_space="world",
            jacobian=jacobian,
            point_order=point_order(len(points)),
        )
        return u.astype(np.float64), None if J is None else J.astype(np.float64)


class SeriesSource(VolumeSource):
    kind = "series"
    compiled = False  # type: ignore[assignment]  # stages read steps interpolated in time

    def __init__(self, series: Any, mode: str, time: str, device: str = "cpu"):
        self.series, self.mode, self.time, self.device = series, mode, time, device
        template = series.template
        check_vec3(template.components, "series")
        self._names(template)
        self.time_range = (float(series.times[0]), float(series.times[-1]))

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return self.series.stencil_inside(points, t, self.mode, self.time)

    @property
    def on_gpu(self) -> bool:
        """Float steps, linear or pchip in time: windows of steps in the kernels (in this process, or on the
        workers of a DistributedSeries)."""
        series = self.series
        return self.time in ("linear", "pchip") and len(series) >= 2 and series.template.value_type.is_float

    @property
    def windowed(self) -> bool:  # type: ignore[override]
        """Linear or pchip time through a VolumeSeries (not distributed) of two or more float steps."""
        return (
            self.time in ("linear", "pchip")
            and len(self.series) >= 2
            and not isinstance(self.series, DistributedSeries)
            and self.series.template.value_type.is_float
        )

    def resident_for(self, t0: float, t1: float) -> bool:
        """A DistributedSeries of float steps, linear or pchip in time, whose steps around [t0, t1] (those
        the stages can read) share one topology, so that a particle's partition is the same at every step."""
        series = self.series
        if not (
            isinstance(series, DistributedSeries)
            and self.time in ("linear", "pchip")
            and len(series) >= 2
            and series.template.value_type.is_float
        ):
            return False
        times = np.asarray(series.times)
        lo = max(0, int(np.searchsorted(times, min(t0, t1), "right")) - 3)
        hi = min(len(series), int(np.searchsorted(times, max(t0, t1), "left")) + 3)
        first = series.volume(lo).topology
        return all(same_topology(first, series.volume(j).topology) for j in range(lo + 1, hi))

    def advect_window(self, ks: list[Any], topology: np.ndarray, stage_grid: np.ndarray, *args: Any) -> None:
        """Every active particle through one window of the series' steps in the kernels
        (``advect_series`` of the source's device, :func:`vdbflow.devices.particle_kernels`; the arguments
        after ``stage_grid`` are the rest of its arguments but ``time_kind`` and ``mode``)."""
        stage_coef, first_step, *rest = args
        lead = (ks, topology, TIME_KINDS[self.time], stage_grid, stage_coef, first_step, MODES[self.mode])
        particle_kernels(self.device)[1](*lead, *rest)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        return self.series.sample_grad_arrays(
            points,
            t,
            self.mode,
            self.time,
            space="world",
            jacobian_space="world",
            jacobian=jacobian,
            point_order=point_order(len(points)),
            device=self.device,  # the stages a window cannot take, on the source's device too
        )


class DistributedSource(VolumeSource):
    kind = "distributed"
    compiled = False  # type: ignore[assignment]  # the particles are resident in the partitions instead

    def __init__(self, dvol: Any, mode: str, device: str = "cpu"):
        self.dvol, self.mode, self.device = dvol, mode, device
        self.transform, self.periodic = dvol.topology.transform, dvol.topology.periodic
        check_vec3(dvol.template.components, "volume")
        self._names(dvol.template)
        self._inside = InsideCheck(dvol.topology, mode)

    @property
    def partitioned(self) -> bool:  # type: ignore[override]
        return self.dvol.template.value_type.is_float  # the kernels advect float data

    @property
    def on_gpu(self) -> bool:
        return self.partitioned

    def resident_for(self, t0: float, t1: float) -> bool:
        return self.partitioned

    def inside(self, points: np.ndarray, t: float) -> np.ndarray:
        return self._inside(points)

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        import dask

        name = self.dvol.template.name
        if jacobian:
            ds = self.dvol.sample_grad(points, self.mode, "world", "world")
            u, J = dask.compute(
                ds[schema.value_name(name)].data, ds[f"{name}_jacobian"].data, scheduler=self.dvol.client
            )
            return np.asarray(u, np.float64), np.asarray(J, np.float64)
        ds = self.dvol.sample(points, self.mode, "world")
        (u,) = dask.compute(ds[schema.value_name(name)].data, scheduler=self.dvol.client)
        return np.asarray(u, np.float64), None


class AnalyticSource(Source):
    """A :class:`vdbflow.synthetic.FlowField` (steady) or :class:`vdbflow.synthetic.unsteady.UnsteadyField`."""

    kind = "analytic"

    def __init__(self, field: Any, unsteady: bool):
        self.field, self.unsteady = field, unsteady

    def sample(self, points: np.ndarray, t: float, jacobian: bool) -> tuple[np.ndarray, np.ndarray | None]:
        args = (points, t) if self.unsteady else (points,)
        u = np.asarray(self.field.velocity(*args), np.float64)
        return u, np.asarray(self.field.jacobian(*args), np.float64) if jacobian else None


def as_source(source: Any, mode: str, time: str, device: str = "cpu") -> Source:
    """The :class:`Source` of what particles are advected through; ``device="cuda"`` where its trajectories
    are integrated in the kernels (``Source.on_gpu``)."""
    if mode not in MODES:
        raise SamplingError(f"expected mode to be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    if time not in TIME_MODES:
        raise SamplingError(f"expected time to be one of {', '.join(map(repr, TIME_MODES))}, got {time!r}")
    if device not in ("cpu", "cuda"):
        raise DeviceError(f"expected device 'cpu' or 'cuda', got {device!r}")
    src = _source(source, mode, time, device)
    if device == "cuda":
        if not src.on_gpu:
            what = f"a {source.value_type.name} Volume" if isinstance(source, Volume) else type(source).__name__
            if isinstance(source, VolumeSeries):
                what = f"a {type(source).__name__} with time={time!r}"
            raise DeviceError(
                "expected a float Volume or DistributedVolume, or a VolumeSeries / DistributedSeries of two or more "
                "float steps with time 'linear' or 'pchip', for device='cuda' (trajectories integrated in the "
                f"kernels on the GPU), got {what}"
            )

        array_module("cuda")  # a clear DeviceError without CuPy or a GPU
    return src


def _source(source: Any, mode: str, time: str, device: str) -> Source:
    if isinstance(source, Volume):
        return VolumeSource(source, mode, device)
    if isinstance(source, VolumeSeries):
        return SeriesSource(source, mode, time, device)
    dist = sys.modules.get("vdbflow.distribution.volume")
    if dist is not None and isinstance(source, dist.DistributedVolume):
        return DistributedSource(source, mode, device)
    if isinstance(source, FlowField):
        return AnalyticSource(source, unsteady=False)
    if isinstance(source, UnsteadyField):
        return AnalyticSource(source, unsteady=True)
    raise SamplingError(
        f"expected a Volume, VolumeSeries, DistributedSeries, DistributedVolume or analytic field to advect through, "
        f"got {type(source).__name__}"
    )
