"""How a job samples: four executors, each building the Dataset of a job's samples on its cluster.

- :func:`particles`: an ``advect:`` job, one task a chunk of seeds through the whole volume;
- :func:`one_pass`: every worker reads the whole (small) volume, one task a chunk of points samples,
  derives, checks and tallies in one pass (:mod:`vdbflow.jobs.chunks`);
- :func:`partitioned`: the volume partitioned across the workers, points routed to their partitions
  (:mod:`vdbflow.distribution`);
- :func:`reduced`: a ``reduce:`` job: statistics computed in the kernels' pass, one partial a chunk of
  points, merged in a fixed tree on the workers (:mod:`vdbflow.ops.chunk_graph`); the Dataset is a few
  kilobytes.

Each returns a :class:`Sampled`: the lazy Dataset and the lazy figures the job summary reads (analytic
errors, point tally, the one-pass path's own timing), all computed with the job's write.
:func:`executor_for` picks one for a config; :func:`vdbflow.jobs.runner.run_job` computes and writes what it
returns.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import dask
import numpy as np
import xarray as xr

from vdbflow.core.volume import Volume
from vdbflow.distribution.volume import distribute
from vdbflow.errors import NanoVDBError, OpenVDBError, OutputError, SamplingError, VolumeError
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.location import size_of
from vdbflow.jobs import chunks
from vdbflow.jobs.chunks import (
    TALLY_KEY,
    AnalyticCheck,
    analytic_check,
    analytic_error,
    chunked_dataset,
    grid_request,
    grid_variables,
    opened,
    point_tally,
    replicable,
    sum_rows,
)
from vdbflow.jobs.config.model import JobConfig
from vdbflow.jobs.estimates import series_cache
from vdbflow.jobs.particles import SeriesFiles, particle_dataset, seed_chunk
from vdbflow.jobs.plan import JobPlan
from vdbflow.jobs.points import make_points
from vdbflow.ops.chunk_graph import map_chunks, reduce_chunks
from vdbflow.ops.coverage import counts_tiles, stencil_inside_flags
from vdbflow.ops.reductions import Conditional, Histogram, Statistics, edges_of, merge, quantity
from vdbflow.ops.statistics import chunk_partial, lazy_dataset, lazy_partial, statistics_request

log = logging.getLogger("vdbflow.run")
REDUCE_KEY = "vdbflow-reduce"  # task-key prefix of a reduce: job's chunk tasks (jobs.progress: "reduction")
ROUTED_ANALYTIC_KEY = "vdbflow-analytic-routed"  # the partitioned path's analytic errors, a task a chunk


@dataclass
class Sampled:
    """What an executor built: the lazy samples and the lazy figures of the job's summary."""

    ds: xr.Dataset
    point_set: Any  # vdbflow.jobs.points.PointSet
    partitions: int = 0
    errors: Any = None  # lazy (chunks, 2): max analytic error and interior points of each chunk
    checked_output: str | None = None  # what the analytic check compared
    tally: Any = None  # lazy (3,): non-finite points, points checked against the data's edge, outside it
    chunk_seconds: Any = None  # lazy: the one-pass chunk tasks' time by phase
    volumes: list = field(default_factory=list)  # distributed volumes to close when the job ends
    stopped: Any = None  # lazy (2,): particles that left the data (status 1) and that met a non-finite value (2)


def executor_for(cfg: JobConfig, client: Any, sources: dict[str, Any]) -> Callable[..., Sampled]:
    """The executor of a job: particles, statistics (``reduce:``), one pass (the volumes replicable to every
    worker), or partitioned (``partitions:`` set, or volumes too large to replicate)."""
    if cfg.advect is not None:
        return particles
    if cfg.reduce is not None:
        return reduced
    if cfg.partitions is None and _replicable(client, sources):
        return one_pass
    return partitioned


