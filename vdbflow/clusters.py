"""Dask clusters for batch jobs: the embedded LocalCluster, an existing scheduler, dask-cuda's
LocalCUDACluster and dask-jobqueue's SLURMCluster, each from its config section."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from .config import (
    AddressClusterSpec,
    ConfigError,
    CudaClusterSpec,
    LocalClusterSpec,
    SlurmClusterSpec,
)

SCHEDULER_PLACEHOLDER = "tcp://<scheduler address>:8786"


def _local_workers(spec: LocalClusterSpec) -> int:
    return spec.workers or max(1, (os.cpu_count() or 1) // spec.threads_per_worker)


def _slurm_options(spec: SlurmClusterSpec) -> dict[str, Any]:
    options = {"queue": spec.queue, "account": spec.account, "walltime": spec.walltime, "cores": spec.cores,
               "memory": spec.memory, "processes": spec.processes,
               "job_extra_directives": list(spec.job_extra_directives),
               "job_script_prologue": list(spec.job_script_prologue), "interface": spec.interface,
               "local_directory": spec.local_directory, "python": spec.python}
    return {k: v for k, v in options.items() if v is not None}


def _jobqueue() -> Any:
    try:
        import dask_jobqueue
    except ImportError:
        raise ConfigError("cluster.kind 'slurm' needs dask-jobqueue: pip install \"vdbflow[slurm]\"") from None
    return dask_jobqueue


def slurm_job_script(spec: SlurmClusterSpec, scheduler: str = SCHEDULER_PLACEHOLDER) -> str:
    """The batch script each SLURM job runs (one per ``jobs``), as dask-jobqueue writes it."""
    _jobqueue()
    from dask_jobqueue.slurm import SLURMJob

    return SLURMJob(scheduler=scheduler, name="vdbflow-worker", **_slurm_options(spec)).job_script()


def describe_cluster(spec: Any) -> str:
    """One line saying what the job will run on."""
    if isinstance(spec, LocalClusterSpec):
        return (f"embedded LocalCluster: {_local_workers(spec)} worker process(es) x {spec.threads_per_worker} "
                f"thread(s){', ' + spec.memory_limit + ' each' if spec.memory_limit else ''}")
    if isinstance(spec, AddressClusterSpec):
        return f"existing scheduler at {spec.address}"
    if isinstance(spec, CudaClusterSpec):
        try:
            import dask_cuda  # noqa: F401
            note = ""
        except ImportError:
            note = " (dask-cuda is not installed here: pip install \"vdbflow[gpu]\")"
        devices = ",".join(map(str, spec.devices)) if spec.devices else "all"
        return f"dask-cuda LocalCUDACluster, one worker per GPU (devices {devices}){note}"
    if isinstance(spec, SlurmClusterSpec):
        return (f"SLURM: {spec.jobs} job(s) on queue {spec.queue!r}"
                f"{' account ' + repr(spec.account) if spec.account else ''}, {spec.cores} cores, {spec.memory}, "
                f"{spec.processes} worker process(es) each, walltime {spec.walltime}")
    raise ConfigError(f"expected a cluster section, got {type(spec).__name__}")


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
    or, with ``dashboard: false``, no HTTP server at all.
    """
    import distributed

    with _http_routes(spec.dashboard_address):
        cluster = _start(spec, distributed)
    if cluster is not None and spec.dashboard_address is None:
        _no_http_server(cluster.scheduler)
    client = distributed.Client(cluster if cluster is not None else spec.address)
    try:
        if isinstance(spec, SlurmClusterSpec):
            client.wait_for_workers(1)  # queued jobs: the run starts with the first worker
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _start(spec: Any, distributed: Any) -> Any:
    """The cluster ``spec`` asks for, started (None for an existing scheduler's address)."""
    # a scheduler binds an HTTP server whatever it is told; without a dashboard it gets a free port on
    # localhost (not 8787 on every interface) and is stopped right after the start
    dashboard = spec.dashboard_address or "127.0.0.1:0"
    show = {"dashboard": spec.dashboard_address is not None}
    cluster = None
    if isinstance(spec, LocalClusterSpec):
        kwargs: dict[str, Any] = {"n_workers": _local_workers(spec), "threads_per_worker": spec.threads_per_worker,
                                  "processes": True, "dashboard_address": dashboard, "scheduler_kwargs": show}
        if spec.memory_limit:
            kwargs["memory_limit"] = spec.memory_limit
        cluster = distributed.LocalCluster(**kwargs)
    elif isinstance(spec, CudaClusterSpec):
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ConfigError("cluster.kind 'cuda' needs dask-cuda: pip install \"vdbflow[gpu]\"") from None
        kwargs = {"dashboard_address": dashboard, "scheduler_kwargs": show}
        if spec.devices:
            kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, spec.devices))
        if spec.rmm_pool_size:
            kwargs["rmm_pool_size"] = spec.rmm_pool_size
        cluster = LocalCUDACluster(**kwargs)
    elif isinstance(spec, SlurmClusterSpec):
        jobqueue = _jobqueue()
        cluster = jobqueue.SLURMCluster(name="vdbflow-worker", scheduler_options={"dashboard_address": dashboard,
                                                                                  **show},
                                        **_slurm_options(spec))
        cluster.scale(jobs=spec.jobs)
    return cluster
