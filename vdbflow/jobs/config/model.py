"""The job config of ``vdbflow run``: one pydantic model, :class:`JobConfig`, and :class:`ConfigError`;
read from YAML with line numbers in errors by :mod:`~vdbflow.jobs.config.load`, its inputs and outputs
checked by :mod:`~vdbflow.jobs.config.checks`.

A config names a volume (an .nvdb file or a synthetic flow field), the points to sample (a file or
a generator), what to compute, the cluster, and where the result goes::

    volume:   {synthetic: {field: taylor_green, resolution: 64}}
    points:   {kind: random, count: 1000000, seed: 0}
    sampling: {mode: linear, outputs: [value, jacobian, q_criterion]}
    cluster:  {kind: local}
    output:   {path: result.zarr, overwrite: always}

With an ``advect:`` section (``{t1: 2.0, dt: 0.01, outputs: [ftle]}``) the points are seeds of particle
trajectories instead (:class:`AdvectSpec`), through a volume or a ``volume.series`` of files
(:class:`SeriesVolume`).  Relative paths are taken relative to the current directory (also in a config
read from a URL).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vdbflow.core import outputs as output_table
from vdbflow.core.kernel import MODES
from vdbflow.core.value_types import VALUE_TYPES
from vdbflow.devices import DEVICES
from vdbflow.errors import TimeError, VdbflowError
from vdbflow.jobs.config.base import Address, FilePath, FilePattern, MemorySize, StrictModel, Walltime, matching
from vdbflow.jobs.config.inputs import InputPath, InputSection, series_files
from vdbflow.jobs.config.output import COMPRESSIONS, MAX_CHUNK_POINTS, OUTPUT_FORMATS, OutputSpec  # noqa: F401 - here too
from vdbflow.jobs.config.reduce import MAX_HISTOGRAM_BINS, ReduceSpec  # noqa: F401 - MAX_HISTOGRAM_BINS: here too
from vdbflow.ops.request import SPACES
from vdbflow.synthetic.steady import FIELDS
from vdbflow.temporal.interpolation import TIME_MODES
from vdbflow.temporal.steps import (
    TABLEAUS,
    check_trajectory_memory,
    save_every_of,
    saved_bytes_per_step,
    saved_steps,
    step_count,
)

DERIVED = output_table.names("derived", "tensor")  # quantities of the Jacobian (vdbflow.core.outputs)
SECOND = output_table.names("second")  # second derivatives (Volume.sample_hessian): any float grid
OUTPUTS = tuple(output_table.TABLE)  # and inside: whether the stencil reads only active voxels
SYNTHETIC_FIELDS = tuple(FIELDS)
SYNTHETIC_DTYPES = tuple(n for n, vt in VALUE_TYPES.items() if vt.components == 1 and vt.is_float)
SAMPLING_DEVICES = tuple(d for d in DEVICES if d != "auto")  # auto follows the points, which a job makes on the CPU

Vec3 = tuple[float, float, float]
Count = Annotated[int, Field(ge=1)]

MAX_MAGNITUDE = 1e12  # extents and synthetic parameters: world sizes, values and derivatives stay finite
MAX_SEED = 2**32 - 1  # random points' seed: numpy's legacy range, an int every output format stores
MIN_WORKER_MEMORY = 256 << 20  # a local worker's memory_limit: less than a bare worker process needs


class ConfigError(VdbflowError, ValueError):
    """A job config is malformed: unknown keys, wrong types, impossible values or missing files."""


_Model = StrictModel


# -- volume -----------------------------------------------------------------------------------------------


def _axis_names(value: str) -> str:
    names = value.replace(",", "").replace(" ", "").lower()
    if not names or set(names) - set("xyz") or len(set(names)) != len(names):
        raise ValueError(f"expected periodic axes named among x, y, z (e.g. 'xz' or 'x,y,z'), got {value!r}")
    return names


class SyntheticVolume(_Model):
    """A flow field with an analytic Jacobian, stored on the voxels of a spherical shell."""

    field: Literal[SYNTHETIC_FIELDS] = Field(  # type: ignore[valid-type]
        description="taylor_green | abc | burgers | linear (u = A x + b)"
    )
    resolution: int = Field(64, ge=8, le=4096, description="voxels per edge of the bounding cube")
    extent: float = Field(
        2 * math.pi,
        ge=1e-9,
        le=MAX_MAGNITUDE,
        allow_inf_nan=False,
        description="edge of the cube [0, extent]^3 in world units",
    )
    shell: tuple[float, float] = Field((0.35, 0.5), description="inner and outer radius, fractions of the edge")
    params: dict[str, float | list[float] | list[list[float]]] = Field(
        default_factory=dict, description="the generator's keyword arguments (k, amplitude, circulation, matrix...)"
    )
    dtype: Literal[SYNTHETIC_DTYPES] = "float32"  # type: ignore[valid-type]
    write: FilePath | None = Field(None, description="also write the field to this .nvdb; workers then read it")

    @field_validator("shell")
    @classmethod
    def _shell(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= v[0] < v[1] < math.inf:
            raise ValueError(f"expected 0 <= inner < outer, finite, got {list(v)}")
        return v

    @field_validator("params")
    @classmethod
    def _finite(cls, v: dict[str, Any]) -> dict[str, Any]:
        def numbers(x: Any) -> list[float]:
            return [y for item in x for y in numbers(item)] if isinstance(x, list) else [x]

        for key, value in v.items():
            bad = [x for x in numbers(value) if not abs(x) <= MAX_MAGNITUDE]
            if bad:
                raise ValueError(f"expected {key} finite, of magnitude at most {MAX_MAGNITUDE:g}, got {bad[0]!r}")
        return v


class SeriesVolume(InputSection):
    """A time series of .nvdb files (one a step), for particle jobs: advected through in space and time."""

    paths: FilePattern | list[InputPath] = Field(
        description="a glob pattern or a list of files (ordered by time record)"
    )
    times: list[float] | None = Field(None, description="the time of each file; default its vdbflow.time record")
    grid: str | None = Field(None, description="the grid of each file (default the first)")
    cache: Count | Literal["auto"] = Field(
        "auto",
        description="steps kept open in each worker between its tasks: a number (pchip reads 4), or 'auto': every "
        "step of the advection's window when their files take at most a quarter of a worker's memory, else 4",
    )

    url_fields = ("paths",)

    def files(self) -> list[Path]:
        """The files as given (a glob's matches in name order; URLs too); open_series orders them by time."""
        return series_files(self.paths, self.storage_options)


class VolumeSpec(InputSection):
    """An .nvdb ``path`` with optional ``grids`` (names; default the first grid), ``synthetic``, or a
    ``series`` of files (particle jobs)."""

    path: InputPath | None = None  # a local path or a URL (config_inputs.py)
    grids: list[str] | None = None
    synthetic: SyntheticVolume | None = None
    series: SeriesVolume | None = None
    url_fields = ("path", "series")
    snapshot: bool = Field(
        True,
        description="read a private copy of 'path' (a reflink where the filesystem "
        "allows), so no other process can truncate what the job maps",
    )
    periodic: bool | Annotated[str, AfterValidator(_axis_names)] | tuple[bool | int, bool | int, bool | int] | None = (
        Field(
            None,
            description="periodic axes: true, 'xz', or [true, false, 96] (a period in voxels); default what the "
            "file records, and for a synthetic field its own periods (false: none)",
        )
    )

    @field_validator("grids", mode="before")
    @classmethod
    def _one_grid(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_source(self) -> VolumeSpec:
        given = [k for k in ("path", "synthetic", "series") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "expected exactly one of 'path' (an .nvdb file), 'synthetic' or 'series', got "
                + ("neither" if not given else "both " + " and ".join(map(repr, given)))
            )
        if self.grids is not None and self.path is None:
            raise ValueError("'grids' selects grids of an .nvdb 'path' (a series names its grid in series.grid)")
        if not self.snapshot and self.path is None:
            raise ValueError("'snapshot' is about an .nvdb 'path'; only a path is snapshotted")
        if self.grids is not None and len(set(self.grids)) != len(self.grids):
            raise ValueError(f"expected distinct grid names, got {self.grids}")
        return self


# -- points -----------------------------------------------------------------------------------------------


class _Points(_Model):
    space: Literal[SPACES] = Field("world", description="coordinates of the points")  # type: ignore[valid-type]
    chunk: int = Field(262_144, ge=1, le=MAX_CHUNK_POINTS, description="points per Dask chunk")

    def generated(self) -> int | None:
        """Points this source makes, known from the config alone (None: counted in a file or a volume)."""
        return None


class FilePoints(_Points, InputSection):
    """Points from a file: .npy (N, 3), .csv / .parquet (three columns), .zarr (an (N, 3) array)."""

    kind: Literal["file"]
    path: InputPath
    url_fields = ("path",)
    columns: tuple[str, str, str] | None = Field(None, description="csv/parquet columns; default x y z or i j k")
    array: str | None = Field(None, description="the array inside a Zarr group")

    @field_validator("path")
    @classmethod
    def _suffix(cls, v: Path) -> Path:
        if v.suffix.lower() not in (".npy", ".csv", ".parquet", ".zarr"):
            raise ValueError(f"expected a .npy, .csv, .parquet or .zarr file, got {v.name!r}")
        return v


class RandomPoints(_Points):
    """Uniform random points in the active voxels' cells (``voxels``), the active leaves' 8^3 boxes
    (``leaves``) or where the ``sampling.mode`` stencil reads only data (``stencil``); with ``bounds``,
    only those inside that box (docs/design.md, "Boxes")."""

    kind: Literal["random"]
    count: int = Field(ge=1)
    inside: Literal["voxels", "leaves", "stencil"] = "voxels"
    bounds: tuple[Vec3, Vec3] | None = Field(None, description="[[x0, y0, z0], [x1, y1, z1]] in the points' space")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the random generator's seed")

    def generated(self) -> int:
        return self.count

    @field_validator("bounds")
    @classmethod
    def _box(cls, v: tuple[Vec3, Vec3] | None) -> tuple[Vec3, Vec3] | None:
        if v is not None and not all(math.isfinite(a) and math.isfinite(b) and a < b for a, b in zip(*v, strict=True)):
            raise ValueError(f"expected finite bounds [[x0, y0, z0], [x1, y1, z1]] with x0 < x1 ..., got {list(v)}")
        return v


class GridPoints(_Points):
    """A regular lattice of ``shape`` points spanning ``bounds`` (default: the span of the voxel centres)."""

    kind: Literal["grid"]
    shape: tuple[Count, Count, Count]
    bounds: tuple[Vec3, Vec3] | None = None

    def generated(self) -> int:
        return math.prod(self.shape)  # exact: np.prod wraps around past 2**63


class PlanePoints(_Points):
    """A slice plane ``origin + s u + t v`` for s, t in [0, 1], ``resolution`` (ns, nt) points."""

    kind: Literal["plane"]
    origin: Vec3
    u: Vec3
    v: Vec3
    resolution: tuple[Count, Count]

    def generated(self) -> int:
        return math.prod(self.resolution)

    @model_validator(mode="after")
    def _spans(self) -> PlanePoints:
        cross = (
            self.u[1] * self.v[2] - self.u[2] * self.v[1],
            self.u[2] * self.v[0] - self.u[0] * self.v[2],
            self.u[0] * self.v[1] - self.u[1] * self.v[0],
        )
        if not any(cross):
            raise ValueError(f"expected u and v to span a plane, got parallel u={list(self.u)}, v={list(self.v)}")
        return self


class LinePoints(_Points):
    """``count`` points evenly spaced from ``start`` to ``end`` (both included)."""

    kind: Literal["line"]
    start: Vec3
    end: Vec3
    count: int = Field(ge=1)

    def generated(self) -> int:
        return self.count


class VoxelPoints(_Points):
    """Every active voxel's centre (``per_voxel: 0``), or ``per_voxel`` uniform random points in each active
    voxel: "over the whole field" without a points file."""

    kind: Literal["voxels"]
    per_voxel: int = Field(0, ge=0, le=1_000_000, description="0: the centres; k: k random points a voxel")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the random generator's seed (per_voxel > 0)")


PointsSpec = Annotated[
    FilePoints | RandomPoints | GridPoints | PlanePoints | LinePoints | VoxelPoints, Field(discriminator="kind")
]


# -- sampling, cluster, output ----------------------------------------------------------------------------


class SamplingSpec(_Model):
    mode: Literal[tuple(MODES)] = "linear"  # type: ignore[valid-type]
    jacobian_space: Literal[SPACES] | None = Field(None, description="default: the points' space")  # type: ignore[valid-type]
    outputs: list[Literal[OUTPUTS]] = Field(["value", "jacobian"])  # type: ignore[valid-type]
    device: Literal[SAMPLING_DEVICES] = "cpu"  # type: ignore[valid-type]

    @field_validator("outputs")
    @classmethod
    def _some(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("expected at least one output")
        return list(dict.fromkeys(v))


PARTICLE_OUTPUTS = ("velocity", "jacobian", "ftle")  # besides position, status and end_time, always written


class AdvectSpec(_Model):
    """Particle trajectories instead of samples: the points are seeds, advected through the (steady,
    vec3 float) volume with ``sampling.mode`` (:func:`vdbflow.advect`).  Each chunk of seeds is one
    task that integrates its particles whole through the volume (memory-mapped from its file on each
    worker, or sent once to each worker when synthetic), then writes its rows of the store."""

    t0: float = Field(0.0, description="start time")
    t1: float = Field(description="end time (before t0: backward)")
    dt: float = Field(gt=0, description="the largest time step")
    method: Literal[tuple(TABLEAUS)] = "rk4"  # type: ignore[valid-type]
    save_every: int = Field(1, ge=1, description="keep positions every this many steps (and at t1)")
    outputs: list[Literal[PARTICLE_OUTPUTS]] = Field(  # type: ignore[valid-type]
        default_factory=list, description="velocity, jacobian (at the kept positions), ftle (over [t0, t1])"
    )
    time: Literal[TIME_MODES] = Field(  # type: ignore[valid-type]
        "linear", description="interpolation in time (volume.series)"
    )

    @model_validator(mode="after")
    def _times(self) -> AdvectSpec:
        if not (math.isfinite(self.t0) and math.isfinite(self.t1) and math.isfinite(self.dt)):
            raise ValueError(f"expected finite t0, t1 and dt, got t0={self.t0}, t1={self.t1}, dt={self.dt}")
        if "ftle" in self.outputs and self.t1 == self.t0:
            raise ValueError(f"expected t1 != t0 for the ftle output, got t0 = t1 = {self.t0}")
        return self

    @field_validator("dt")
    @classmethod
    def _step_count(cls, dt: float, info: ValidationInfo) -> float:
        t0, t1 = info.data.get("t0"), info.data.get("t1")
        if t0 is not None and t1 is not None and math.isfinite(t0) and math.isfinite(t1):
            try:
                step_count(t0, t1, dt)  # too many steps (counted without overflow), dt not > 0
            except TimeError as err:
                raise ValueError(str(err)) from None
        return dt

    @property
    def steps(self) -> int:
        """The integration's steps, ``ceil(|t1 - t0| / dt)``."""
        return step_count(self.t0, self.t1, self.dt)

    def saved_steps(self) -> int:
        """The steps whose positions are kept (every ``save_every``-th and the last)."""
        return saved_steps(self.steps, save_every_of(self.save_every))

    @field_validator("outputs")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))


DashboardAddress = Annotated[
    str,
    matching(
        r"(\[[0-9a-f:]+\]|[\w.-]*):\d{1,5}", "true, false or a 'host:port' like '127.0.0.1:8787' or '0.0.0.0:8787'"
    ),
]


class _Cluster(_Model):
    dashboard: bool | DashboardAddress = Field(
        True,
        description="true: serve the Dask dashboard on 127.0.0.1 (a free port); 'host:port': there "
        "('0.0.0.0:8787' exposes it to the network); false: no HTTP server at all",
    )

    @property
    def dashboard_address(self) -> str | None:
        """Where a scheduler started by the job serves its dashboard, or None for none."""
        if self.dashboard is False:
            return None
        return "127.0.0.1:0" if self.dashboard is True else self.dashboard


class LocalClusterSpec(_Cluster):
    """An embedded ``distributed.LocalCluster`` of worker processes, sized to the machine by default."""

    kind: Literal["local"]
    workers: int | None = Field(None, ge=1)
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str | None = Field(
        None,
        description="per worker, e.g. '4GiB', a fraction of the machine (0.5) or 'auto'; default: machine / workers",
    )

    @field_validator("memory_limit")
    @classmethod
    def _memory(cls, v: str | None) -> str | None:
        if v is None or v.strip().lower() == "auto":
            return v
        from dask.utils import parse_bytes

        try:
            number = float(v)
        except ValueError:
            number = None
        if number is not None and 0 < number <= 1:  # dask: a fraction of the machine's memory
            from distributed.system import MEMORY_LIMIT as total  # the machine's, or its cgroup's, memory

            if number * total >= MIN_WORKER_MEMORY:
                return v
            raise ValueError(
                f"expected a fraction of this machine's {total / 2**30:.1f} GiB giving at least "
                f"{MIN_WORKER_MEMORY >> 20} MiB per worker, got {v} ({number * total / 2**20:.1f} MiB)"
            )
        try:
            size = parse_bytes(v)
        except (ValueError, TypeError, OverflowError):
            size = None
        if size is None or not MIN_WORKER_MEMORY <= size < 2**63:
            raise ValueError(
                f"expected a memory size of at least {MIN_WORKER_MEMORY >> 20} MiB per worker (e.g. '4GiB', "
                f"4000000000), a fraction of the machine's memory in (0, 1], or 'auto', got {v!r}"
            )
        return v


class AddressClusterSpec(_Cluster):
    """An existing scheduler, e.g. ``tcp://head-node:8786``."""

    kind: Literal["address"]
    address: Address


class CudaClusterSpec(_Cluster):
    """``dask_cuda.LocalCUDACluster``: one worker per GPU (``pip install -e ".[gpu]"`` from the checkout)."""

    kind: Literal["cuda"]
    devices: list[int] | None = Field(None, description="CUDA_VISIBLE_DEVICES; default all")
    rmm_pool_size: str | None = None


# SLURMCluster arguments the job sets itself (besides the section's own keys)
_SLURM_RESERVED = {
    "name",
    "scheduler",
    "scheduler_options",
    "dashboard_address",
    "n_workers",
    "asynchronous",
    "job_cls",
    "loop",
}


class SlurmAdapt(_Model):
    """``cluster.adapt``: dask-jobqueue's adaptive scaling, in whole jobs."""

    minimum_jobs: int = Field(0, ge=0)
    maximum_jobs: int = Field(ge=1)

    @model_validator(mode="after")
    def _range(self) -> SlurmAdapt:
        if self.minimum_jobs > self.maximum_jobs:
            raise ValueError(f"expected minimum_jobs <= maximum_jobs, got {self.minimum_jobs} > {self.maximum_jobs}")
        return self


class SlurmClusterSpec(_Cluster):
    """``dask_jobqueue.SLURMCluster``: ``jobs`` batch jobs, each running ``processes`` workers."""

    kind: Literal["slurm"]
    queue: str
    account: str | None = None
    walltime: Walltime = "01:00:00"
    cores: int = Field(ge=1)
    memory: MemorySize
    processes: int = Field(1, ge=1)
    jobs: int = Field(1, ge=1)
    job_extra_directives: list[str] = Field(default_factory=list, description="extra #SBATCH lines")
    job_script_prologue: list[str] = Field(default_factory=list, description="shell lines before the worker")
    interface: str | None = None
    local_directory: str | None = None
    python: str | None = Field(
        None,
        description="the Python the workers run (default: the one running "
        "`vdbflow run`); e.g. 'python' after a prologue activates a venv",
    )
    jobqueue_options: dict[str, Any] = Field(
        default_factory=dict,
        description="other keyword arguments of dask_jobqueue.SLURMCluster (worker_extra_args, "
        "log_directory, death_timeout, job_directives_skip, ...)",
    )
    adapt: SlurmAdapt | None = Field(
        None,
        description="scale between minimum_jobs and maximum_jobs with the work (instead of a fixed number of 'jobs')",
    )
    wait_for_workers: int = Field(1, ge=1, description="workers to wait for before the job starts sampling")
    wait_timeout: float = Field(3600.0, gt=0, description="seconds to wait for them (e.g. 600, '30min', '2h')")

    @field_validator("wait_timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        if isinstance(v, str):
            m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|min|m|h)?\s*", v, flags=re.IGNORECASE)
            if m is None:
                raise ValueError(f"expected seconds or a duration like '600s', '30min' or '2h', got {v!r}")
            scale = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[(m.group(2) or "").lower()]
            return float(m.group(1)) * scale
        return v

    @field_validator("jobqueue_options")
    @classmethod
    def _not_named(cls, v: dict[str, Any]) -> dict[str, Any]:
        named = sorted(set(v) & (set(cls.model_fields) | _SLURM_RESERVED))
        if named:
            raise ValueError(
                f"expected only options without a key of their own here, got {named} (set "
                + ("them" if len(named) > 1 else "it")
                + " in the cluster section itself"
                + ("; 'n_workers' is 'jobs'" if "n_workers" in named else "")
                + ")"
            )
        return v

    @model_validator(mode="after")
    def _divisible(self) -> SlurmClusterSpec:
        if self.cores % self.processes:
            raise ValueError(
                f"expected cores divisible by processes, got cores={self.cores}, processes={self.processes}"
            )
        if self.adapt is not None and "jobs" in self.model_fields_set:
            raise ValueError("expected either 'jobs' (a fixed number) or 'adapt' (a range), got both")
        jobs, key = (self.adapt.maximum_jobs, "adapt.maximum_jobs") if self.adapt is not None else (self.jobs, "jobs")
        if self.wait_for_workers > jobs * self.processes:
            raise ValueError(
                f"expected wait_for_workers <= {jobs * self.processes} ({key} {jobs} x processes "
                f"{self.processes}), got {self.wait_for_workers}"
            )
        return self


ClusterSpec = Annotated[
    LocalClusterSpec | AddressClusterSpec | CudaClusterSpec | SlurmClusterSpec, Field(discriminator="kind")
]


ByteSize = Annotated[int, Field(ge=0)] | MemorySize


def bytes_of(size: int | str) -> int:
    """``'64GiB'`` -> 68719476736 (K, M, G, T are powers of 1000, Ki.. of 1024); ints pass."""
    if isinstance(size, int):
        return size
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT])(i?)B?", size.strip(), flags=re.IGNORECASE)
    if m is None:
        raise ConfigError(f"expected a size like '64GB' or '512GiB', got {size!r}")
    power = "KMGT".index(m.group(2).upper()) + 1
    return int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** power)