def _replicable(client: Any, sources: dict[str, Any]) -> bool:
    """Whether every worker reads the job's whole volume (:func:`vdbflow.jobs.chunks.replicable`): its
    files' sizes (or the in-memory volumes' bytes) against the smallest worker memory limit."""
    size = sum(size_of(s.path) if isinstance(s, GridRef) else s.nbytes for s in sources.values())
    return replicable(size, worker_memory(client))


def worker_memory(client: Any) -> int:
    """The smallest memory limit of the cluster's workers in bytes (0: none, or not known)."""
    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info(n_workers=-1)["workers"].values()]
    return min(limits, default=0)


def particles(
    cfg: JobConfig, client: Any, sources: dict[str, Any], analytic: Any, plan: JobPlan, timings: dict[str, float]
) -> Sampled:
    """An ``advect:`` job: trajectories of seeds, one task a chunk of seeds (:mod:`vdbflow.jobs.particles`)."""
    import dask.array as da

    ds, point_set = _particle_job(cfg, client, sources, timings, plan.series_steps)
    status = ds["status"].data  # the written variable's own tasks: computed once, with the write
    return Sampled(ds, point_set, stopped=da.stack([(status == 1).sum(), (status == 2).sum()]))


def job_statistics(cfg: JobConfig, template: Volume) -> Any:
    """The :class:`~vdbflow.ops.reductions.Statistics` of a config's ``reduce`` section for a grid."""
    js = cfg.sampling.jacobian_space or cfg.points.space
    spec = cfg.reduce
    with cfg.about("reduce", SamplingError):
        q = lambda text: quantity(text, template, js)  # noqa: E731
        histograms = [
            Histogram(
                tuple(q(n) for n in h.of),
                tuple(edges_of(b, r, n) for n, b, r in zip(h.of, h.bin_counts(), h.range, strict=True)),
                None if h.weights is None else q(h.weights),
            )
            for h in spec.histograms
        ]
        conditionals = [
            Conditional(q(of), q(c.given), edges_of(c.bins, c.range, c.given)) for c in spec.conditional for of in c.of
        ]
        stats = Statistics(histograms, [q(n) for n in spec.moments], conditionals)
        stats.layout()  # the kernels' limits
    return stats


def reduce_chunk(source: Any, points: Any, spec: bytes, edges: Any, empty: Any, request: Any) -> Any:
    """One chunk of points reduced on a worker (the grid opened once a worker, as the one-pass tasks do)."""
    return chunk_partial(opened(source), points, spec, edges, empty, request)


def reduced(
    cfg: JobConfig, client: Any, sources: dict[str, Any], analytic: Any, plan: JobPlan, timings: dict[str, float]
) -> Sampled:
    """A ``reduce:`` job: the statistics of the first grid's samples at the points, reduced chunk by chunk where
    they are sampled (a volume every worker reads whole: in the kernels' pass; a partitioned one: routed, then
    reduced by chunk) and merged in a fixed tree; the result is the small lazy Dataset of
    :func:`vdbflow.ops.statistics.lazy_dataset`, computed with the job's write."""
    t0 = time.perf_counter()
    ((name, src),) = list(sources.items())[:1]
    template = chunks.template(src)
    stats = job_statistics(cfg, template)
    request = statistics_request(
        stats, cfg.sampling.mode, cfg.points.space, cfg.sampling.jacobian_space, cfg.sampling.device
    )
    spec, edges, empty, where = stats.layout()
    topology = template.topology
    point_set = make_points(cfg.points, topology, topology.data_bounds(cfg.points.space, inner=True), cfg.sampling.mode)
    volumes = []
    if cfg.partitions is None and _replicable(client, {name: src}):
        on_workers = chunks.on_workers(src, client)
        parts = map_chunks(reduce_chunk, on_workers, point_set.points, spec, edges, empty, request, name=REDUCE_KEY)
        partial, partitions = reduce_chunks(parts, functools.partial(merge, spec, edges)), 0
    else:
        volumes.append(distribute(src, client, cfg.partitions, plan.halo))
        try:
            partial = lazy_partial(volumes[0], point_set.points, stats, request, name=REDUCE_KEY)
        except BaseException:  # the job closes the volumes of a Sampled; this one never reached it
            volumes[0].close()
            raise
        partitions = len(volumes[0].partitions)
    timings["distribute_s"] = time.perf_counter() - t0
    ds = lazy_dataset(stats, partial, where)
    ds.attrs.update({"reduced_grid": name, "reduced_points": int(point_set.count)})
    return Sampled(ds, point_set, partitions, volumes=volumes)


