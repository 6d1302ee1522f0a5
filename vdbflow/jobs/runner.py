"""``vdbflow run``: a batch job from a :class:`~vdbflow.jobs.config.model.JobConfig` - volume, points, sampling on a
Dask cluster, and a result store written from the workers.

:func:`~vdbflow.jobs.plan.plan_job` reads only headers (it backs ``--dry-run``); :func:`run_job` runs the
job and returns its summary; :func:`run` is ``vdbflow.run``.  The job's inputs are handled in
:mod:`~vdbflow.jobs.inputs`, its progress and timing in :mod:`~vdbflow.jobs.progress`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import platform
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dask
import distributed
import numpy as np
import xarray as xr
from distributed import get_task_stream, wait

from vdbflow.devices import cuda_build
from vdbflow.errors import VdbflowError
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.location import is_url
from vdbflow.io.netcdf import command_line, history_line
from vdbflow.jobs.chunks import (
    CHUNK_PHASES,
    EDGE_CHECK_PER_CHUNK,
)
from vdbflow.jobs.clusters import open_cluster, worker_memory_limit
from vdbflow.jobs.config.load import as_config, dump_config
from vdbflow.jobs.config.model import JobConfig, SlurmClusterSpec
from vdbflow.jobs.executors import Sampled, executor_for, shaped, worker_memory
from vdbflow.jobs.inputs import InputIdentity, build_volumes, snapshot
from vdbflow.jobs.plan import JobPlan, check_worker_memory, human_bytes, partition_memory, plan_job, reduce_working_set
from vdbflow.jobs.progress import DaskRichBar, recomputed, steps_of_graphs, worker_time_by_step
from vdbflow.jobs.publish.output import KEPT_PARTIALS, OutputError, partial_path, publish, tidy
from vdbflow.jobs.publish.remote import exists
from vdbflow.jobs.publish.resume import check_same_job, job_record, record_inputs_when_hashed, resumable, unit_plan
from vdbflow.jobs.publish.units import Manifest
from vdbflow.jobs.publish.writers import Writer, writer
from vdbflow.version import __version__

log = logging.getLogger("vdbflow.run")


# -- running ------------------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:

    return {
        "vdbflow": __version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "xarray": xr.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _warm_worker() -> None:
    """The imports of a job's tasks (the kernels, xarray, zarr, numcodecs), made on a worker ahead of them:
    about 2-3 s of a fresh worker process on this project's 2-core machine, which the first task of each
    worker paid before (a 1M-point demo job spent most of its sampling time there)."""
    import numcodecs.blosc  # noqa: F401
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import vdbflow.distribution.forward  # noqa: F401
    import vdbflow.jobs.chunks  # noqa: F401
    import vdbflow.ops.sampling  # noqa: F401


def _warm_workers(client: Any) -> list:
    """One :func:`_warm_worker` task a worker, not waited for (the futures are kept by the caller)."""
    try:
        workers = list(client.scheduler_info(n_workers=-1)["workers"])
        return [
            client.submit(_warm_worker, key=f"vdbflow-warm-{k}-{time.time_ns()}", workers=[w], pure=False)
            for k, w in enumerate(workers)
        ]
    except Exception as err:  # a speed-up only
        log.debug("warming the workers: %s", err)
        return []


WARM_WAIT_S = 60.0


def _warmed(warming: list) -> None:
    """Wait for the warm-up imports before the job sends its first data or tasks: a worker that imports
    zarr in a task thread while its comm thread unpickles something importing zarr too can see a
    partially initialised module (Python's import locks give way to avoid a deadlock), which failed a
    job now and then.  The imports overlap the client's preparation; by now they are mostly done."""
    try:
        wait(warming, timeout=WARM_WAIT_S)
    except Exception as err:  # a speed-up only: the tasks import what they need anyway
        log.debug("waiting for the warm-up imports: %s", err)


def killed_worker_error(err: BaseException, plan: JobPlan, memory: int) -> VdbflowError | None:
    """Dask's ``KilledWorker`` (the workers running one task died, three times by default) said in
    terms of the job: the task, the likely cause (a worker out of memory: its limit against the chunk's
    working set) and what to change; None for any other error."""
    from distributed.scheduler import KilledWorker

    if not isinstance(err, KilledWorker):
        return None
    cfg = plan.config
    need, points, key = plan.chunk_working_set()
    more = "cluster.memory" if isinstance(cfg.cluster, SlurmClusterSpec) else "cluster.memory_limit"
    if cfg.reduce is not None:  # statistics partials, whatever points.chunk is (jobs.plan.reduce_memory)
        need, partial, _ = reduce_working_set(plan)
        return JobError(
            f"the workers running task {err.task!r} died {err.allowed_failures + 1} time(s) (Dask's KilledWorker): "
            f"most likely a worker ran out of memory - the statistics' partials of reduce{cfg.where('reduce')} "
            f"take {human_bytes(partial)} each and a worker needs about {human_bytes(need)} for them. Give the "
            f"reduce entries fewer bins (a smaller points.chunk cannot help) or the workers more memory ({more}). "
            "No result was published"
        )
    if str(err.task).startswith("vdbflow-partition"):  # a partition that did not fit its worker
        why = partition_memory(plan, memory, "the workers' memory_limit") if memory > 0 else None
        return JobError(
            f"the workers building partition {err.task!r} died {err.allowed_failures + 1} time(s) (Dask's "
            f"KilledWorker): most likely the partition did not fit a worker's memory"
            + (f" - {why}" if why else f" ({human_bytes(memory)} each)" if memory > 0 else "")
            + f". Use more workers (partitions{cfg.where('partitions')} follow them) or give them more memory "
            f"({more}); a smaller points.chunk cannot help. No result was published"
        )
    if memory > 0:
        limit = f"each worker may use {human_bytes(memory)}"
        fit = plan.chunk_that_fits(memory)
        smaller = f"a smaller {key}{cfg.where(key)} (at most {fit:,} points fit in half a worker's memory)"
    else:
        limit = "the workers' memory limit is not known"
        smaller = f"a smaller {key}{cfg.where(key)}"
    return JobError(
        f"the workers running task {err.task!r} died {err.allowed_failures + 1} time(s) (Dask's KilledWorker; the "
        f"last one at {getattr(err.last_worker, 'address', err.last_worker)}): most likely a worker ran out of "
        f"memory - {limit}, and one chunk of {points:,} points needs about {human_bytes(need)}. Set {smaller} or "
        f"give the workers more memory ({more}); if memory is not the cause, the workers' logs say why they "
        "exited. No result was published"
    )


@dataclass
class JobResult:
    """A finished job: where the result is, and the figures of its summary table."""

    output: Path | str  # a local path, or the URL of an object store
    points: int
    partitions: int
    workers: int
    grids: list[str]
    timings: dict[str, float]
    worker_seconds: dict[str, float] = field(default_factory=dict)  # compute time on the workers, by step
    analytic_error: float | None = None
    analytic_points: int | None = None
    analytic_output: str | None = None  # what the analytic check compared: "jacobian" or a derived quantity
    dashboard: str | None = None
    steps: int | None = None  # a particle job's integration steps (its points are seeds)
    nonfinite_points: int | None = None  # points with a NaN or infinite coordinate (their results are NaN)
    edge_checked: int | None = None  # finite points whose stencil was checked against the data ...
    edge_outside: int | None = None  # ... and those of them whose stencil reads the background
    cuda_builds: str | None = None  # device: cuda: the CUDA entries the workers compiled or loaded
    workers_lost: int = 0  # workers of the job's start gone at its end (died, or restarted by their nanny)
    tasks_recomputed: int = 0  # tasks computed more than once (a lost worker's results, again elsewhere)
    recompute_seconds: float = 0.0  # worker seconds of those extra runs
    particles_left: int | None = None  # a particle job's particles that left the data (status 1) ...
    particles_nonfinite: int | None = None  # ... and those that met a non-finite value (status 2)
    units_written: int = 0  # units (stored chunks or shards along the first dimension) this run wrote ...
    units_kept: int = 0  # ... and those a resumed run kept from the partial result, verified
    resumed: bool = False  # the run continued a partial result (``--resume`` found one)
    points_sampled: int | None = None  # points this run sampled (a resumed run: only the units it wrote need)

    def edge_summary(self) -> str:
        """The share of points whose stencil reads the background, and how many were checked."""
        if not self.edge_checked:
            return "no finite point to check"
        share = (self.edge_outside or 0) / self.edge_checked
        every = self.edge_checked + (self.nonfinite_points or 0) == self.points
        how = f"{self.edge_checked:,} checked, up to {EDGE_CHECK_PER_CHUNK:,} a chunk"
        how = "all points checked" if every else how
        text = f"{100 * share:.1f} % of points have a stencil that reads the background ({how})"
        if share:
            text += "; their values and derivatives mix in the background: `inside` in sampling.outputs flags each"
        return text

    @property
    def throughput(self) -> float:
        """Points (a particle job: particle-steps) per second of sampling (advection) and writing; a resumed
        run counts only the points it sampled, not those of the units it kept."""
        points = self.points if self.points_sampled is None else self.points_sampled
        return points * (self.steps or 1) / max(self.timings["sample_and_write_s"], 1e-9)


@contextlib.contextmanager
def _volume_file(
    cfg: JobConfig, plan: JobPlan, final: Path | str, pool: concurrent.futures.Executor
) -> Iterator[concurrent.futures.Future]:
    """The .nvdb file the job reads, as a future of (path or None, its sha256 if known already): a
    snapshot (unless ``volume.snapshot`` is false) made in ``pool`` while the cluster starts, and
    removed afterwards (beside the output; beside the input when the output is on an object store)."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    if cfg.volume.path is None or not cfg.volume.snapshot or is_url(cfg.volume.path):  # a URL: no map to guard
        if cfg.volume.path is not None:
            plan.inputs["volume.path"].check("when the job started")
        done.set_result((cfg.volume.path, None))
        yield done
        return
    stop = threading.Event()

    def make() -> tuple[Path, str | None]:
        t0 = time.perf_counter()
        beside = final if isinstance(final, Path) else Path(str(cfg.volume.path)).absolute()
        path, digest = snapshot(plan.inputs["volume.path"], beside, stop)
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
    resume: bool = False,
) -> JobResult:
    """Run a job: start its cluster, distribute the volume, sample, write; return the summary.

    ``publishing`` is set just before the result is moved into place: from then on the job is
    finishing, and a caller that turns signals into exceptions defers them (the CLI), so that a job
    stopped at that moment never says "no result was published" about a result it published.

    ``force`` runs a job larger than ``cfg.limits``.  A ``client`` (``distributed.Client``) runs the
    job on its cluster instead of the one ``cfg.cluster`` describes, and is left open.  Leftovers of
    killed runs at the output are dealt with first (:func:`vdbflow.jobs.publish.output.tidy`), each logged.

    The job is a composition: an executor (:mod:`vdbflow.jobs.executors`) builds the lazy samples, a
    writer (:mod:`vdbflow.jobs.publish.writers`) writes them to a hidden path from the workers, and
    :mod:`vdbflow.jobs.publish.output` publishes the complete result.

    ``resume`` continues the newest partial result a killed run of the same job left at the output
    (:mod:`vdbflow.jobs.publish.resume`: a changed config or input is a ConfigError), writing only its units not
    written and verified; and a run stopped by a signal or a failure keeps its partial result for the next
    ``resume``.
    """
    plan = plan_job(cfg, force, own_cluster=client is None)
    given = client is not None
    if given:
        plan.cluster = f"the given client's cluster (scheduler {client.scheduler.address})"
    out = writer(cfg.output.resolved_format, cfg.output)
    final, reused = _prepare_output(cfg, resume, out)
    job = _Job(cfg, plan, final, out, time.perf_counter(), resume=resume, resumed_from=reused)
    with (
        contextlib.ExitStack() as after_cluster,  # exits last: after the cluster is closed
        concurrent.futures.ThreadPoolExecutor(1) as hasher,
        _volume_file(cfg, plan, job.final, hasher) as reading,
        contextlib.nullcontext(client) if given else open_cluster(cfg.cluster) as client,
    ):
        job.timings["cluster_s"] = time.perf_counter() - job.t_start
        job.meet_cluster(client, given, force, console)
        t0 = time.perf_counter()
        sources, analytic, checksum, volume_file = _inputs(cfg, plan, reading.result(), hasher)
        job.checksum = checksum
        if reused is not None:
            check_same_job(cfg, plan, job.manifest, checksum)
        job.grids = list(sources)
        _warmed(job.warming)
        sampled = None
        try:
            execute = executor_for(cfg, client, sources)
            t1 = time.perf_counter()
            sampled = execute(cfg, client, sources, analytic, plan, job.timings)
            job.timings["distribute_s"] += t1 - t0  # the inputs' preparation
            ds = _labelled(sampled, cfg, plan)
            result = job.write(ds, sampled, client, console if progress else None, after_cluster)
            provenance = job.provenance(result, checksum, analytic)
            job.writer.add_attrs(job.target, provenance)
            if volume_file is not None and not cfg.volume.snapshot:
                plan.inputs["volume.path"].check("when the job finished")
            if publishing is not None:
                publishing.set()
            job.manifest.remove()
            job.publishing = True  # from now on the complete result is never discarded
            publish(job.target, job.final, cfg.output.overwrite, cfg.output.storage_options)
        except OutputError:
            raise  # the complete result was kept at an unpublished path, which the message names
        except BaseException as err:
            job.fail(client, after_cluster)
            if (killed := killed_worker_error(err, plan, job.memory)) is not None:
                raise killed from err
            raise
        finally:
            with contextlib.ExitStack() as closing:  # every volume closed, even if one close fails
                for dvol in sampled.volumes if sampled is not None else ():
                    closing.callback(dvol.close)
    log.info("published %s", job.final)
    return result


def _prepare_output(cfg: JobConfig, resume: bool, out: Any) -> tuple[Path | str, Path | str | None]:
    """The output's final path (or URL), its leftovers dealt with (each logged), its folder made; and the
    partial result to resume (``resume``: None where there is none)."""
    options = cfg.output.storage_options
    final: Path | str = cfg.output.url if cfg.output.url is not None else cfg.output.local.absolute()
    reused = resumable(final, options, out.manifest_target) if resume else None
    keep = None if reused is None else {reused, out.manifest_target(reused)}
    for line in tidy(final, keep=keep, options=options):
        log.warning("%s", line)
    if reused is None and resume:
        log.info("--resume: no partial result of a killed run at %s; the job starts from the beginning", final)
    if isinstance(final, str):
        with cfg.about("output.path", OutputError):
            if cfg.output.overwrite == "never" and exists(final, options):
                raise OutputError(f"{final} holds a result, and output.overwrite is 'never'")
        return final, reused
    with cfg.about("output.path", OutputError):
        if cfg.output.overwrite == "never" and (final.exists() or final.is_symlink()):
            raise OutputError(f"{final} holds the earlier result restored just now, and output.overwrite is 'never'")
    final.parent.mkdir(parents=True, exist_ok=True)
    return final, reused


def _inputs(
    cfg: JobConfig, plan: JobPlan, volume: tuple[Path | None, str | None], hasher: concurrent.futures.Executor
) -> tuple[dict[str, Any], Any, dict[Any, concurrent.futures.Future], Path | None]:
    """The job's volumes (path and grid, or in memory), the analytic field of a synthetic volume, the
    futures of its input files' sha256 (hashed in ``hasher`` while the job runs) and the volume file it
    reads (the snapshot, or None)."""
    volume_file, volume_sha256 = volume  # the snapshot, made while the cluster started
    sources, analytic = build_volumes(cfg, [g.name for g in plan.grids])
    if volume_file is not None:
        sources = {name: GridRef(os.fspath(volume_file), src.grid, src.periodic) for name, src in sources.items()}
    hashes: dict[Path, concurrent.futures.Future] = {}
    where = lambda p: p if is_url(p) else Path(p)  # noqa: E731 - a URL stays one (its storage_options too)
    for src in sources.values():
        if isinstance(src, GridRef) and where(src.path) not in hashes:
            hashes[where(src.path)] = hasher.submit(  # a URL: its ETag and size, not its bytes (docs/storage.md)
                lambda p: volume_sha256 if p == volume_file and volume_sha256 else InputIdentity.of(p).fingerprint(),
                where(src.path),
            )
    checksum: dict[Any, concurrent.futures.Future] = {
        name: hashes[where(src.path)] for name, src in sources.items() if isinstance(src, GridRef)
    }
    if cfg.volume.series is not None:  # each file of the series
        checksum = {i.path: hasher.submit(i.fingerprint) for src in sources.values() for i in src.identities}
    return sources, analytic, checksum, volume_file


def _labelled(sampled: Sampled, cfg: JobConfig, plan: JobPlan) -> xr.Dataset:
    """The executor's Dataset chunked for the store (shaped as the points are: a plane, a lattice) and
    labelled with the points' attrs and the run's provenance."""
    ds, point_set = sampled.ds, sampled.point_set
    chunk = cfg.output.chunk or cfg.points.chunk
    dim = "point" if cfg.advect is None else "particle"
    if dim not in ds.dims:  # no points dim (statistics): written as they are
        pass
    elif point_set.shape is None:
        ds = ds.chunk({dim: chunk})
    else:
        ds = shaped(ds, point_set.shape, point_set.dims, chunk, dim)
    ds.attrs.update(point_set.attrs)
    ds.attrs["source"] = f"vdbflow {_versions()['vdbflow']}"
    created = datetime.now(timezone.utc)
    ds.attrs.update(
        {
            "title": "vdbflow run result",
            "vdbflow_config": dump_config(cfg),
            "versions": _versions(),
            "grids": [g.name for g in plan.grids],
            "created": created.isoformat(timespec="seconds"),
            "history": history_line(command_line(), created.strftime("%Y-%m-%dT%H:%M:%SZ")),  # CF 2.6.2
        }
    )
    return ds


@dataclass
class _Job:
    """A running job's state: its plan, output paths, writer, cluster facts and timings."""

    cfg: JobConfig
    plan: JobPlan
    final: Path | str  # a local path, or a URL
    writer: Writer
    t_start: float
    resume: bool = False  # keep the partial result of a failed or stopped run, for the next resume
    resumed_from: Path | str | None = None  # the partial result this run resumes
    timings: dict[str, float] = field(default_factory=dict)
    workers: int = 0
    worker_addresses: set = field(default_factory=set)  # the workers at the start of the job
    memory: int = 0
    dashboard: str | None = None
    warming: list = field(default_factory=list)
    cuda_marks: dict | None = None  # device: cuda: each worker process's count of CUDA builds before the job
    futures: list = field(default_factory=list)
    write_task: Any = None
    grids: list[str] = field(default_factory=list)
    checksum: dict = field(default_factory=dict)  # futures of the inputs' sha256
    units: Any = None  # the result's units (vdbflow.jobs.publish.units.UnitPlan)
    publishing: bool = False  # the complete result is being published

    target: Path | str = field(init=False)  # the hidden path the result is written to (a new tag a job)
    manifest: Manifest = field(init=False)  # the record of the units written, in the store the workers write

    def __post_init__(self) -> None:
        self.target = self.resumed_from if self.resumed_from is not None else partial_path(self.final)
        self.manifest = Manifest(self.writer.manifest_target(self.target), self.cfg.output.storage_options)

    def meet_cluster(self, client: Any, given: bool, force: bool, console: Any) -> None:
        """Warm the workers, read their count and memory (checked against the plan where the plan did
        not know it), show the dashboard, and let the writer set the workers up."""
        cfg = self.cfg
        self.warming = _warm_workers(client)  # the workers import while this process prepares the job
        if cfg.sampling.device == "cuda":
            self.cuda_marks = {pid: len(log) for pid, log in client.run(cuda_build.build_records).values()}
        self.dashboard = client.dashboard_link if cfg.cluster.dashboard else None
        self.worker_addresses = set(client.scheduler_info(n_workers=-1)["workers"])
        self.workers = len(self.worker_addresses)
        self.memory = worker_memory(client)
        if given or worker_memory_limit(cfg.cluster) is None:  # the plan did not know the workers' memory
            check_worker_memory(self.plan, self.memory, force)
        where = f"; dashboard {self.dashboard}" if self.dashboard else ""
        log.info("cluster: %s; %d worker(s)%s", self.plan.cluster, self.workers, where)
        if console is not None and self.dashboard:
            console.print(f"Dask dashboard: {self.dashboard}")
        self.writer.prepare(client)

    def write(self, ds: xr.Dataset, sampled: Sampled, client: Any, console: Any, after_cluster: Any) -> JobResult:
        """Compute the samples and write them to the hidden target from the workers (with the lazy
        figures of the summary); the summary of what ran."""
        cfg, point_set = self.cfg, sampled.point_set
        log.info("writing %d points to %s (published at %s when complete)", point_set.count, self.target, self.final)
        t0 = time.perf_counter()
        resumed = self.resumed_from is not None
        units = unit_plan(self.manifest.target, cfg.output.storage_options, sampled, point_set, resumed)
        self.write_task = self.writer.lazy_write(ds, self.target, units)
        if not resumed:
            self.manifest.write_job(job_record(cfg, self.plan, units.units))
        record_inputs_when_hashed(self.manifest, self.checksum)
        for name, attr in (("tally", "tally"), ("errors", "errors"), ("seconds", "chunk_seconds")):
            if name in units.parts:  # the whole figure: kept chunks' from the manifest, the others computed
                setattr(sampled, attr, units.figure(name))
        self.units = units
        log.info("writing %d of %d unit(s) of the result (%d kept)", units.written, units.units, len(units.done))
        extras = {
            k: x
            for k, x in (
                ("errors", sampled.errors),
                ("seconds", sampled.chunk_seconds),
                ("tally", sampled.tally),
                ("stopped", sampled.stopped),
            )
            if x is not None
        }
        steps = steps_of_graphs(
            {"points": point_set.points, "samples": ds, "writing": self.write_task, "checks": list(extras.values())}
        )

        with get_task_stream(client) as stream:
            self.futures = client.compute([self.write_task, *extras.values()], optimize_graph=False)
            if console is not None and console.is_terminal:
                DaskRichBar(self.futures, client, console)
            results = dict(zip(extras, client.gather(self.futures)[1:], strict=True))
        self.timings["sample_and_write_s"] = time.perf_counter() - t0
        log.debug("warmed %d worker(s) ahead of the job's tasks", len(self.warming))
        records = stream.data
        worker_seconds = worker_time_by_step(records, steps)
        if sampled.chunk_seconds is not None:  # the chunk tasks' time, by what they measured of it
            worker_seconds.pop("chunk", None)
            worker_seconds.update(zip(CHUNK_PHASES, map(float, results["seconds"]), strict=True))
        result = JobResult(
            self.final,
            point_set.count,
            sampled.partitions,
            self.workers,
            self.grids,
            self.timings,
            worker_seconds,
            dashboard=self.dashboard,
            steps=None if cfg.advect is None else int(ds.attrs["steps"]),
            units_written=units.written,
            units_kept=len(units.done),
            resumed=resumed,
            points_sampled=units.points_sampled() if resumed else None,
        )
        result.workers_lost = len(self.worker_addresses - set(client.scheduler_info(n_workers=-1)["workers"]))
        result.tasks_recomputed, result.recompute_seconds = recomputed(records)
        if result.workers_lost or result.tasks_recomputed:
            log.warning(
                "%d worker(s) lost during the job; %d task(s) computed again (%.1f s)",
                result.workers_lost,
                result.tasks_recomputed,
                result.recompute_seconds,
            )
        if self.cuda_marks is not None:  # what the workers compiled or loaded for this job (seconds summed)
            answers = client.run(cuda_build.build_records, self.cuda_marks)
            result.cuda_builds = cuda_build.build_summary(cuda_build.worker_builds(answers))
        if sampled.stopped is not None:
            result.particles_left, result.particles_nonfinite = map(int, results["stopped"])
        if sampled.tally is not None:
            result.nonfinite_points, result.edge_checked, result.edge_outside = map(int, results["tally"])
        if sampled.errors is not None:
            e = np.asarray(results["errors"])
            result.analytic_points = int(e[:, 1].sum())
            result.analytic_error = float(e[:, 0].max(initial=0.0)) if result.analytic_points else None
            result.analytic_output = sampled.checked_output
        return result

    def provenance(self, result: JobResult, checksum: dict[Any, concurrent.futures.Future], analytic: Any) -> dict:
        """The global attrs that record how the result was made (inputs' sha256, checks, timings)."""
        provenance: dict[str, Any] = {"input_sha256": {k: f.result() for k, f in checksum.items()}, "timings_s": {}}
        if result.edge_checked is not None:
            provenance["points_nonfinite"] = result.nonfinite_points
            provenance["stencil_outside_points"] = result.edge_outside
            provenance["stencil_checked_points"] = result.edge_checked
        if result.analytic_output is not None:
            provenance[f"analytic_{result.analytic_output}_max_error"] = result.analytic_error
            provenance["analytic_interior_points"] = result.analytic_points
        if analytic is not None and self.cfg.volume.synthetic.write is None:
            provenance["input_sha256"] = "synthetic (generated in memory; see vdbflow_config)"
        self.timings["total_s"] = time.perf_counter() - self.t_start
        provenance["timings_s"] = {k: round(v, 4) for k, v in self.timings.items()}
        provenance["worker_seconds_by_step"] = {k: round(v, 4) for k, v in result.worker_seconds.items()}
        if result.particles_left is not None:
            provenance["particles_left_data"] = result.particles_left
            provenance["particles_nonfinite"] = result.particles_nonfinite
        provenance["workers_lost"] = result.workers_lost
        provenance["tasks_recomputed"] = result.tasks_recomputed
        provenance["recompute_seconds"] = round(result.recompute_seconds, 4)
        return provenance

    def fail(self, client: Any, after_cluster: contextlib.ExitStack) -> None:
        """A failed job: stop its tasks and remove its partial store (again once an embedded cluster's
        workers are gone); a job run with ``resume`` keeps a partial store that has its manifest."""
        name = str(self.target).rstrip("/").rsplit("/", 1)[-1]
        if self.publishing:  # what publishing left is finished by the next run or vdbflow clean
            KEPT_PARTIALS.add(name)  # its writer is gone, though this process lives on (a notebook)
            log.warning("kept %s: publishing was interrupted; the next run or vdbflow clean finishes it", self.target)
            return
        keep = self.resume and self.manifest.job() is not None
        if keep:
            KEPT_PARTIALS.add(name)
        if not keep:
            after_cluster.callback(self.writer.discard, self.target)
        try:
            stop_writing(client, self.futures, self.write_task)
        finally:  # also when a signal interrupts the wait
            if keep:
                log.warning("kept the partial result %s: `vdbflow run --resume` continues it", self.target)
            else:
                self.writer.discard(self.target)


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
    resume: bool = False,
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
        A YAML path, a mapping of sections or a :class:`~vdbflow.jobs.config.model.JobConfig`.
    client : distributed.Client, optional
        Runs the job on its cluster instead of starting the config's; it stays open.
    overrides : mapping of str to object, optional
        Values by dotted key path, e.g. ``{"points.count": 1000}``.
    force : bool, default False
        Run a job beyond the config's ``limits``.
    resume : bool, default False
        Continue the partial result of a killed run of the same job (``vdbflow run --resume``): only its
        units not written and verified are computed; a changed config or input is a ConfigError.  A
        run that fails keeps its partial result for the next resume.
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
    values = {**(overrides or {}), **{key.replace("__", "."): value for key, value in settings.items()}}
    cfg = as_config(config, values)
    try:
        return run_job(cfg, progress=False, force=force, client=client, resume=resume)
    except VdbflowError:
        raise
    except Exception as err:  # a worker's or a library's failure
        raise JobError(f"the job failed: {type(err).__name__}: {err}; no result was published") from err
