"""Dask clusters for batch jobs: the embedded LocalCluster, an existing scheduler, dask-cuda's
LocalCUDACluster and dask-jobqueue's SLURMCluster, each from its config section."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from vdbflow.errors import VdbflowError
from vdbflow.jobs.config import (
    AddressClusterSpec,
    ConfigError,
    CudaClusterSpec,
    LocalClusterSpec,
    SlurmClusterSpec,
)

log = logging.getLogger("vdbflow.cluster")

SCHEDULER_PLACEHOLDER = "tcp://<scheduler address>:8786"
START_ATTEMPTS = 3  # a local cluster whose worker dies while it starts is started again, this often in all
START_BACKOFF_S = 1.0  # seconds before the second attempt (doubled for each further one)


class ClusterError(VdbflowError, RuntimeError):
    """The job's Dask cluster did not start, or its workers did not arrive in time."""


class MissingExtraError(ConfigError):
    """The cluster kind needs a package that is not installed (the message names the pip extra)."""


def _local_workers(spec: LocalClusterSpec) -> int:
    return spec.workers or max(1, (os.cpu_count() or 1) // spec.threads_per_worker)


def _slurm_options(spec: SlurmClusterSpec) -> dict[str, Any]:
    options = {
        "queue": spec.queue,
        "account": spec.account,
        "walltime": spec.walltime,
        "cores": spec.cores,
        "memory": spec.memory,
        "processes": spec.processes,
        "job_extra_directives": list(spec.job_extra_directives),
        "job_script_prologue": list(spec.job_script_prologue),
        "interface": spec.interface,
        "local_directory": spec.local_directory,
        "python": spec.python,
    }
    return {**{k: v for k, v in options.items() if v is not None}, **spec.jobqueue_options}


def _jobqueue() -> Any:
    try:
        import dask_jobqueue
    except ImportError:
        raise MissingExtraError("cluster.kind 'slurm' needs dask-jobqueue: pip install \"vdbflow[slurm]\"") from None
    return dask_jobqueue


def _parameters(*functions: Any) -> set[str]:
    return {
        name
        for f in functions
        for name, p in inspect.signature(f).parameters.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name != "self"
    }


def _job_options(spec: SlurmClusterSpec) -> dict[str, Any]:
    """The options of one SLURM job (what its script shows); checks ``jobqueue_options`` against
    what this dask-jobqueue's SLURMCluster takes."""
    _jobqueue()
    from dask_jobqueue.core import Job, JobQueueCluster
    from dask_jobqueue.slurm import SLURMJob

    job = _parameters(SLURMJob.__init__, Job.__init__)
    unknown = sorted(set(spec.jobqueue_options) - job - _parameters(JobQueueCluster.__init__))
    if unknown:
        raise ConfigError(
            f"cluster.jobqueue_options: {unknown} are not options of dask_jobqueue.SLURMCluster "
            f"(its job options: {', '.join(sorted(job - {'scheduler', 'name'}))})"
        )
    return {k: v for k, v in _slurm_options(spec).items() if k in job}


def slurm_job_script(spec: SlurmClusterSpec, scheduler: str = SCHEDULER_PLACEHOLDER) -> str:
    """The batch script each SLURM job runs (one per job), as dask-jobqueue writes it."""
    import tempfile

    options = _job_options(spec)  # first: says which extra to install when dask-jobqueue is missing
    from dask_jobqueue.slurm import SLURMJob

    logs = options.get("log_directory")
    if logs is None:
        return SLURMJob(scheduler=scheduler, name="vdbflow-worker", **options).job_script()
    with tempfile.TemporaryDirectory() as stand_in:  # dask-jobqueue makes a missing log_directory: not here
        script = SLURMJob(scheduler=scheduler, name="vdbflow-worker", **{**options, "log_directory": stand_in})
        return script.job_script().replace(stand_in, str(logs))


def describe_cluster(spec: Any) -> str:
    """One line saying what the job will run on."""
    if isinstance(spec, LocalClusterSpec):
        return (
            f"embedded LocalCluster: {_local_workers(spec)} worker process(es) x {spec.threads_per_worker} "
            f"thread(s){', ' + spec.memory_limit + ' each' if spec.memory_limit else ''}"
        )
    if isinstance(spec, AddressClusterSpec):
        return f"existing scheduler at {spec.address}"
    if isinstance(spec, CudaClusterSpec):
        try:
            import dask_cuda  # noqa: F401

            note = ""
        except ImportError:
            note = ' (dask-cuda is not installed here: pip install "vdbflow[gpu]")'
        devices = ",".join(map(str, spec.devices)) if spec.devices else "all"
        return f"dask-cuda LocalCUDACluster, one worker per GPU (devices {devices}){note}"
    if isinstance(spec, SlurmClusterSpec):
        jobs = (
            f"{spec.adapt.minimum_jobs} to {spec.adapt.maximum_jobs} job(s) as the work needs"
            if spec.adapt is not None
            else f"{spec.jobs} job(s)"
        )
        return (
            f"SLURM: {jobs} on queue {spec.queue!r}"
            f"{' account ' + repr(spec.account) if spec.account else ''}, {spec.cores} cores, {spec.memory}, "
            f"{spec.processes} worker process(es) each, walltime {spec.walltime}; starts when "
            f"{spec.wait_for_workers} worker(s) are up (waits up to {spec.wait_timeout:g} s)"
        )
    raise ConfigError(f"expected a cluster section, got {type(spec).__name__}")


class _NoTaskTracebacks(logging.Filter):
    """Drops a worker's "Compute Failed" reports (a failed task's error and traceback, many lines), and
    the traceback of a heartbeat that finds the scheduler gone (a job's cluster closing after it failed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not message.startswith(("Compute Failed", "Failed to communicate with scheduler during heartbeat"))


class QuietTaskErrors(WorkerPlugin):
    """A worker plugin for the job's own local workers, which share its stderr: a failed task's
    traceback is not printed there (the job reports the error in one line; ``-vv`` shows it all)."""

    name = "vdbflow-quiet-task-errors"

    def setup(self, worker: Any) -> None:
        logger = logging.getLogger("distributed.worker")
        if not any(isinstance(f, _NoTaskTracebacks) for f in logger.filters):
            logger.addFilter(_NoTaskTracebacks())

    def teardown(self, worker: Any) -> None:
        logger = logging.getLogger("distributed.worker")
        for f in [f for f in logger.filters if isinstance(f, _NoTaskTracebacks)]:
            logger.removeFilter(f)


def _quiet_task_errors(client: Any, spec: Any) -> None:
    """Keep the tracebacks of failed tasks off stderr for local workers, unless Dask's logs are shown
    (``distributed`` logging at INFO or below: ``vdbflow run -vv``, or the API's default)."""
    local = isinstance(spec, (LocalClusterSpec, CudaClusterSpec))
    if local and logging.getLogger("distributed").getEffectiveLevel() > logging.INFO:
        client.register_plugin(QuietTaskErrors(), name=QuietTaskErrors.name)


def _no_http_server(scheduler: Any) -> None:
    """Stop the HTTP server a scheduler starts whatever its options (health, metrics and info pages on
    port 8787 even without a dashboard), so ``dashboard: false`` leaves no port open but Dask's own."""
    server = getattr(scheduler, "http_server", None)
    if server is not None:
        server.stop()
        scheduler.services.pop("dashboard", None)


@contextlib.contextmanager
def _http_routes(dashboard: str | None) -> Iterator[None]:
    """Without a dashboard, the schedulers started here serve no HTTP routes at all."""
    import dask

    if dashboard is not None:
        yield
        return
    with dask.config.set({"distributed.scheduler.http.routes": []}):
        yield


@contextlib.contextmanager
def open_cluster(spec: Any) -> Iterator[Any]:
    """A ``distributed.Client`` for ``spec``; clusters started here are shut down on exit.

    A scheduler started here serves its dashboard on ``spec.dashboard_address`` (127.0.0.1 by default)
    or, with ``dashboard: false``, no HTTP server at all.  A local cluster (``local``, ``cuda``) whose
    start fails, e.g. because a worker process was killed while starting, is started again, up to
    ``START_ATTEMPTS`` times; SLURM jobs are waited for up to ``cluster.wait_timeout`` seconds.
    """
    import distributed

    cluster = _start_with_retries(spec, distributed)
    if cluster is not None and spec.dashboard_address is None:
        _no_http_server(cluster.scheduler)
    try:
        client = distributed.Client(cluster if cluster is not None else spec.address)
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    try:
        _quiet_task_errors(client, spec)
        if isinstance(spec, SlurmClusterSpec):
            _wait_for_workers(client, spec)  # queued jobs: the run starts with the first workers
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _wait_for_workers(client: Any, spec: SlurmClusterSpec) -> None:
    try:
        client.wait_for_workers(spec.wait_for_workers, timeout=spec.wait_timeout)
    except (TimeoutError, asyncio.TimeoutError):
        arrived = len(client.scheduler_info(n_workers=-1)["workers"])
        raise ClusterError(
            f"expected {spec.wait_for_workers} worker(s) within cluster.wait_timeout "
            f"({spec.wait_timeout:g} s), got {arrived}: are the SLURM jobs still queued or did they "
            "fail? (squeue --me; the jobs' output files say why a worker exited)"
        ) from None


def _start_with_retries(spec: Any, distributed: Any) -> Any:
    """``_start(spec)``; a local cluster that fails to start (a worker that died while starting makes
    ``LocalCluster`` raise ``RuntimeError: Nanny failed to start``) is started again, each retry logged."""
    retry = isinstance(spec, (LocalClusterSpec, CudaClusterSpec))
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            with _http_routes(spec.dashboard_address):
                return _start(spec, distributed)
        except (RuntimeError, OSError, TimeoutError, asyncio.TimeoutError) as err:
            if not retry:
                raise
            if attempt == START_ATTEMPTS:
                raise ClusterError(
                    f"expected the cluster ({describe_cluster(spec)}) to start, it failed "
                    f"{START_ATTEMPTS} times; the last time: {type(err).__name__}: {err}"
                ) from err
            wait = START_BACKOFF_S * 2 ** (attempt - 1)
            log.warning(
                "the cluster did not start (%s: %s; did a worker die while starting?): starting it again "
                "in %g s (attempt %d of %d)",
                type(err).__name__,
                err,
                wait,
                attempt + 1,
                START_ATTEMPTS,
            )
            time.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def _start(spec: Any, distributed: Any) -> Any:
    """The cluster ``spec`` asks for, started (None for an existing scheduler's address)."""
    # a scheduler binds an HTTP server whatever it is told; without a dashboard it gets a free port on
    # localhost (not 8787 on every interface) and is stopped right after the start
    dashboard = spec.dashboard_address or "127.0.0.1:0"
    show = {"dashboard": spec.dashboard_address is not None}
    cluster = None
    if isinstance(spec, LocalClusterSpec):
        kwargs: dict[str, Any] = {
            "n_workers": _local_workers(spec),
            "threads_per_worker": spec.threads_per_worker,
            "processes": True,
            "dashboard_address": dashboard,
            "scheduler_kwargs": show,
        }
        if spec.memory_limit:
            kwargs["memory_limit"] = spec.memory_limit
        cluster = distributed.LocalCluster(**kwargs)
    elif isinstance(spec, CudaClusterSpec):
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise MissingExtraError("cluster.kind 'cuda' needs dask-cuda: pip install \"vdbflow[gpu]\"") from None
        kwargs = {"dashboard_address": dashboard, "scheduler_kwargs": show}
        if spec.devices:
            kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.devices))
        if spec.rmm_pool_size:
            kwargs["rmm_pool_size"] = spec.rmm_pool_size
        cluster = LocalCUDACluster(**kwargs)
    elif isinstance(spec, SlurmClusterSpec):
        jobqueue = _jobqueue()
        _job_options(spec)  # refuses options this dask-jobqueue does not take
        cluster = jobqueue.SLURMCluster(
            name="vdbflow-worker", scheduler_options={"dashboard_address": dashboard, **show}, **_slurm_options(spec)
        )
        try:
            if spec.adapt is not None:
                cluster.adapt(minimum_jobs=spec.adapt.minimum_jobs, maximum_jobs=spec.adapt.maximum_jobs)
            else:
                cluster.scale(jobs=spec.jobs)
        except BaseException:
            cluster.close()
            raise
    return cluster