def one_pass(
    cfg: JobConfig, client: Any, sources: dict[str, Any], analytic: Any, plan: JobPlan, timings: dict[str, float]
) -> Sampled:
    """Samples, one pass per chunk of points: every worker reads the whole (small) volume."""
    t0 = time.perf_counter()
    # names, units and topology, memory-mapped here (not cached: the snapshot's mapping ends with the job)
    templates = {n: chunks.template(s) for n, s in sources.items()}
    on_workers = {n: chunks.on_workers(s, client) for n, s in sources.items()}
    topology = next(iter(templates.values())).topology  # random points are drawn inside the first grid
    bbox = topology.data_bounds(cfg.points.space, inner=True)  # a lattice's default: the voxel centres
    point_set = make_points(cfg.points, topology, bbox, cfg.sampling.mode)
    timings["distribute_s"] = time.perf_counter() - t0
    ds, errors, seconds, checked, tally = chunked_dataset(cfg, templates, on_workers, point_set, analytic)
    log.info("every worker reads the whole volume: one task a chunk of points")
    return Sampled(ds, point_set, 0, errors, checked, tally, seconds)


def partitioned(
    cfg: JobConfig, client: Any, sources: dict[str, Any], analytic: Any, plan: JobPlan, timings: dict[str, float]
) -> Sampled:
    """Samples of volumes partitioned across the workers, the points routed to their partitions."""
    t0 = time.perf_counter()
    dvols: dict[str, Any] = {}
    try:
        for name, src in sources.items():
            dvols[name] = distribute(src, client, cfg.partitions, plan.halo)
        timings["distribute_s"] = time.perf_counter() - t0
        return _partitioned_samples(cfg, dvols, analytic, timings)
    except BaseException:  # the job closes the volumes of a Sampled; these never reached it
        for dvol in dvols.values():
            dvol.close()
        raise


def _partitioned_samples(cfg: JobConfig, dvols: dict[str, Any], analytic: Any, timings: dict[str, float]) -> Sampled:
    first = next(iter(dvols.values()))
    log.info(
        "distributed %d grid(s) over %d partition(s) in %.2f s",
        len(dvols),
        len(first.partitions),
        timings["distribute_s"],
    )
    topology = first.topology  # random points are drawn inside the first grid
    bbox = topology.data_bounds(cfg.points.space, inner=True)  # a lattice's default: the voxel centres
    point_set = make_points(cfg.points, topology, bbox, cfg.sampling.mode)
    pts = point_set.points
    parts, errors, checked_output = [], None, None
    for name, dvol in dvols.items():
        prefix = "" if len(dvols) == 1 else f"{name}_"
        ds_g, checked = _grid_dataset(dvol, pts, cfg, prefix)
        parts.append(ds_g)
        if analytic is not None and checked is not None:
            checked_output = "jacobian" if checked.endswith("_jacobian") else checked[len(prefix) :]
            check = analytic_check(cfg, analytic, checked_output, dvol.template.index_to_world)
            errors = _analytic_error(ds_g[checked], check, pts, dvol.topology)
    ds = xr.merge(parts, compat="override", join="override", combine_attrs="override")
    tally = _tally(pts, topology, cfg)
    return Sampled(ds, point_set, len(first.partitions), errors, checked_output, tally, None, list(dvols.values()))


