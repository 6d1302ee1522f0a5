"""Planning a ``vdbflow run`` job from headers alone (it backs ``--dry-run``): :class:`JobPlan` with its
grids (:class:`GridPlan`), point count, result size and time estimates, the ``limits`` it is checked
against, and :func:`plan_job`, which makes it; ``human_bytes`` and ``human_seconds`` word its figures.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vdbflow import synthetic
from vdbflow.core import kernel
from vdbflow.core import outputs as output_table
from vdbflow.core.value_types import VALUE_TYPES, ValueType, value_type_for
from vdbflow.distribution.fit import RESERVE, TOPOLOGY_BYTES_PER_LEAF, memory_fraction
from vdbflow.errors import NanoVDBError, OpenVDBError, PointsError, SamplingError, StorageError, VolumeError
from vdbflow.io.location import is_url
from vdbflow.io.volumes import list_grids
from vdbflow.jobs.chunks import grid_request, replicable
from vdbflow.jobs.clusters import (
    MissingExtraError,
    describe_cluster,
    local_workers,
    slurm_job_script,
    submit_command_missing,
    worker_memory_limit,
)
from vdbflow.jobs.config.checks import free_bytes, input_problems
from vdbflow.jobs.config.model import (
    DERIVED,
    SECOND,
    ConfigError,
    FilePoints,
    JobConfig,
    LocalClusterSpec,
    SlurmClusterSpec,
    bytes_of,
)
from vdbflow.jobs.estimates import (  # noqa: F401 - REFERENCE_POINTS_PER_S, human_*: re-exported for callers
    REFERENCE_POINTS_PER_S,
    REFERENCE_SECONDS_PER_CHUNK,
    human_bytes,
    human_seconds,
    mode_factor,
    particle_estimate,
    series_cache,
    series_cache_advice,
    series_opened,
)
from vdbflow.jobs.inputs import InputIdentity
from vdbflow.jobs.particles import seed_chunk, series_steps
from vdbflow.jobs.points import file_point_count, voxel_point_count
from vdbflow.jobs.publish.checks import shard_problem
from vdbflow.jobs.publish.output import tidy
from vdbflow.jobs.publish.remote import exists
from vdbflow.ops.sampling import STENCIL_RADIUS
from vdbflow.temporal.particles import step_plan
from vdbflow.temporal.steps import step_count

log = logging.getLogger("vdbflow.plan")


@dataclass
class GridPlan:
    """A grid the job samples: ``grid_type`` as its file names it (``"Vec3f"``, ``"Fp16"``, ...) and
    the :class:`~vdbflow.ValueType` vdbflow reads it as."""

    name: str
    grid_type: str
    value_type: ValueType
    leaves: int
    active_voxels: int
    source: str

    @property
    def components(self) -> int:
        return self.value_type.components


# a chunk's working set on a worker, for the plan: its rows (bytes_per_point each) are held more than
# once - the chunk task's result and the store task's encoded (or, for a larger output.chunk,
# concatenated) copy: a worker running the demo's outputs (88 bytes a point) in chunks of 1M and 3M points
# peaked at 2.3 times the chunk's result above its idle memory (2026-12-02, MemorySampler); 3 leaves room
# for the worker's own ~160 MB.  Beyond the worker's memory limit Dask's nanny kills the worker
# (KilledWorker after three of them), beyond half of it Dask spills and pauses it
CHUNK_WORKING_SET_FACTOR = 3
CHUNK_MEMORY_WARN_FRACTION = 0.5

# a reduce: job's working set on a worker (its chunks' results are statistics partials of a fixed size, not
# rows): each running chunk task holds the empty partial it is given, the partial it makes and the kernels'
# accumulators (reduce.h ReduceThread: a copy of the counts, and of the per-bin sums with a byte of marks;
# one OpenMP thread a task under Dask's nanny) - 2.07 partials above the given one, measured with ru_maxrss
# for two weighted 2048^2 and 4096^2 histograms (2026-12-06) - and its points (float64, and their copy
# prepared for the kernels); two partials wait for or take part in a merge beside them
REDUCE_PARTIALS_A_TASK = 3
REDUCE_PARTIALS_MERGING = 2
REDUCE_BYTES_A_POINT = 2 * 3 * 8


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
    chunk_bytes_per_point: int = 0  # what a chunk holds a point: every array it computes (0: bytes_per_point)
    series_steps: tuple[tuple[float, int], ...] = ()  # a series job's steps: (time, file bytes) each

    @property
    def held_per_point(self) -> int:
        """Bytes a point that one chunk holds on a worker once computed: every output and intermediate
        (for ``[laplacian]`` the value, Jacobian and Hessian it is computed from), at least the result's."""
        return max(self.chunk_bytes_per_point, self.bytes_per_point)

    @property
    def output_bytes(self) -> int | None:
        """The result's size before compression (None when the point count is known only when read)."""
        return None if self.point_count is None else self.point_count * self.bytes_per_point

    @property
    def points_per_s(self) -> float:
        """The rate the estimate assumes: ``REFERENCE_POINTS_PER_S`` (linear) over :func:`mode_factor`."""
        sampling = self.config.sampling
        return REFERENCE_POINTS_PER_S / mode_factor(sampling.mode, bool(set(sampling.outputs) & set(SECOND)))

    @property
    def seconds(self) -> float | None:
        """About how long sampling and writing take at :attr:`points_per_s` and
        ``REFERENCE_SECONDS_PER_CHUNK`` (the smaller of points.chunk and output.chunk); a particle job's
        advection and writing, :meth:`particle_estimate`."""
        if self.point_count is None:
            return None
        if self.config.advect is not None:  # particles: :func:`particle_estimate`
            return self.particle_estimate()[0]
        chunks = -(-self.point_count // self.config.chunk[0])
        return self.point_count / self.points_per_s + chunks * REFERENCE_SECONDS_PER_CHUNK

    def particle_estimate(self) -> tuple[float, str]:
        """An ``advect:`` job's time (seconds, and in words) for its seeds' steps on its workers' threads."""
        cfg, a = self.config, self.config.advect
        assert a is not None and self.point_count is not None
        workers = max(1, job_workers(cfg.cluster) or 1)
        threads = workers * _worker_threads(cfg.cluster)
        time = a.time if cfg.volume.series is not None else None
        opened, advice, series = (0, 0), "", cfg.volume.series
        if series is not None and self.series_steps:
            tasks = -(-self.point_count // seed_chunk(self.point_count, cfg.points.chunk, workers))
            limit = worker_memory_limit(cfg.cluster)
            memory = None if limit is None else limit[0]  # None: the job's executor knows it when it starts
            cache = series_cache(self.series_steps, a.t0, a.t1, a.time, series.cache, memory)
            opened = series_opened(self.series_steps, a.t0, a.t1, a.time, cache, tasks, workers)
            if tasks > workers:
                advice = series_cache_advice(self.series_steps, a.t0, a.t1, a.time, series.cache, memory)
        steps = self.point_count * step_count(a.t0, a.t1, a.dt)
        seconds, words = particle_estimate(steps, threads, cfg.sampling.mode, a.method, time, opened)
        return seconds, words + advice

    def chunk_working_set(self) -> tuple[int, int, str]:
        """About how many bytes one chunk needs on a worker (``CHUNK_WORKING_SET_FACTOR`` times its
        result), its points, and the key that sets them (the larger of points.chunk and output.chunk)."""
        cfg = self.config
        points, key = cfg.points.chunk, "points.chunk"
        if cfg.output.chunk is not None and cfg.output.chunk > points:
            points, key = cfg.output.chunk, "output.chunk"
        if self.point_count is not None:
            points = max(1, min(points, self.point_count))
        return points * self.held_per_point * CHUNK_WORKING_SET_FACTOR, points, key

    def chunk_that_fits(self, limit: int) -> int:
        """The most points a chunk may have for its working set to take half of ``limit`` bytes."""
        per_point = max(1, self.held_per_point * CHUNK_WORKING_SET_FACTOR)
        return max(1, int(limit * CHUNK_MEMORY_WARN_FRACTION) // per_point)


def _memory_verdict(what: str, advice: str, need: int, limit: int, source: str) -> tuple[str | None, str | None]:
    """(why it cannot fit, None) past ``limit``, else (None, the warning that it takes more than half of it)."""
    if need > limit:
        return (
            f"{what}, more than a worker's memory limit ({human_bytes(limit)}: {source}), so the worker would "
            f"be killed; {advice}",
            None,
        )
    return None, (
        f"{what}, more than half of a worker's memory limit ({human_bytes(limit)}: {source}): Dask spills "
        f"to disk and pauses the worker beyond 60-80% of it; {advice}"
    )


def chunk_memory(plan: JobPlan, limit: int, source: str) -> tuple[str | None, str | None]:
    """One chunk's working set against a worker's memory ``limit`` (bytes; ``source`` says where it
    comes from): (why it cannot fit, or None; a warning that it takes more than half, or None).  A
    ``reduce:`` job's chunks make statistics partials instead (:func:`reduce_memory`)."""
    cfg = plan.config
    if cfg.reduce is not None:
        return reduce_memory(plan, limit, source)
    need, points, key = plan.chunk_working_set()
    if need <= limit * CHUNK_MEMORY_WARN_FRACTION:
        return None, None
    fit = plan.chunk_that_fits(limit)
    more = "cluster.memory" if isinstance(cfg.cluster, SlurmClusterSpec) else "cluster.memory_limit"
    what = (
        f"{key}{cfg.where(key)}: one chunk of {points:,} points needs about {human_bytes(need)} on a worker "
        f"({plan.held_per_point} bytes a {'particle' if cfg.advect is not None else 'point'} of results and "
        f"what they are computed from, x{CHUNK_WORKING_SET_FACTOR} for its copies while it is computed and written)"
    )
    advice = f"a {key} of at most {fit:,} points fits in half of it, or give the workers more memory ({more})"
    return _memory_verdict(what, advice, need, limit, source)


def job_workers(cluster: object) -> int | None:
    """How many workers the job's own cluster has, as far as its config says (None: not known)."""
    if isinstance(cluster, LocalClusterSpec):
        return local_workers(cluster)
    if isinstance(cluster, SlurmClusterSpec):
        return cluster.processes * cluster.jobs
    return None


def partition_memory(plan: JobPlan, limit: int, source: str) -> str | None:
    """Why the job's partitions cannot fit its workers (``limit`` bytes each; ``source`` says where it comes
    from), or None: a partitioned volume's share per worker (its leaves over the workers, a tenth more for
    the halos) and :data:`vdbflow.distribution.fit.RESERVE` against Dask's pause threshold of ``limit``.
    Only partitioned jobs: a volume small enough for every worker to read whole is not partitioned."""
    cfg = plan.config
    workers = job_workers(cfg.cluster)
    if not workers or limit <= 0 or not plan.grids or cfg.volume.path is None:
        return None
    leaf = sum(
        g.leaves * (512 * g.components * g.value_type.dtype.itemsize + TOPOLOGY_BYTES_PER_LEAF) for g in plan.grids
    )
    if cfg.partitions is None and replicable(leaf, limit):
        return None
    partitions = cfg.partitions or workers
    per_worker = -(-partitions // workers) * leaf / partitions * 1.1
    available = limit * memory_fraction() - RESERVE
    if per_worker <= available:
        return None
    where = f"partitions{cfg.where('partitions')}" if cfg.partitions else "the volume's partitions (one per worker)"
    return (
        f"{where}: each of the {workers} worker(s) would hold about {human_bytes(per_worker)} of the volume's "
        f"{human_bytes(leaf)} (its own leaves and halos), but a worker's memory limit ({human_bytes(limit)}: {source}) "
        f"leaves {human_bytes(max(0, available))} for them (x {memory_fraction():g}, Dask's pause threshold, less "
        f"{human_bytes(RESERVE)} for the worker and its chunks in flight); "
        + (
            f"use more workers (about {max(workers + 1, -(-int(leaf * 1.1) // int(available)))} of this size) or "
            "give them more memory"
            if available > 0
            else "give the workers more memory"
        )
    )


def reduce_partials(cfg: JobConfig) -> list[tuple[str, int, str]]:
    """The statistics of a ``reduce:`` section item by item: (its key, e.g. ``reduce.histograms[1]``, the
    bytes it takes in one partial: int64 counts and float64 sums, what it is), laid out as
    :meth:`vdbflow.ops.reductions.Statistics.layout` lays them out."""
    spec, items = cfg.reduce, []
    for i, h in enumerate(spec.histograms if spec is not None else []):
        bins = h.bin_counts()
        size = int(np.prod(bins, dtype=object))  # Python integers
        weighted = h.weights is not None
        items.append(
            (
                f"reduce.histograms[{i}]",
                8 * (size + 2) + 8 * size * weighted,
                f"{' x '.join(f'{b:,}' for b in bins)} bins{', weighted' if weighted else ''}",
            )
        )
    for i, c in enumerate(spec.conditional if spec is not None else []):
        items.append((f"reduce.conditional[{i}]", len(c.of) * (8 * (c.bins + 2) + 3 * 8 * c.bins), f"{c.bins:,} bins"))
    if spec is not None and spec.moments:
        items.append(("reduce.moments", 8 * kernel.MOMENT_FIELDS * len(spec.moments), "moments"))
    return items


def _worker_threads(cluster: object) -> int:
    """Tasks a worker runs at once, as far as the config says (1 where it does not)."""
    if isinstance(cluster, SlurmClusterSpec):
        return max(1, cluster.cores // cluster.processes)
    return max(1, int(getattr(cluster, "threads_per_worker", 1) or 1))


def reduce_working_set(plan: JobPlan) -> tuple[int, int, int]:
    """A ``reduce:`` job on a worker: (bytes it needs, bytes of one partial, tasks it runs at once)."""
    cfg = plan.config
    partial = sum(b for _, b, _ in reduce_partials(cfg))
    threads = _worker_threads(cfg.cluster)
    points = cfg.points.chunk if plan.point_count is None else max(1, min(cfg.points.chunk, plan.point_count))
    need = threads * (REDUCE_PARTIALS_A_TASK * partial + points * REDUCE_BYTES_A_POINT)
    return need + REDUCE_PARTIALS_MERGING * partial, partial, threads


def reduce_memory(plan: JobPlan, limit: int, source: str) -> tuple[str | None, str | None]:
    """:func:`chunk_memory` for a ``reduce:`` job: its partials and accumulators against a worker's memory,
    naming the largest item of the ``reduce:`` section (a smaller points.chunk cannot help)."""
    cfg = plan.config
    need, partial, threads = reduce_working_set(plan)
    if need <= limit * CHUNK_MEMORY_WARN_FRACTION:
        return None, None
    items = sorted(reduce_partials(cfg), key=lambda item: -item[1])
    key = items[0][0]
    section = key.split("[")[0]
    more = "cluster.memory" if isinstance(cfg.cluster, SlurmClusterSpec) else "cluster.memory_limit"
    what = (
        f"{key}{cfg.where(section)}: the statistics' partial takes {human_bytes(partial)} ("
        + "; ".join(f"{k}: {d}, {human_bytes(b)}" for k, b, d in items[:4])
        + f"), and a worker needs about {human_bytes(need)} for them ({threads} task(s) at once, each holding "
        f"{REDUCE_PARTIALS_A_TASK} partials: the one it is given, the one it makes and the kernels' accumulators; "
        f"{REDUCE_PARTIALS_MERGING} more being merged)"
    )
    advice = (
        f"give the {section} entries fewer bins (a smaller points.chunk cannot help), or the workers more "
        f"memory ({more})"
    )
    return _memory_verdict(what, advice, need, limit, source)


def check_worker_memory(plan: JobPlan, memory: int, force: bool = False) -> None:
    """One chunk against the smallest memory limit of the workers that run the job (``memory`` bytes;
    0: none), for clusters whose config does not say it (an existing scheduler, dask-cuda, a given
    client): a ConfigError naming the chunk's key unless ``force``; more than half, a warning."""
    if memory <= 0:
        return
    too_large, tight = chunk_memory(plan, memory, "the smallest memory_limit of the cluster's workers")
    if too_large is not None and not force:
        raise ConfigError(f"{too_large} (or run with --force)")
    if too_large is not None or tight is not None:
        log.warning("%s", too_large or tight)


def _bytes_per_point(cfg: JobConfig, grids: list[GridPlan]) -> int:
    """Bytes of the result per point before compression: coordinates, then each grid's outputs (for a
    particle job, a seed's kept positions and outputs)."""
    if cfg.advect is not None:
        kept = len(step_plan(cfg.advect.t0, cfg.advect.t1, cfg.advect.dt, cfg.advect.save_every)[3])
        per_kept = 3 * 8 + 3 * 8 * ("velocity" in cfg.advect.outputs) + 9 * 8 * ("jacobian" in cfg.advect.outputs)
        return kept * per_kept + 1 + 8 + 8 * ("ftle" in cfg.advect.outputs)  # status, end time, FTLE
    if cfg.reduce is not None:  # statistics: a result of its own fixed size, nothing a point
        return 0
    total = 8 + 3 * 8  # the int64 point index and float64 coordinates
    for g in grids:
        item = g.value_type.dtype.itemsize
        total += sum(output_table.bytes_per_point(out, g.components, item) for out in cfg.sampling.outputs)
    return total


def _chunk_bytes_per_point(cfg: JobConfig, grids: list[GridPlan]) -> int:
    """Bytes a point that one chunk task computes and holds, derived from the job's sampling request
    (not from what is written): the points and their index, every array the request samples for each
    grid (a Laplacian or a tensor is computed from the Hessian or Jacobian, which the chunk holds
    too), then each written output the request does not sample.  0 for particle and statistics jobs."""
    if cfg.advect is not None or cfg.reduce is not None:
        return 0
    try:
        request = grid_request(cfg)
    except SamplingError:  # the config's own checks say what is wrong with it
        return 0
    total = 8 + 3 * 8  # the int64 point index and float64 coordinates
    for g in grids:
        shapes, dtypes = request.shapes((), g.components), request.dtypes(g.value_type)
        total += sum(int(np.prod(shapes[o], dtype=np.int64)) * dtypes[o].itemsize for o in request.outputs)
        item = g.value_type.jacobian_dtype.itemsize
        total += sum(
            output_table.bytes_per_point(out, g.components, item)
            for out in cfg.sampling.outputs
            if out not in request.outputs
        )
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
    memory = worker_memory_limit(cfg.cluster)
    if memory is not None and (too_large := chunk_memory(plan, *memory)[0]) is not None:
        problems.append(too_large)
    cap = bytes_of(cfg.limits.max_output_bytes)
    if plan.output_bytes is not None and plan.output_bytes > cap:
        problems.append(
            f"output{cfg.where('output')}: about {human_bytes(plan.output_bytes)} of results "
            f"({plan.bytes_per_point} bytes a point), more than limits.max_output_bytes "
            f"({human_bytes(cap)})"
        )
    return problems


def _synthetic_grid(cfg: JobConfig) -> GridPlan:
    """The synthetic field's grid, its active voxels and leaves counted exactly (as the run will make it)."""
    s = cfg.volume.synthetic
    voxels, leaves = synthetic.shell_counts(s.resolution, *s.shell)  # exact: the shell clipped to the box
    comps = 3 if s.field != "linear" else len(s.params.get("matrix", [[0] * 3] * 3))
    where = f" (written to {s.write})" if s.write else ""
    vt = value_type_for(np.dtype(s.dtype), comps)
    return GridPlan(
        "velocity",
        vt.name,
        vt,
        leaves,
        voxels,
        f"synthetic {s.field}, {s.resolution}^3 box, shell {list(s.shell)}{where}",
    )


def _nvdb_grids(cfg: JobConfig) -> list[GridPlan]:
    series = cfg.volume.series
    path = cfg.volume.path if series is None else series.files()[0]  # a series: its first file
    key = "volume.path" if series is None else "volume.series.paths"
    try:
        infos = list_grids(path)
    except (NanoVDBError, OpenVDBError, StorageError) as err:
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
        if g.value_type is None:
            raise ConfigError(f"volume.grids: {n!r} is an {g.grid_type} grid (no values to sample)")
        where = str(path) if series is None else f"series of {len(series.files())} files, {path} first"
        plans.append(GridPlan(n, g.grid_type, g.value_type, g.leaf_count, g.active_voxel_count, where))
    return plans


def check_gpu_cluster(cfg: JobConfig) -> None:
    """``sampling.device: cuda`` on an embedded LocalCluster of several workers would put them all on GPU 0:
    refused, naming ``cluster.kind: cuda`` (allowed under VDBFLOW_CUDA_EMULATE=1, whose one device is the
    CPU, and for one worker)."""
    emulated = os.environ.get("VDBFLOW_CUDA_EMULATE", "0") == "1"
    cluster = cfg.cluster
    if cfg.sampling.device == "cuda" and cluster.kind == "local" and cluster.workers != 1 and not emulated:
        workers = "as many workers as cores" if cluster.workers is None else f"{cluster.workers} workers"
        raise ConfigError(
            f"sampling.device{cfg.where('sampling.device')}: expected cluster.kind: cuda (one worker per GPU, "
            "dask-cuda) or an existing GPU cluster (kind: address, slurm) for device cuda, got cluster.kind: "
            f"local with {workers}, which would all share GPU 0 (cluster.workers: 1 runs one)"
        )


@contextlib.contextmanager
def _noted(problems: list[str]) -> Iterator[None]:
    """A block whose ConfigError is one more of ``problems`` (the plan reports them all at once)."""
    try:
        yield
    except ConfigError as err:
        problems.append(str(err).replace("\n", "\n  "))


def plan_job(cfg: JobConfig, force: bool = False, dry_run: bool = False, own_cluster: bool = True) -> JobPlan:
    """Check a config against its inputs and say what the job will do (and how large it is); runs nothing.

    A job beyond ``cfg.limits`` is refused with :class:`ConfigError` unless ``force``.  With ``dry_run``
    (``--dry-run``: a template checked where its inputs are not) missing input files and a missing
    dask-jobqueue are ``warnings`` of the plan instead of errors.  ``own_cluster``: the job starts the
    cluster of ``cfg.cluster`` (not a given client's), whose workers must suit ``sampling.device``.
    """
    problems, warnings = input_problems(cfg, missing_ok=dry_run)  # then every other problem, reported together
    if (shards := shard_problem(cfg)) is not None:
        problems.append(shards)
    missing_volume = _missing_volume(cfg)
    if own_cluster:
        with _noted(problems):
            check_gpu_cluster(cfg)
    grids: list[GridPlan] = []
    with _noted(problems):
        grids = _grid_plans(cfg, missing_volume)
    if problems:
        raise ConfigError("the job cannot start:\n" + "\n".join(f"  {p}" for p in problems))
    count = _point_count(cfg, grids)
    script = None
    if isinstance(cfg.cluster, SlurmClusterSpec):
        try:
            script = slurm_job_script(cfg.cluster)
        except MissingExtraError as err:
            if not dry_run:
                raise
            warnings.append(f"cluster{cfg.where('cluster')}: no job script shown: {err}")
        if dry_run and (missing := submit_command_missing()) is not None:  # the run would stop at the start
            warnings.append(f"cluster{cfg.where('cluster')}: {missing}")
    notes, inputs, steps = _input_notes(cfg, missing_volume is not None)
    plan = JobPlan(
        cfg,
        grids,
        count,
        None if count is None else -(-count // cfg.points.chunk),
        str(cfg.partitions)
        if cfg.partitions
        else "none where the volume takes at most 1/8 of a worker's memory (every worker reads it whole, "
        "one task a chunk), else one per worker",
        describe_cluster(cfg.cluster),
        max(1, STENCIL_RADIUS[cfg.sampling.mode]),
        script,
        notes,
        _bytes_per_point(cfg, grids),
        inputs,
        warnings,
        _chunk_bytes_per_point(cfg, grids),
        steps,
    )
    if cfg.advect is not None and count is not None:
        plan.notes.append(f"advect{cfg.where('advect')}: {plan.particle_estimate()[1]}")
    if cfg.reduce is not None:
        need, partial, threads = reduce_working_set(plan)
        plan.notes.append(
            f"reduce{cfg.where('reduce')}: statistics partials of {human_bytes(partial)}, one a chunk, merged in a "
            f"fixed tree; a worker needs about {human_bytes(need)} for them ({threads} task(s) at once)"
        )
    _check_size(plan, force, dry_run)
    return plan


def _missing_volume(cfg: JobConfig) -> str | Path | None:
    """What of the volume input is not here (a dry run plans without it), or None."""
    series = cfg.volume.series
    if series is not None:
        files = series.files()
        gone = [f for f in files if not f.is_file()]
        return f"{gone[0]}" if gone else (None if files else f"a file matching {series.paths!r}")
    return cfg.volume.path if cfg.volume.path is not None and not cfg.volume.path.is_file() else None


def _grid_plans(cfg: JobConfig, missing_volume: str | Path | None) -> list[GridPlan]:
    """The grids the job reads (from the files' headers, the synthetic field, or vec3f assumed when the
    volume is not here), checked against the sampling mode, the outputs and the particles."""
    if cfg.volume.synthetic:
        s = cfg.volume.synthetic
        try:
            synthetic.make_field(s.field, **s.params)
        except (VolumeError, ValueError) as err:
            given = [cfg.where(f"volume.synthetic.params.{p}") for p in s.params]  # a --set param: no line
            where = cfg.where("volume.synthetic.params") or next(iter(given), "")
            raise ConfigError(f"volume.synthetic.params{where}: {err}") from None
        grids = [_synthetic_grid(cfg)]
    elif missing_volume is not None:  # a dry run: the sizes assume vec3f grids
        grids = [
            GridPlan(
                n, "Vec3f", VALUE_TYPES["vec3f"], -1, -1, f"not read: {missing_volume} is not here (sizes assume vec3f)"
            )
            for n in cfg.volume.grids or ["(the first grid)"]
        ]
    else:
        grids = _nvdb_grids(cfg)
    derived = [o for o in cfg.sampling.outputs if o in DERIVED] if cfg.advect is None else []  # advect: unused
    for g in grids if missing_volume is None else ():
        if cfg.sampling.mode != "closest" and not g.value_type.is_float:
            raise ConfigError(
                f"sampling.mode: {cfg.sampling.mode!r} needs float data; grid {g.name!r} holds "
                f"{g.grid_type} (use mode: closest)"
            )
        if derived and g.components != 3:
            raise ConfigError(
                f"sampling.outputs: {derived} need a vec3 field; grid {g.name!r} has {g.components} component(s)"
            )
    if cfg.reduce is not None and len(grids) != 1:
        raise ConfigError(
            f"reduce{cfg.where('reduce')}: expected one grid to reduce (volume.grids: [name]), got {len(grids)}: "
            f"{', '.join(g.name for g in grids)}"
        )
    if cfg.advect is not None:
        if len(grids) != 1:
            raise ConfigError(
                f"advect{cfg.where('advect')}: expected one velocity grid to advect through (volume.grids: "
                f"[name]), got {len(grids)}: {', '.join(g.name for g in grids)}"
            )
        g = grids[0]
        if missing_volume is None and (g.components != 3 or not g.value_type.is_float):
            raise ConfigError(
                f"advect{cfg.where('advect')}: expected a vec3 float velocity grid, grid {g.name!r} holds "
                f"{g.grid_type} with {g.components} component(s)"
            )
    return grids


def _point_count(cfg: JobConfig, grids: list[GridPlan]) -> int | None:
    """How many points the job samples (None: a points file not here yet, or a volume not read, in a dry
    run)."""
    if cfg.points.kind == "voxels":  # every active voxel of the first grid (random points: in the same)
        return voxel_point_count(cfg.points, grids[0].active_voxels) if grids[0].active_voxels >= 0 else None
    if isinstance(cfg.points, FilePoints) and not cfg.points.path.exists():
        return None
    if isinstance(cfg.points, FilePoints):
        try:
            return file_point_count(cfg.points)
        except PointsError as err:
            raise ConfigError(str(err)) from None
    return cfg.points.generated()


def _input_notes(
    cfg: JobConfig, volume_missing: bool
) -> tuple[list[str], dict[str, InputIdentity], tuple[tuple[float, int], ...]]:
    """The plan's notes on the output and the inputs, and the identities of the input files it read."""
    steps: tuple[tuple[float, int], ...] = ()
    notes = []
    out = cfg.output
    if out.url is not None:
        if exists(out.url, out.storage_options):
            notes.append(f"{out.url} holds an earlier vdbflow result, replaced when the new one is complete")
        notes.append(
            f"{out.url} is on an object store: the result is written under a hidden prefix beside it and copied "
            "into place once complete, root metadata last (docs/jobs.md)"
        )
        notes += tidy(out.url, dry_run=True, options=out.storage_options)
    else:
        if out.local.exists():
            notes.append(f"{out.local} holds an earlier vdbflow result, replaced when the new one is complete")
        notes += tidy(out.local.absolute(), dry_run=True)
    inputs = {}
    if cfg.volume.path is not None and not volume_missing:
        inputs["volume.path"] = InputIdentity.of(cfg.volume.path)
        how = (
            (
                "copied to a private snapshot next to the output first (a reflink where the filesystem allows, "
                "else a copy), so no other process can truncate what the job maps"
            )
            if cfg.volume.snapshot and not is_url(cfg.volume.path)
            else "read by byte ranges from the object store, its ETag checked at every read (docs/storage.md)"
            if is_url(cfg.volume.path)
            else (
                "memory-mapped in place (volume.snapshot: false): the job must not run while another process "
                "rewrites it"
            )
        )
        notes.append(f"{cfg.volume.path} ({human_bytes(inputs['volume.path'].size)}) is {how}")
    if cfg.volume.series is not None and not volume_missing:
        steps = series_steps(cfg)
        lo, hi = steps[0][0], steps[-1][0]
        notes.append(
            f"the series' {len(cfg.volume.series.files())} files (t from {lo:g} to {hi:g}) are memory-mapped in "
            "place by each worker: the job must not run while another process rewrites them"
        )
    return notes, inputs, steps


def _check_size(plan: JobPlan, force: bool, dry_run: bool) -> None:
    """Refuse a job beyond its limits (unless ``force``); note a tight worker memory and a full disk."""
    cfg, notes = plan.config, plan.notes
    problems = _limits(plan)
    if problems and not force:
        raise ConfigError(
            "the job is larger than its limits:\n"
            + "\n".join(f"  {p}" for p in problems)
            + "\n  (raise limits.max_points / limits.max_output_bytes / limits.max_chunks in the config, or run with "
            "--force)"
        )
    notes += [f"{p}: allowed by --force" for p in problems]
    memory = worker_memory_limit(cfg.cluster)
    if memory is not None and (too_large := partition_memory(plan, *memory)) is not None:
        if not force:
            raise ConfigError(f"the job cannot start:\n  {too_large}\n  (or run with --force)")
        notes.append(f"{too_large}: allowed by --force")
    if memory is not None and (tight := chunk_memory(plan, *memory)[1]) is not None:
        notes.append(tight)
        if not dry_run:
            log.warning("%s", tight)
    free = None if cfg.output.url is not None else free_bytes(cfg.output.local)
    if plan.output_bytes is not None and free is not None and plan.output_bytes > free:
        notes.append(
            f"the result (about {human_bytes(plan.output_bytes)} before compression) may not fit in the "
            f"{human_bytes(free)} free where {cfg.output.path} goes"
        )