class LimitsSpec(_Model):
    """How large a job may be before ``vdbflow run`` refuses it (raise these, or run with ``--force``)."""

    max_points: int = Field(1_000_000_000, ge=1, description="points sampled")
    max_output_bytes: ByteSize = Field("1TB", description="estimated size of the result before compression")
    max_chunks: int = Field(
        100_000, ge=1, description="chunks of points or of the stored result (each costs Dask tasks of its own)"
    )


class JobConfig(_Model):
    """A whole ``vdbflow run`` job."""

    volume: VolumeSpec
    points: PointsSpec
    sampling: SamplingSpec = SamplingSpec()
    advect: AdvectSpec | None = Field(None, description="particle trajectories from the points as seeds")
    reduce: ReduceSpec | None = Field(None, description="statistics written instead of every point's outputs")
    partitions: int | None = Field(None, ge=1, description="default: one per worker")
    cluster: ClusterSpec = LocalClusterSpec(kind="local")
    output: OutputSpec
    limits: LimitsSpec = LimitsSpec()
    _where: dict = PrivateAttr(default_factory=dict)  # key path -> "(file, line N)", for later checks

    @property
    def chunk(self) -> tuple[int, str]:
        """The points of the smallest chunk the job makes (of points or of the stored result), and its key."""
        if self.output.chunk is not None and self.output.chunk < self.points.chunk:
            return self.output.chunk, "output.chunk"
        return self.points.chunk, "points.chunk"

    def chunk_problem(self, count: int | None) -> str | None:
        """Why ``count`` points make more chunks than ``limits.max_chunks`` (each costs Dask tasks of its
        own), or None."""
        size, key = self.chunk
        if count is None or -(-count // size) <= self.limits.max_chunks:
            return None
        return (
            f"{key}{self.where(key)}: {-(-count // size):,} chunks ({count:,} points in chunks of {size:,}), "
            f"more than limits.max_chunks ({self.limits.max_chunks:,}); chunks of at least "
            f"{-(-count // self.limits.max_chunks):,} points make fewer"
        )

    @model_validator(mode="after")
    def _sizes(self) -> JobConfig:
        """Each particle task's saved trajectories small enough for memory."""
        count = self.points.generated()
        if self.advect is not None:
            seeds = min(self.points.chunk, count or self.points.chunk)  # one task advects a chunk of seeds
            outputs = self.advect.outputs
            try:
                check_trajectory_memory(
                    seeds,
                    self.advect.saved_steps(),
                    saved_bytes_per_step("velocity" in outputs, "jacobian" in outputs),
                    " (a smaller points.chunk: seeds per task)",
                )
            except TimeError as err:
                raise ValueError(f"advect.save_every: {err}") from None
        return self

    @model_validator(mode="after")
    def _series_are_advected(self) -> JobConfig:
        if self.volume.series is not None and self.advect is None:
            raise ValueError(
                "expected an 'advect' section with volume.series (a series is advected through in time), got none"
            )
        if self.volume.series is not None and self.sampling.device == "cuda" and self.advect.time == "none":
            raise ValueError(
                "expected advect.time 'linear' or 'pchip' with volume.series and sampling.device 'cuda' (windows "
                "of a series' steps on the GPU), got 'none'"
            )
        return self

    @model_validator(mode="after")
    def _reduce_samples(self) -> JobConfig:
        if self.reduce is not None and self.advect is not None:
            raise ValueError("expected 'reduce' or 'advect', got both (statistics of trajectories are not reduced)")
        if self.output.resolved_format == "vtkhdf" and (self.reduce is not None or self.advect is not None):
            raise ValueError(
                "expected output.format vtkhdf only for sampled points (VTK points with their values), got a "
                f"'{'reduce' if self.reduce is not None else 'advect'}' job: write it as zarr or netcdf"
            )
        return self

    def record_where(self, found: Mapping[tuple, str]) -> None:
        """Remember where keys were given (key path -> `` (FILE, line N)``), for :meth:`where`."""
        self._where.update(found)

    def where(self, dotted: str) -> str:
        """`` (FILE, line N)`` where the key was given, or ``""``."""
        return self._where.get(tuple(dotted.split(".")), "")

    @contextlib.contextmanager
    def about(self, dotted: str, *kinds: type[Exception]) -> Iterator[None]:
        """A block whose errors of ``kinds`` (vdbflow's own by default) are the config's fault at ``dotted``:
        they leave as a :class:`ConfigError` naming the key and its line (``with cfg.about("reduce"): ...``)."""
        caught = kinds or (VdbflowError,)
        try:
            yield
        except ConfigError:
            raise
        except caught as err:
            raise ConfigError(f"{dotted}{self.where(dotted)}: {err}") from None