def _grid_dataset(dvol: Any, pts: Any, cfg: JobConfig, prefix: str) -> tuple[xr.Dataset, str | None]:
    """The sampled variables of one partitioned grid (:func:`~vdbflow.jobs.chunks.grid_variables`)."""
    request = grid_request(cfg)
    inside = None
    if "inside" in cfg.sampling.outputs:  # lazy, one task a chunk of points
        inside = stencil_inside_flags(dvol.topology, pts, cfg.sampling.mode, cfg.points.space, counts_tiles(dvol))
    return grid_variables(dvol.template, request, pts, dvol.sample_arrays(request, pts), cfg, prefix, inside)


def shaped(ds: xr.Dataset, shape: tuple[int, ...], dims: tuple[str, ...], chunk: int, dim: str = "point") -> xr.Dataset:
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


def _tally(pts: Any, topology: Any, cfg: JobConfig) -> Any:
    """Lazy (3,): :func:`~vdbflow.jobs.chunks.point_tally` of the partitioned path, summed over its chunks."""
    token = dask.base.tokenize(pts.name, cfg.sampling.mode, cfg.points.space, id(topology))
    args = (point_tally, pts, dask.delayed(topology), cfg.sampling.mode, cfg.points.space)
    return reduce_chunks(map_chunks(*args, name=TALLY_KEY, token=token), None, sum_rows)


def _analytic_error(checked: xr.DataArray, check: AnalyticCheck, pts: Any, topology: Any) -> Any:
    """Lazy (chunks, 2) array: :func:`~vdbflow.jobs.chunks.analytic_error` of each chunk of the
    partitioned path (one task a chunk, beside the sampling)."""
    # not ANALYTIC_KEY: the one-pass chunks' figures, which a resumed job reads, are named by that
    parts = map_chunks(analytic_error, check, checked.data, pts, dask.delayed(topology), name=ROUTED_ANALYTIC_KEY)
    return reduce_chunks(parts, None, np.concatenate)


def _particle_job(
    cfg: JobConfig,
    client: Any,
    sources: dict[str, Any],
    timings: dict[str, float],
    steps: tuple[tuple[float, int], ...],
) -> tuple[xr.Dataset, Any]:
    """The lazy result of an ``advect:`` job and its seeds (:mod:`vdbflow.jobs.particles`): the volume is
    opened here for its topology and names (memory-mapped), and by each worker for its tasks; ``steps``, a
    series' (time, file bytes) as its plan read them (``JobPlan.series_steps``)."""
    t0 = time.perf_counter()
    ((name, src),) = sources.items()
    if isinstance(src, SeriesFiles):  # its times were checked by plan_job
        with cfg.about("volume.series", VolumeError, NanoVDBError, OpenVDBError):
            template = src.open().template
        a = cfg.advect
        assert a is not None  # a series job is a particle job
        # volume.series.cache "auto": the workers' own memory limit decides (estimates.series_cache)
        source: Any = replace(src, cache=series_cache(steps, a.t0, a.t1, a.time, src.cache, worker_memory(client)))
    else:
        template, source = chunks.template(src), chunks.on_workers(src, client)  # a Volume: once a worker
    with cfg.about("advect", VolumeError):
        if not isinstance(template, Volume):
            raise VolumeError(f"expected a grid of values to advect through, got an index grid {name!r}")
    topology = template.topology
    bbox = topology.data_bounds(cfg.points.space, inner=True)  # a lattice's default: the voxel centres
    point_set = make_points(cfg.points, topology, bbox, cfg.sampling.mode)
    seeds = point_set.points
    if cfg.points.space == "index":  # particles move in world space
        import dask.array as da

        seeds = da.map_blocks(topology.transform.apply, seeds, dtype=np.float64)
    workers = len(client.scheduler_info(n_workers=-1)["workers"])
    row = int(np.prod(point_set.shape[1:])) if point_set.shape else 1  # a plane's or lattice's row
    seeds = seeds.rechunk({0: seed_chunk(point_set.count, cfg.points.chunk, workers, row)})  # a task a worker
    timings["distribute_s"] = time.perf_counter() - t0
    ds = particle_dataset(cfg, source, template, seeds)
    return ds, point_set
