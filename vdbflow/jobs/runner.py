"""``vdbflow run``: a batch job from a :class:`~vdbflow.jobs.config.JobConfig` - volume, points, sampling on a
Dask cluster, and a result store written from the workers.

:func:`plan_job` reads only headers (it backs ``--dry-run``); :func:`run_job` runs the job and returns
its summary.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import logging
import os
import platform
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from vdbflow import synthetic
from vdbflow.analysis import flow
from vdbflow.core.volume import Volume
from vdbflow.errors import NanoVDBError, PointsError, TimeError, VdbflowError, VolumeError
from vdbflow.io.identity import FileIdentity
from vdbflow.jobs.clusters import MissingExtraError, describe_cluster, open_cluster, slurm_job_script
from vdbflow.jobs.config import (
    DERIVED,
    SECOND,
    ConfigError,
    FilePoints,
    JobConfig,
    SlurmClusterSpec,
    bytes_of,
    check_inputs,
    dump_config,
    generated_count,
)
from vdbflow.jobs.output import (
    OutputError,
    add_attrs,
    discard,
    lazy_write,
    partial_path,
    publish,
    snapshot_path,
    tidy,
)
from vdbflow.jobs.points import file_point_count, make_points
from vdbflow.ops.sampling import STENCIL_RADIUS

log = logging.getLogger("vdbflow.run")


@dataclass
class GridPlan:
    name: str
    value_type: str
    components: int
    leaves: int
    active_voxels: int
    source: str


class InputError(VdbflowError, RuntimeError):
    """An input file changed, vanished or could not be copied between the plan and its reading."""


class InputIdentity(FileIdentity):
    """What the plan saw of an input file; reading it later checks the file is still the same one."""

    label = "the input"
    seen = "the plan saw it"
    error = InputError


# how long a job takes, for the plan: configs/demo.yaml at 8M points sampled and wrote 2.0-2.3 M points/s
# on one workstation (README); a job's own rate depends on its workers, mode and outputs
REFERENCE_POINTS_PER_S = 2.0e6
# and Dask's cost of each chunk (its tasks: points, routing, sampling, writing): 0.1-0.2 s measured for
# the demo's outputs on 2 shared cores, less on a workstation
REFERENCE_SECONDS_PER_CHUNK = 0.05


@dataclass
class JobPlan:
    """What a job will do, from headers alone."""

    config: JobConfig
    grids: list[GridPlan]
    point_count: int | None
    point_chunks: int | None
    partitions: str
    cluster: str
    halo: int
    job_script: str | None = None
    notes: list[str] = field(default_factory=list)
    bytes_per_point: int = 0
    inputs: dict[str, InputIdentity] = field(default_factory=dict)  # by config key
    warnings: list[str] = field(default_factory=list)  # a dry run's problems that a run would refuse

    @property
    def output_bytes(self) -> int | None:
        """The result's size before compression (None when the point count is known only when read)."""
        return None if self.point_count is None else self.point_count * self.bytes_per_point

    @property
    def seconds(self) -> float | None:
        """About how long sampling and writing take at ``REFERENCE_POINTS_PER_S`` and
        ``REFERENCE_SECONDS_PER_CHUNK`` (the smaller of points.chunk and output.chunk)."""
        if self.point_count is None:
            return None
        chunks = -(-self.point_count // self.config.chunk[0])
        return self.point_count / REFERENCE_POINTS_PER_S + chunks * REFERENCE_SECONDS_PER_CHUNK


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


_TENSOR_WIDTH = {"vorticity": 3, "strain_rate": 9, "rotation_rate": 9}  # other derived quantities: scalars
_PER_COMPONENT = {"hessian": 9, "laplacian": 1}  # second derivatives: entries per value component


def _bytes_per_point(cfg: JobConfig, grids: list[GridPlan]) -> int:
    """Bytes of the result per point before compression: coordinates, then each grid's outputs (for a
    particle job, a seed's kept positions and outputs)."""
    if cfg.advect is not None:
        from vdbflow.temporal.particles import step_plan

        kept = len(step_plan(cfg.advect.t0, cfg.advect.t1, cfg.advect.dt, cfg.advect.save_every)[3])
        per_kept = 3 * 8 + 3 * 8 * ("velocity" in cfg.advect.outputs) + 9 * 8 * ("jacobian" in cfg.advect.outputs)
        return kept * per_kept + 1 + 8 + 8 * ("ftle" in cfg.advect.outputs)  # status, end time, FTLE
    total = 8 + 3 * 8  # the int64 point index and float64 coordinates
    for g in grids:
        name = g.value_type.lower()
        item = 8 if (name.endswith("d") or "double" in name or "64" in name) else 4
        for out in cfg.sampling.outputs:
            if out == "value":
                total += g.components * item
            elif out == "jacobian":
                total += 3 * g.components * item
            elif out == "inside":
                total += 1
            elif out in _PER_COMPONENT:
                total += _PER_COMPONENT[out] * g.components * item
            else:
                total += _TENSOR_WIDTH.get(out, 1) * item
    return total


def _limits(plan: JobPlan) -> list[str]:
    """The job's size against ``limits``: what is too large, and how to allow it."""
    cfg, problems = plan.config, []
    if plan.point_count is not None and plan.point_count > cfg.limits.max_points:
        problems.append(
            f"points{cfg.where('points')}: {plan.point_count:,} points, more than limits.max_points "
            f"({cfg.limits.max_points:,})"
        )
    if (chunks := cfg.chunk_problem(plan.point_count)) is not None:
        problems.append(chunks)
    cap = bytes_of(cfg.limits.max_output_bytes)
    if plan.output_bytes is not None and plan.output_bytes > cap:
        problems.append(
            f"output{cfg.where('output')}: about {human_bytes(plan.output_bytes)} of results "
            f"({plan.bytes_per_point} bytes a point), more than limits.max_output_bytes "
            f"({human_bytes(cap)})"
        )
    return problems


def _synthetic_estimate(cfg: JobConfig) -> GridPlan:
    s = cfg.volume.synthetic
    inner, outer = s.shell
    voxels = int(4.0 / 3.0 * np.pi * (outer**3 - inner**3) * s.resolution**3)
    comps = 3 if s.field != "linear" else len(s.params.get("matrix", [[0] * 3] * 3))
    where = f" (written to {s.write})" if s.write else ""
    return GridPlan(
        "velocity",
        f"vec{comps}{'f' if s.dtype == 'float32' else 'd'}",
        comps,
        -1,
        voxels,
        f"synthetic {s.field}, {s.resolution}^3 box, shell {list(s.shell)}{where}",
    )


def _nvdb_grids(cfg: JobConfig) -> list[GridPlan]:
    from vdbflow.io.nanovdb import list_grids

    series = cfg.volume.series
    path = cfg.volume.path if series is None else series.files()[0]  # a series: its first file
    key = "volume.path" if series is None else "volume.series.paths"
    try:
        infos = list_grids(path)
    except NanoVDBError as err:
        raise ConfigError(f"{key}: {err}") from None
    by_name = {g.name: g for g in infos}
    if not infos:
        raise ConfigError(f"{key}: {path} holds no grids")
    names = cfg.volume.grids or ([series.grid] if series is not None and series.grid else [infos[0].name])
    missing = [n for n in names if n not in by_name]
    if missing:
        grids_key = "volume.grids" if series is None else "volume.series.grid"
        raise ConfigError(f"{grids_key}: {missing} not in {path} (it has {list(by_name)})")
    plans = []
    for n in names:
        g = by_name[n]
        if g.grid_type in ("Index", "OnIndex"):
            raise ConfigError(f"volume.grids: {n!r} is an {g.grid_type} grid (no values to sample)")
        components = 3 if g.grid_type.startswith("Vec3") else 4 if g.grid_type.startswith("Vec4") else 1
        where = str(path) if series is None else f"series of {len(series.files())} files, {path} first"
        plans.append(GridPlan(n, g.grid_type, components, g.leaf_count, g.active_voxel_count, where))
    return plans


def _series_times(cfg: JobConfig) -> tuple[float, float]:
    """The first and last time of the job's series (headers and time records only), checked against
    ``advect``'s ``[t0, t1]``; a ConfigError naming the key otherwise."""
    from vdbflow.jobs.particles import SeriesFiles

    s, a = cfg.volume.series, cfg.advect
    assert s is not None and a is not None  # a series job is a particle job (JobConfig checks it)
    files = SeriesFiles(tuple(str(f) for f in s.files()), None if s.times is None else tuple(s.times), s.grid, 1)
    try:
        times = files.open().times
    except (VolumeError, TimeError, NanoVDBError) as err:
        raise ConfigError(f"volume.series{cfg.where('volume.series')}: {err}") from None
    lo, hi = float(times[0]), float(times[-1])
    if not (lo <= min(a.t0, a.t1) and max(a.t0, a.t1) <= hi):
        raise ConfigError(
            f"advect{cfg.where('advect')}: expected t0 and t1 inside the series' times [{lo!r}, {hi!r}], "
            f"got t0={a.t0!r}, t1={a.t1!r}"
        )
    return lo, hi


def plan_job(cfg: JobConfig, force: bool = False, dry_run: bool = False) -> JobPlan:
    """Check a config against its inputs and say what the job will do (and how large it is); runs nothing.

    A job beyond ``cfg.limits`` is refused with :class:`ConfigError` unless ``force``.  With ``dry_run``
    (``--dry-run``: a template checked where its inputs are not) missing input files and a missing
    dask-jobqueue are ``warnings`` of the plan instead of errors.
    """
    warnings = check_inputs(cfg, missing_ok=dry_run)
    series = cfg.volume.series
    if series is not None:
        files = series.files()
        gone = [f for f in files if not f.is_file()]
        missing_volume = f"{gone[0]}" if gone else (None if files else f"a file matching {series.paths!r}")
    else:
        missing_volume = cfg.volume.path if cfg.volume.path is not None and not cfg.volume.path.is_file() else None
    volume_missing = missing_volume is not None
    if cfg.volume.synthetic:
        try:
            synthetic.make_field(cfg.volume.synthetic.field, **cfg.volume.synthetic.params)
        except (VolumeError, ValueError) as err:
            raise ConfigError(f"volume.synthetic.params{cfg.where('volume.synthetic.params')}: {err}") from None
    if cfg.volume.synthetic:
        grids = [_synthetic_estimate(cfg)]
    elif volume_missing:  # a dry run: the sizes assume vec3f grids
        grids = [
            GridPlan(n, "Vec3f", 3, -1, -1, f"not read: {missing_volume} is not here (sizes assume vec3f)")
            for n in cfg.volume.grids or ["(the first grid)"]
        ]
    else:
        grids = _nvdb_grids(cfg)
    derived = [o for o in cfg.sampling.outputs if o in DERIVED] if cfg.advect is None else []  # advect: unused
    for g in grids if not volume_missing else ():
        floating = g.value_type.lower().startswith(("vec", "float", "double"))
        if cfg.sampling.mode != "closest" and not floating:
            raise ConfigError(
                f"sampling.mode: {cfg.sampling.mode!r} needs float data; grid {g.name!r} holds "
                f"{g.value_type} (use mode: closest)"
            )
        if derived and g.components != 3:
            raise ConfigError(
                f"sampling.outputs: {derived} need a vec3 field; grid {g.name!r} has {g.components} component(s)"
            )
    if cfg.advect is not None:
        if len(grids) != 1:
            raise ConfigError(
                f"advect{cfg.where('advect')}: expected one velocity grid to advect through (volume.grids: "
                f"[name]), got {len(grids)}: {', '.join(g.name for g in grids)}"
            )
        g = grids[0]
        if not volume_missing and (
            g.components != 3 or not g.value_type.lower().startswith(("vec3", "vec3f", "vec3d"))
        ):
            raise ConfigError(
                f"advect{cfg.where('advect')}: expected a vec3 float velocity grid, grid {g.name!r} holds "
                f"{g.value_type} with {g.components} component(s)"
            )
    if isinstance(cfg.points, FilePoints) and not cfg.points.path.exists():
        count = None  # a dry run: counted when the file is there
    elif isinstance(cfg.points, FilePoints):
        try:
            count = file_point_count(cfg.points)
        except PointsError as err:
            raise ConfigError(str(err)) from None
    else:
        count = generated_count(cfg.points)
    chunks = None if count is None else -(-count // cfg.points.chunk)
    cluster = describe_cluster(cfg.cluster)
    script = None
    if isinstance(cfg.cluster, SlurmClusterSpec):
        try:
            script = slurm_job_script(cfg.cluster)
        except MissingExtraError as err:
            if not dry_run:
                raise
            warnings.append(f"cluster{cfg.where('cluster')}: no job script shown: {err}")
    halo = max(1, STENCIL_RADIUS[cfg.sampling.mode])
    notes = []
    if cfg.output.path.exists():
        notes.append(f"{cfg.output.path} holds an earlier vdbflow result, replaced when the new one is complete")
    notes += tidy(cfg.output.path.absolute(), dry_run=True)
    inputs = {}
    if cfg.volume.path is not None and not volume_missing:
        inputs["volume.path"] = InputIdentity.of(cfg.volume.path)
        how = (
            (
                "copied to a private snapshot next to the output first (a reflink where the filesystem allows, "
                "else a copy), so no other process can truncate what the job maps"
            )
            if cfg.volume.snapshot
            else (
                "memory-mapped in place (volume.snapshot: false): the job must not run while another process "
                "rewrites it"
            )
        )
        notes.append(f"{cfg.volume.path} ({human_bytes(inputs['volume.path'].size)}) is {how}")
    if series is not None and not volume_missing:
        lo, hi = _series_times(cfg)
        notes.append(
            f"the series' {len(series.files())} files (t from {lo:g} to {hi:g}) are memory-mapped in place by "
            "each worker: the job must not run while another process rewrites them"
        )
    plan = JobPlan(
        cfg,
        grids,
        count,
        chunks,
        str(cfg.partitions) if cfg.partitions else "one per worker",
        cluster,
        halo,
        script,
        notes,
        _bytes_per_point(cfg, grids),
        inputs,
        warnings,
    )
    problems = _limits(plan)
    if problems and not force:
        raise ConfigError(
            "the job is larger than its limits:\n"
            + "\n".join(f"  {p}" for p in problems)
            + "\n  (raise limits.max_points / limits.max_output_bytes / limits.max_chunks in the config, or run with "
            "--force)"
        )
    notes += [f"{p}: allowed by --force" for p in problems]
    free = _free_bytes(cfg.output.path)
    if plan.output_bytes is not None and free is not None and plan.output_bytes > free:
        notes.append(
            f"the result (about {human_bytes(plan.output_bytes)} before compression) may not fit in the "
            f"{human_bytes(free)} free where {cfg.output.path} goes"
        )
    return plan


def _free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem that will hold ``path`` (its nearest existing ancestor)."""
    place = path.absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        return shutil.disk_usage(place).free
    except OSError:
        return None


# -- running ------------------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    import dask
    import distributed

    from vdbflow.version import __version__

    return {
        "vdbflow": __version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "xarray": xr.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _build_volumes(cfg: JobConfig, grids: list[str]) -> tuple[dict[str, Any], Any]:
    """Volumes by grid name (a Volume, the .nvdb path workers read, or a series' SeriesFiles) and the
    analytic field, if any."""
    from vdbflow.io.nanovdb import save
    from vdbflow.jobs.particles import SeriesFiles

    series = cfg.volume.series
    if series is not None:
        times = None if series.times is None else tuple(series.times)
        files = SeriesFiles(tuple(str(f) for f in series.files()), times, series.grid, series.cache)
        return {grids[0]: files}, None
    s = cfg.volume.synthetic
    if s is None:
        return {name: (cfg.volume.path, name) for name in grids}, None
    try:
        analytic = synthetic.make_field(s.field, **s.params)
        vol = synthetic.flow_volume(analytic, s.resolution, s.extent, np.dtype(s.dtype), *s.shell)
    except (VolumeError, ValueError) as err:
        raise ConfigError(f"volume.synthetic: {err}") from None
    if s.write is not None:
        s.write.parent.mkdir(parents=True, exist_ok=True)
        for line in tidy(s.write.absolute()):  # what a killed run's save left beside it
            log.warning("%s", line)
        save(s.write, {vol.name: vol})  # atomic: a private directory beside it, then a rename
        log.info("wrote the synthetic field to %s", s.write)
        return {vol.name: (s.write, vol.name)}, analytic
    return {vol.name: vol}, analytic


def _inside_block(points: np.ndarray, topology: Any, mode: str, space: str) -> np.ndarray:
    from vdbflow.ops.coverage import stencil_inside

    return stencil_inside(topology, points, mode, space)


def _inside(pts: Any, topology: Any, cfg: JobConfig) -> Any:
    """Lazy (N,) bool: points whose stencil reads only active voxels (the topology travels once)."""
    import dask
    import dask.array as da

    shared = dask.delayed(topology)
    blocks = [
        da.from_delayed(
            dask.delayed(_inside_block, pure=True)(block, shared, cfg.sampling.mode, cfg.points.space),
            shape=(n,),
            dtype=bool,
        )
        for block, n in zip(pts.to_delayed().ravel(), pts.chunks[0], strict=True)
    ]
    return da.concatenate(blocks) if blocks else da.zeros((0,), dtype=bool)


def _grid_dataset(dvol: Any, pts: Any, cfg: JobConfig, prefix: str, topology: Any) -> tuple[xr.Dataset, Any]:
    """The sampled variables of one grid, named for the job's outputs; and its Jacobian (or None)."""
    sp = cfg.sampling
    want_jac = any(o == "jacobian" or o in DERIVED for o in sp.outputs)
    if any(o in SECOND for o in sp.outputs):
        ds = dvol.sample_hessian(pts, sp.mode, cfg.points.space, sp.jacobian_space, device=sp.device)
    elif want_jac:
        ds = dvol.sample_grad(pts, sp.mode, cfg.points.space, sp.jacobian_space, device=sp.device)
    else:
        ds = dvol.sample(pts, sp.mode, cfg.points.space, device=sp.device)
    name = dvol.template.name
    jac = ds.get(f"{name}_jacobian")
    keep = [
        v
        for v, o in ((name, "value"), (f"{name}_jacobian", "jacobian"), (f"{name}_hessian", "hessian"))
        if o in sp.outputs
    ]
    out = ds[keep]
    if "laplacian" in sp.outputs:
        out[f"{prefix}laplacian"] = flow.laplacian(ds[f"{name}_hessian"])
    for quantity in (o for o in sp.outputs if o in DERIVED):
        if quantity == "helicity":
            da_ = flow.helicity(ds[name], jac)
        else:
            da_ = getattr(flow, quantity)(jac)
        out[f"{prefix}{quantity}"] = da_
    if "inside" in sp.outputs:
        out[f"{prefix}stencil_inside"] = xr.DataArray(
            _inside(pts.rechunk({1: 3}), topology, cfg),
            dims="point",
            attrs={
                "long_name": f"the {sp.mode} stencil of the point reads only active voxels of {dvol.template.name}",
                "flag_values": np.array([0, 1], np.int8),
                "flag_meanings": "reads_background all_data",
            },
        )
    return out, jac


def _shaped(
    ds: xr.Dataset, shape: tuple[int, ...], dims: tuple[str, ...], chunk: int, dim: str = "point"
) -> xr.Dataset:
    """``ds`` with its ``dim`` (``point``, or a particle job's ``particle``) unravelled (C order) into
    ``dims`` of ``shape`` - a plane's (s, t), a lattice's (x, y, z) - chunked along the first of them,
    about ``chunk`` points a chunk; lazy."""
    rows = max(1, chunk // max(1, int(np.prod(shape[1:]))))
    variables = {}
    for name, var in ds.variables.items():
        if name == dim:
            continue
        if dim in var.dims:
            if var.dims[0] != dim:
                raise OutputError(f"expected {dim!r} first in the dims of {name}, got {var.dims}")
            data = var.data.reshape(tuple(shape) + var.shape[1:])
            if hasattr(data, "rechunk"):
                data = data.rechunk((rows,) + tuple(shape[1:]) + var.shape[1:])
            var = xr.Variable(tuple(dims) + var.dims[1:], data, var.attrs)
        variables[name] = var
    coords = {n: v for n, v in variables.items() if n in ds.coords}
    data_vars = {n: v for n, v in variables.items() if n not in ds.coords}
    attrs = {k: v for k, v in ds.attrs.items() if k != "featureType"}  # a grid of points, not a CF point set
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


ANALYTIC_CHECK_PER_CHUNK = 65_536  # points of each chunk compared with a synthetic field's analytic Jacobian


def _analytic_error(
    jac: Any, pts: Any, analytic: Any, cfg: JobConfig, index_to_world: np.ndarray, topology: Any
) -> Any:
    """Lazy (chunks, 2) array: max |J - J_exact| over the interior points of each chunk (at most
    ``ANALYTIC_CHECK_PER_CHUNK`` evenly spaced points of it), and their count.  Interior points are
    those whose stencil reads only active voxels (:func:`vdbflow.ops.coverage.stencil_inside`), where the
    error is the scheme's own, free of the background."""
    import dask

    from vdbflow.ops.coverage import stencil_inside

    space = cfg.points.space
    mode = cfg.sampling.mode
    jspace = cfg.sampling.jacobian_space or space
    M = np.asarray(index_to_world, np.float64)

    def block_error(J: np.ndarray, P: np.ndarray, topology: Any) -> np.ndarray:
        if len(P) > ANALYTIC_CHECK_PER_CHUNK:  # a check, not an output: evenly spaced points of the chunk
            pick = np.linspace(0, len(P) - 1, ANALYTIC_CHECK_PER_CHUNK).astype(np.int64)
            J, P = J[pick], P[pick]
        world = P if space == "world" else P @ M[:3, :3].T + M[:3, 3]
        exact = analytic.jacobian(world)
        if jspace == "index":
            exact = exact @ M[:3, :3]
        inside = stencil_inside(topology, P, mode, space)
        err = np.abs(J.astype(np.float64) - exact).max(axis=(1, 2))
        return np.array([[np.max(err[inside], initial=0.0), inside.sum()]])

    shared = dask.delayed(topology)
    blocks = [
        dask.delayed(block_error, pure=True)(J, P, shared)
        for J, P in zip(jac.data.to_delayed().ravel(), pts.rechunk({1: 3}).to_delayed().ravel(), strict=True)
    ]
    return dask.delayed(np.concatenate, pure=True)(blocks)


# steps of a job's graph, by the prefix of their task keys (dask.utils.key_split)
STEPS = {
    "points": (
        "vdbflow-points",
        "from-zarr",
        "open_dataset",
        "original-array",
        "getter",
        "read_csv",
        "read_parquet",
        "rechunk",
    ),
    "routing": ("vdbflow-route",),
    "sampling": ("vdbflow-sample", "vdbflow-reorder", "vdbflow-values", "vdbflow-jacobian", "getitem"),
    "writing": ("store-map", "store", "to_zarr", "to_netcdf", "finalize", "_finalize_store"),
    "analytic check": ("block_error",),
    "advection": ("vdbflow-advect",),
}


def _particle_job(
    cfg: JobConfig, client: Any, sources: dict[str, Any], timings: dict[str, float]
) -> tuple[xr.Dataset, Any]:
    """The lazy result of an ``advect:`` job and its seeds (:mod:`vdbflow.jobs.particles`): the volume is
    opened here for its topology and names (memory-mapped), and by each worker for its tasks."""
    from vdbflow.io.volumes import open_volume
    from vdbflow.jobs.particles import SeriesFiles, particle_dataset

    t0 = time.perf_counter()
    ((name, src),) = sources.items()
    if isinstance(src, SeriesFiles):  # its times were checked by plan_job
        try:
            template = src.open().template
        except (VolumeError, NanoVDBError) as err:
            raise ConfigError(f"volume.series{cfg.where('volume.series')}: {err}") from None
        source: Any = src
    elif isinstance(src, tuple):
        template = open_volume(src[0], src[1])
        source = (str(src[0]), src[1])
    else:
        template = src
        source = client.scatter(src, broadcast=True)  # one copy a worker, sent once
    if not isinstance(template, Volume):
        raise ConfigError(f"advect: expected a grid of values to advect through, got an index grid {name!r}")
    topology = template.topology
    bbox = topology.world_bbox if cfg.points.space == "world" else topology.index_bbox
    point_set = make_points(cfg.points, topology, bbox)
    seeds = point_set.points
    if cfg.points.space == "index":  # particles move in world space
        import dask.array as da

        seeds = da.map_blocks(topology.transform.apply, seeds, dtype=np.float64)
    timings["distribute_s"] = time.perf_counter() - t0
    ds = particle_dataset(cfg, source, template, seeds)
    return ds, point_set


def step_of(key: Any) -> str:
    """The job step a task belongs to (derived quantities and anything else: ``derived``)."""
    from dask.utils import key_split

    prefix = key_split(key)
    for step, prefixes in STEPS.items():
        if any(prefix == p or prefix.startswith(p + "-") for p in prefixes):
            return step
    return "derived"


def worker_time_by_step(records: list[dict]) -> dict[str, float]:
    """Seconds of worker compute per step, from Dask's task stream (``startstops`` of each task)."""
    out = dict.fromkeys((*STEPS, "derived"), 0.0)
    for r in records:
        step = step_of(r["key"])
        out[step] += sum(s["stop"] - s["start"] for s in r.get("startstops", ()) if s.get("action") == "compute")
    return out


class _DaskRichBar:
    """Dask's scheduler progress feed for a set of futures, drawn with a rich progress bar."""

    def __init__(self, futures: list, client: Any, console: Any) -> None:
        from distributed.diagnostics.progressbar import TextProgressBar
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("sampling + writing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        task = progress.add_task("run", total=None)

        class Bar(TextProgressBar):
            def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:  # noqa: A002 - Dask's name
                progress.update(task, total=all, completed=all - remaining)

            def _draw_stop(self, **kwargs: Any) -> None:
                pass

        with progress:
            Bar(futures, scheduler=client.scheduler.address, interval="200ms", start=True)


@dataclass
class JobResult:
    """A finished job: where the result is, and the figures of its summary table."""

    output: Path
    points: int
    partitions: int
    workers: int
    grids: list[str]
    timings: dict[str, float]
    worker_seconds: dict[str, float] = field(default_factory=dict)  # compute time on the workers, by step
    analytic_error: float | None = None
    analytic_points: int | None = None
    dashboard: str | None = None
    steps: int | None = None  # a particle job's integration steps (its points are seeds)

    @property
    def throughput(self) -> float:
        """Points (a particle job: particle-steps) per second of sampling (advection) and writing."""
        return self.points * (self.steps or 1) / max(self.timings["sample_and_write_s"], 1e-9)


_FICLONE = 0x40049409  # Linux ioctl: the destination shares the source's blocks (btrfs, XFS, bcachefs...)


def _snapshot(identity: InputIdentity, final: Path, stop: threading.Event | None = None) -> tuple[Path, str | None]:
    """A private copy of an input next to the output, checked against what the plan saw: a reflink
    (no data copied) where the filesystem allows, else a copy hashed as it is made.

    Returns the copy and its sha256 (None after a reflink, which reads nothing).
    """
    target = snapshot_path(final)
    digest = None
    try:
        with open(identity.path, "rb") as src:
            identity.check("when the job started", os.fstat(src.fileno()))
            with open(target, "xb") as dst:
                try:
                    import fcntl

                    fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
                except (ImportError, OSError):  # no reflinks here (ext4, tmpfs, another filesystem): copy
                    digest = hashlib.sha256()
                    block = bytearray(1 << 24)
                    view = memoryview(block)
                    while n := src.readinto(block):
                        if stop is not None and stop.is_set():
                            raise InputError(f"the snapshot of {identity.path} was stopped: the job ended") from None
                        digest.update(view[:n])
                        dst.write(view[:n])
            identity.check("after it was copied", os.fstat(src.fileno()))
        if (copied := target.stat().st_size) != identity.size:
            raise InputError(
                f"expected a {identity.size:,}-byte copy of {identity.path}, got {copied:,} bytes: "
                "another process changed it while it was copied"
            )
    except OSError as err:
        target.unlink(missing_ok=True)
        raise InputError(
            f"cannot make a private snapshot of {identity.path} at {target}: {err} "
            "(volume.snapshot: false reads the file in place instead)"
        ) from None
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target, None if digest is None else digest.hexdigest()


@contextlib.contextmanager
def _volume_file(
    cfg: JobConfig, plan: JobPlan, final: Path, pool: concurrent.futures.Executor
) -> Iterator[concurrent.futures.Future]:
    """The .nvdb file the job reads, as a future of (path or None, its sha256 if known already): a
    snapshot (unless ``volume.snapshot`` is false) made in ``pool`` while the cluster starts, and
    removed afterwards."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    if cfg.volume.path is None or not cfg.volume.snapshot:
        if cfg.volume.path is not None:
            plan.inputs["volume.path"].check("when the job started")
        done.set_result((cfg.volume.path, None))
        yield done
        return
    stop = threading.Event()

    def make() -> tuple[Path, str | None]:
        t0 = time.perf_counter()
        path, digest = _snapshot(plan.inputs["volume.path"], final, stop)
        log.info(
            "reading %s through a private snapshot %s (%s in %.2f s)",
            cfg.volume.path,
            path,
            "copied" if digest else "reflinked",
            time.perf_counter() - t0,
        )
        return path, digest

    future = pool.submit(make)
    try:
        yield future
    finally:
        stop.set()  # a job that ends early stops the copy
        if future.exception() is None:
            future.result()[0].unlink(missing_ok=True)


def run_job(
    cfg: JobConfig,
    console: Any = None,
    progress: bool = True,
    force: bool = False,
    client: Any = None,
    publishing: threading.Event | None = None,
) -> JobResult:
    """Run a job: start its cluster, distribute the volume, sample, write; return the summary.

    ``publishing`` is set just before the result is moved into place: from then on the job is
    finishing, and a caller that turns signals into exceptions defers them (the CLI), so that a job
    stopped at that moment never says "no result was published" about a result it published.

    ``force`` runs a job larger than ``cfg.limits``.  A ``client`` (``distributed.Client``) runs the
    job on its cluster instead of the one ``cfg.cluster`` describes, and is left open.  Leftovers of
    killed runs at the output are dealt with first (:func:`vdbflow.jobs.output.tidy`), each logged.
    """
    from vdbflow.distribution.volume import distribute

    plan = plan_job(cfg, force)
    if client is not None:
        plan.cluster = f"the given client's cluster (scheduler {client.scheduler.address})"
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    final = cfg.output.path.absolute()
    for line in tidy(final):
        log.warning("%s", line)
    if cfg.output.overwrite == "never" and (final.exists() or final.is_symlink()):
        raise ConfigError(
            f"output.path{cfg.where('output.path')}: {final} holds the earlier result restored "
            "just now, and output.overwrite is 'never'"
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.ExitStack() as after_cluster,  # exits last: after the cluster is closed
        concurrent.futures.ThreadPoolExecutor(1) as hasher,
        _volume_file(cfg, plan, final, hasher) as reading,
        contextlib.nullcontext(client) if client is not None else open_cluster(cfg.cluster) as client,
    ):
        timings["cluster_s"] = time.perf_counter() - t_start
        dashboard = client.dashboard_link if cfg.cluster.dashboard else None
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        log.info("cluster: %s; %d worker(s)%s", plan.cluster, workers, f"; dashboard {dashboard}" if dashboard else "")
        if console is not None and dashboard:
            console.print(f"Dask dashboard: {dashboard}")
        t0 = time.perf_counter()
        volume_file, volume_sha256 = reading.result()  # the snapshot, made while the cluster started
        sources, analytic = _build_volumes(cfg, [g.name for g in plan.grids])
        if volume_file is not None:
            sources = {name: (volume_file, src[1]) for name, src in sources.items()}
        hashes: dict[Path, concurrent.futures.Future] = {}
        for src in sources.values():
            if isinstance(src, tuple) and Path(src[0]) not in hashes:
                hashes[Path(src[0])] = hasher.submit(
                    lambda p: volume_sha256 if p == volume_file and volume_sha256 else InputIdentity.of(p).sha256(),
                    Path(src[0]),
                )
        checksum = {name: hashes[Path(src[0])] for name, src in sources.items() if isinstance(src, tuple)}
        if cfg.volume.series is not None:  # each file of the series
            checksum = {i.path: hasher.submit(i.sha256) for src in sources.values() for i in src.identities}
        dvols = {}
        try:
            if cfg.advect is not None:  # particles: one task a chunk of seeds, through the whole volume
                ds, point_set = _particle_job(cfg, client, sources, timings)
                partitions, errors = 0, None
            else:  # samples: the volumes partitioned across the workers
                for name, src in sources.items():
                    if isinstance(src, tuple):
                        dvols[name] = distribute(src[0], client, cfg.partitions, plan.halo, grid=src[1])
                    else:
                        dvols[name] = distribute(src, client, cfg.partitions, plan.halo)
                first = next(iter(dvols.values()))
                partitions = len(first.partitions)
                timings["distribute_s"] = time.perf_counter() - t0
                log.info(
                    "distributed %d grid(s) over %d partition(s) in %.2f s",
                    len(dvols),
                    partitions,
                    timings["distribute_s"],
                )
                topology = first.topology  # random points are drawn inside the first grid
                bbox = topology.world_bbox if cfg.points.space == "world" else topology.index_bbox
                point_set = make_points(cfg.points, topology, bbox)
                pts = point_set.points
                parts, errors = [], None
                for name, dvol in dvols.items():
                    prefix = "" if len(dvols) == 1 else f"{name}_"
                    ds_g, jac = _grid_dataset(dvol, pts, cfg, prefix, dvol.topology)
                    parts.append(ds_g)
                    if analytic is not None and jac is not None:
                        errors = _analytic_error(jac, pts, analytic, cfg, dvol.template.index_to_world, dvol.topology)
                ds = xr.merge(parts, compat="override", join="override", combine_attrs="override")
            chunk = cfg.output.chunk or cfg.points.chunk
            dim = "point" if cfg.advect is None else "particle"
            ds = (
                ds.chunk({dim: chunk})
                if point_set.shape is None
                else _shaped(ds, point_set.shape, point_set.dims, chunk, dim)
            )
            ds.attrs.update(point_set.attrs)
            ds.attrs["source"] = f"vdbflow {_versions()['vdbflow']}"
            ds.attrs.update(
                {
                    "title": "vdbflow run result",
                    "vdbflow_config": dump_config(cfg),
                    "versions": _versions(),
                    "grids": [g.name for g in plan.grids],
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                }
            )
            target = partial_path(final)
            log.info("writing %d points to %s (published at %s when complete)", point_set.count, target, final)
            t0 = time.perf_counter()
            futures: list = []
            write = None
            try:
                write = lazy_write(ds, cfg.output, target)
                from distributed import get_task_stream

                with get_task_stream(client) as stream:
                    futures = client.compute([write] + ([errors] if errors is not None else []), optimize_graph=False)
                    if progress and console is not None and console.is_terminal:
                        _DaskRichBar(futures, client, console)
                    results = client.gather(futures)
                timings["sample_and_write_s"] = time.perf_counter() - t0
                result = JobResult(
                    final,
                    point_set.count,
                    partitions,
                    workers,
                    list(sources),
                    timings,
                    worker_time_by_step(stream.data),
                    dashboard=dashboard,
                    steps=None if cfg.advect is None else int(ds.attrs["steps"]),
                )
                provenance: dict[str, Any] = {
                    "input_sha256": {k: f.result() for k, f in checksum.items()},
                    "timings_s": {},
                }
                if errors is not None:
                    e = np.asarray(results[1])
                    result.analytic_points = int(e[:, 1].sum())
                    result.analytic_error = float(e[:, 0].max(initial=0.0)) if result.analytic_points else None
                    provenance["analytic_jacobian_max_error"] = result.analytic_error
                    provenance["analytic_interior_points"] = result.analytic_points
                if analytic is not None and cfg.volume.synthetic.write is None:
                    provenance["input_sha256"] = "synthetic (generated in memory; see vdbflow_config)"
                timings["total_s"] = time.perf_counter() - t_start
                provenance["timings_s"] = {k: round(v, 4) for k, v in timings.items()}
                provenance["worker_seconds_by_step"] = {k: round(v, 4) for k, v in result.worker_seconds.items()}
                add_attrs(target, cfg.output, provenance)
                if volume_file is not None and not cfg.volume.snapshot:
                    plan.inputs["volume.path"].check("when the job finished")
                if publishing is not None:
                    publishing.set()
                publish(target, final, cfg.output.overwrite)
            except OutputError:
                raise  # the complete result was kept at an unpublished path, which the message names
            except BaseException:
                after_cluster.callback(discard, target)  # again once an embedded cluster's workers are gone
                try:
                    stop_writing(client, futures, write)
                finally:  # also when a signal interrupts the wait
                    discard(target)
                raise
        finally:
            for dvol in dvols.values():
                dvol.close()
    log.info("published %s", final)
    return result


STOP_WAIT_S = 30.0  # how long a failed job waits for its tasks still running before it removes its partial


def _executing_keys(dask_worker: Any) -> list:
    """The keys of the tasks a worker is executing now (run on each worker by ``client.run``)."""
    return [ts.key for ts in dask_worker.state.executing]


def stop_writing(client: Any, futures: list, write: Any, wait_s: float = STOP_WAIT_S) -> None:
    """Cancel a failed job's tasks and wait (up to ``wait_s``) until none of them still runs on a
    worker, so that no chunk is written into the partial store after it is removed.  Cancelling only
    tells the scheduler; a task already running goes on in its worker's thread until it returns."""
    if not futures and write is None:
        return
    keys = set(write.__dask_graph__()) if write is not None else set()
    keys.update(f.key for f in futures)
    try:
        client.cancel(futures, force=True)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            running = client.run(_executing_keys, on_error="ignore")
            if not any(key in keys for found in running.values() if isinstance(found, list) for key in found):
                return
            time.sleep(0.05)
        log.warning("tasks of the failed job still ran after %.0f s; its partial store is removed anyway", wait_s)
    except Exception as err:  # a cluster already gone: nothing of it runs any more
        log.debug("stopping the failed job's tasks: %s", err)


class JobError(VdbflowError, RuntimeError):
    """A job failed while it ran (a task, a worker or a library); no result was published."""


def run(
    config: str | os.PathLike | Mapping[str, Any] | JobConfig,
    client: Any = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    force: bool = False,
    **settings: Any,
) -> JobResult:
    """Run a batch job, as ``vdbflow run`` does, from Python (a notebook, Airflow, cron).

    The job samples its volumes at its points and publishes the outputs it asks for (values,
    Jacobians, derived quantities) at its output path, as Zarr or NetCDF, once complete.  Keys of
    the config are overridden by dotted path, in ``overrides`` or as keywords, with ``__`` for the
    dot where the path is not a Python name::

        vdbflow.run("job.yaml", overrides={"points.count": 1000})
        vdbflow.run("job.yaml", **{"output.path": "x.zarr"})
        vdbflow.run("job.yaml", output__path="x.zarr", points__count=1000)

    Parameters
    ----------
    config : str, os.PathLike, mapping or JobConfig
        A YAML path, a mapping of sections or a :class:`~vdbflow.jobs.config.JobConfig`.
    client : distributed.Client, optional
        Runs the job on its cluster instead of starting the config's; it stays open.
    overrides : mapping of str to object, optional
        Values by dotted key path, e.g. ``{"points.count": 1000}``.
    force : bool, default False
        Run a job beyond the config's ``limits``.
    **settings
        More overrides, ``__`` standing for the dot (``output__path="x.zarr"``); they win over
        ``overrides``.

    Returns
    -------
    JobResult
        The ``output`` path, point count, partitions, workers, grids, timings and, for synthetic
        fields, the analytic error.

    Raises
    ------
    ConfigError
        A bad config or inputs (nothing ran: the CLI's exit code 2).
    InputError
        An input changed since the plan.
    JobError
        Anything that failed while the job ran, with the original error as ``__cause__``.
    """
    from vdbflow.jobs.config import load_config

    values = {**(overrides or {}), **{key.replace("__", "."): value for key, value in settings.items()}}
    if isinstance(config, JobConfig):
        cfg = load_config(data=config.model_dump(mode="json", exclude_unset=True), values=values) if values else config
    elif isinstance(config, Mapping):
        cfg = load_config(data=config, values=values)
    elif isinstance(config, (str, os.PathLike)):
        cfg = load_config(config, values=values)
    else:
        raise ConfigError(f"expected a config path, mapping or JobConfig, got {type(config).__name__}")
    try:
        return run_job(cfg, progress=False, force=force, client=client)
    except VdbflowError:
        raise
    except Exception as err:  # a worker's or a library's failure
        raise JobError(f"the job failed: {type(err).__name__}: {err}; no result was published") from err
