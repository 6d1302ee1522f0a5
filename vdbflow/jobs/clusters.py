"""Dask clusters for batch jobs: the embedded LocalCluster, an existing scheduler, dask-cuda's
LocalCUDACluster and dask-jobqueue's SLURMCluster, each from its config section."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import dask
import distributed
from distributed.diagnostics.plugin import WorkerPlugin

from vdbflow.distribution.partitions import MAIN_GUARD_HINT, refuse_in_a_worker_import
from vdbflow.errors import ClusterError
from vdbflow.jobs.config.model import (
    AddressClusterSpec,
    ConfigError,
    CudaClusterSpec,
    LocalClusterSpec,
    SlurmClusterSpec,
    bytes_of,
)
from vdbflow.version import install_hint

log = logging.getLogger("vdbflow.cluster")

SCHEDULER_PLACEHOLDER = "tcp://<scheduler address>:8786"
START_ATTEMPTS = 3  # a local cluster whose worker dies while it starts is started again, this often in all
START_BACKOFF_S = 1.0  # seconds before the second attempt (doubled for each further one)


class MissingExtraError(ConfigError):
    """The cluster kind needs a package that is not installed (the message names the pip extra)."""


def local_workers(spec: LocalClusterSpec) -> int:
    """The worker processes of a local cluster: as configured, else one per core (over its threads)."""
    return spec.workers or max(1, (os.cpu_count() or 1) // spec.threads_per_worker)


def worker_memory_limit(spec: Any) -> tuple[int, str] | None:
    """The memory limit of each of the job's workers in bytes, and where it comes from, as far as the
    config says: a local cluster's ``memory_limit`` (Dask's default without one: the machine's memory
    divided among the workers), a SLURM job's ``memory`` divided among its ``processes``; None where the
    config does not say (an existing scheduler, dask-cuda's workers)."""
    if isinstance(spec, LocalClusterSpec):
        from distributed.worker_memory import parse_memory_limit

        quiet = logging.getLogger("vdbflow.cluster.memory")  # Dask warns of a limit above the machine's here
        quiet.disabled = True
        if spec.memory_limit is None:  # LocalCluster: the machine's memory over the workers
            limit = parse_memory_limit("auto", 1, local_workers(spec), logger=quiet)
            where = f"Dask's default: the machine's memory over {local_workers(spec)} worker(s)"
        else:
            limit = parse_memory_limit(spec.memory_limit, spec.threads_per_worker, logger=quiet)
            where = f"cluster.memory_limit {spec.memory_limit}"
        return None if limit is None else (int(limit), where)
    if isinstance(spec, SlurmClusterSpec):
        per_worker = bytes_of(spec.memory) // spec.processes
        return per_worker, f"cluster.memory {spec.memory} over {spec.processes} process(es)"
    return None


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
        raise MissingExtraError(f"cluster.kind 'slurm' needs dask-jobqueue: {install_hint('slurm')}") from None
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
            f"embedded LocalCluster: {local_workers(spec)} worker process(es) x {spec.threads_per_worker} "
            f"thread(s){', ' + spec.memory_limit + ' each' if spec.memory_limit else ''}"
        )
    if isinstance(spec, AddressClusterSpec):
        return f"existing scheduler at {spec.address}"
    if isinstance(spec, CudaClusterSpec):
        try:
            import dask_cuda  # noqa: F401

            note = ""
        except ImportError:
            note = f" (dask-cuda is not installed here: {install_hint('gpu')})"
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


class SubmitFailures(logging.Filter):
    """The failed submissions of one SLURM cluster's jobs (``sbatch`` refused them, or could not be run).

    dask-jobqueue submits in asyncio tasks of the cluster's event loop: a failure there is raised in a
    task nobody awaits, printed by asyncio and tornado as tracebacks (one or two a job) and otherwise
    lost, while the job waits ``wait_timeout`` for workers that cannot come.  The jobs record their
    failures here (:func:`_recording_job`), the wait for workers stops at the first, and as a logging
    filter this drops the tracebacks of exactly these exceptions (the job says it in one line)."""

    def __init__(self) -> None:
        super().__init__("vdbflow-submit-failures")
        self.errors: list[BaseException] = []

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if isinstance(record.exc_info, tuple) else None
        return not any(exc is e for e in self.errors)

    @contextlib.contextmanager
    def quieting(self, *loggers: str) -> Iterator[SubmitFailures]:
        """This filter on ``loggers`` (asyncio's and tornado's) while the cluster lives."""
        for name in loggers:
            logging.getLogger(name).addFilter(self)
        try:
            yield self
        finally:
            for name in loggers:
                logging.getLogger(name).removeFilter(self)

    def message(self, spec: SlurmClusterSpec) -> str:
        """The first failure in one line: the command, its exit status, what it printed."""
        err = self.errors[0]
        text = str(err)
        m = re.search(r"Exit code: (-?\d+)\nCommand:\n(.*?)\nstdout:\n(.*?)\nstderr:\n(.*)", text, re.DOTALL)
        if m is None:  # not the command's exit (an OSError starting it, a job id not found in its output)
            said = f"{type(err).__name__}: {' '.join(text.split())}"
        else:
            code, command, out, errors = m.groups()
            printed = " | ".join(line.strip() for line in (errors.strip() or out.strip() or "nothing").splitlines())
            said = f"`{command.strip()}` exited with status {code}: {printed}"
        jobs = (
            f"{len(self.errors)} of the job's SLURM job submissions"
            if len(self.errors) > 1
            else "a SLURM job submission"
        )
        return (
            f"expected the SLURM jobs of the workers to be submitted, {jobs} failed: {said} (check "
            f"cluster.queue {spec.queue!r}, account, memory, walltime and job_extra_directives against what "
            "the cluster allows; jobs submitted already are cancelled)"
        )


def _recording_job(job: Any, failures: SubmitFailures) -> Any:
    """dask-jobqueue's job class ``job`` (SLURMJob), recording a failed submission in ``failures`` (and
    marking itself failed, so that closing the cluster does not trip over a job that never started)."""
    from distributed.core import Status

    class RecordingSLURMJob(job):  # type: ignore[misc,valid-type]
        async def start(self) -> None:
            try:
                await super().start()
            except Exception as err:
                failures.errors.append(err)
                self.status = Status.failed
                raise

    return RecordingSLURMJob


def submit_command_missing(command: str = "sbatch") -> str | None:
    """What is wrong when SLURM's submit ``command`` is not on PATH (None when it is)."""
    if shutil.which(command) is not None:
        return None
    return (
        f"expected SLURM's {command!r} on PATH to submit the workers' jobs, found none (PATH="
        f"{os.environ.get('PATH', '')}): run `vdbflow run` where SLURM's commands are (a login node), or "
        "use cluster.kind 'local' or 'address'"
    )


def _submit_command_found(job: Any) -> None:
    """Refuses a SLURM cluster where the submit command of its job class ``job`` (``sbatch``) is not on
    PATH: dask-jobqueue would fail in the background and the job wait ``wait_timeout`` for nothing."""
    missing = submit_command_missing(shlex.split(job.submit_command)[0])
    if missing is not None:
        raise ClusterError(missing)


class _NoClosingHeartbeats(logging.Filter):
    """Drops the traceback of a heartbeat that finds the scheduler gone (a job's cluster closing after it
    failed); kept after the plugin's teardown, since a heartbeat already on its way can fail after it."""

    drops: tuple[str, ...] = ("Failed to communicate with scheduler during heartbeat",)

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.drops)


class _NoTaskTracebacks(_NoClosingHeartbeats):
    """Drops a worker's "Compute Failed" reports (a failed task's error and traceback, many lines) too."""

    drops = ("Compute Failed", *_NoClosingHeartbeats.drops)


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
        if not any(type(f) is _NoClosingHeartbeats for f in logger.filters):  # a late heartbeat of this close
            logger.addFilter(_NoClosingHeartbeats())


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
    if isinstance(spec, (LocalClusterSpec, CudaClusterSpec)):  # worker processes started here import __main__
        refuse_in_a_worker_import()
    failures = SubmitFailures()
    with failures.quieting("asyncio", "tornado.application", "distributed.deploy.spec"):
        cluster = _start_with_retries(spec, distributed, failures)
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
                _wait_for_workers(client, spec, failures)  # queued jobs: the run starts with the first workers
            yield client
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


WAIT_POLL_S = 0.5  # how often the wait for SLURM workers looks for failed submissions


def _wait_for_workers(client: Any, spec: SlurmClusterSpec, failures: SubmitFailures) -> None:
    """Until ``wait_for_workers`` workers are up; a failed job submission stops the wait at once."""
    deadline = time.monotonic() + spec.wait_timeout
    while True:
        if failures.errors:
            log.debug("the SLURM job submission failed", exc_info=failures.errors[0])
            raise ClusterError(failures.message(spec)) from failures.errors[0]
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            client.wait_for_workers(spec.wait_for_workers, timeout=min(WAIT_POLL_S, left))
            return
        except (TimeoutError, asyncio.TimeoutError):
            continue
    arrived = len(client.scheduler_info(n_workers=-1)["workers"])
    raise ClusterError(
        f"expected {spec.wait_for_workers} worker(s) within cluster.wait_timeout "
        f"({spec.wait_timeout:g} s), got {arrived}: are the SLURM jobs still queued or did they "
        "fail? (squeue --me; the jobs' output files say why a worker exited)"
    )


def _start_with_retries(spec: Any, distributed: Any, failures: SubmitFailures) -> Any:
    """``_start(spec)``; a local cluster that fails to start (a worker that died while starting makes
    ``LocalCluster`` raise ``RuntimeError: Nanny failed to start``) is started again, each retry logged."""
    retry = isinstance(spec, (LocalClusterSpec, CudaClusterSpec))
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            with _http_routes(spec.dashboard_address):
                return _start(spec, distributed, failures)
        except (RuntimeError, OSError, TimeoutError, asyncio.TimeoutError) as err:
            if not retry:
                raise
            if attempt == START_ATTEMPTS:
                raise ClusterError(
                    f"expected the cluster ({describe_cluster(spec)}) to start, it failed "
                    f"{START_ATTEMPTS} times; the last time: {type(err).__name__}: {err} ({MAIN_GUARD_HINT})"
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


def _start(spec: Any, distributed: Any, failures: SubmitFailures) -> Any:
    """The cluster ``spec`` asks for, started (None for an existing scheduler's address)."""
    # a scheduler binds an HTTP server whatever it is told; without a dashboard it gets a free port on
    # localhost (not 8787 on every interface) and is stopped right after the start
    dashboard = spec.dashboard_address or "127.0.0.1:0"
    show = {"dashboard": spec.dashboard_address is not None}
    cluster = None
    if isinstance(spec, LocalClusterSpec):
        kwargs: dict[str, Any] = {
            "n_workers": local_workers(spec),
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
            raise MissingExtraError(f"cluster.kind 'cuda' needs dask-cuda: {install_hint('gpu')}") from None
        kwargs = {"dashboard_address": dashboard, "scheduler_kwargs": show}
        if spec.devices:
            kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.devices))
        if spec.rmm_pool_size:
            try:
                import rmm  # noqa: F401 - dask-cuda makes the pool with it on each worker
            except ImportError:
                raise MissingExtraError(
                    f"cluster.rmm_pool_size needs RMM: {install_hint('gpu')} (CUDA 12) or {install_hint('gpu-cuda13')}"
                ) from None
            # each worker's pool, and CuPy's allocations (vdbflow's device arrays) taken from it
            kwargs["rmm_pool_size"] = spec.rmm_pool_size
            kwargs["rmm_allocator_external_lib_list"] = ["cupy"]
        cluster = LocalCUDACluster(**kwargs)
    elif isinstance(spec, SlurmClusterSpec):
        jobqueue = _jobqueue()
        _job_options(spec)  # refuses options this dask-jobqueue does not take
        job = getattr(jobqueue.SLURMCluster, "job_cls", None)  # dask_jobqueue.slurm.SLURMJob
        recording = {}
        if job is not None:
            _submit_command_found(job)
            recording["job_cls"] = _recording_job(job, failures)
        cluster = jobqueue.SLURMCluster(
            name="vdbflow-worker",
            scheduler_options={"dashboard_address": dashboard, **show},
            **recording,
            **_slurm_options(spec),
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
