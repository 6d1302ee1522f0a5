"""NetCDF job results on a persistent cluster (issue: the second job on long-lived workers failed with HDF5's
"unable to lock file"), and nothing left behind when a NetCDF job fails."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml

import vdbflow
from vdbflow import synthetic


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def persistent_cluster(tmp_path):
    """A scheduler and two worker processes of two threads each, started by hand as a user does
    (``dask scheduler``, ``dask worker``), living across jobs."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    common = {"cwd": tmp_path, "stderr": subprocess.STDOUT}
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dask",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dashboard-address",
            ":0",
        ],
        stdout=open(logs / "scheduler.log", "w"),  # noqa: SIM115 - closed with the process
        **common,
    )
    workers = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dask",
            "worker",
            address,
            "--nworkers",
            "2",
            "--nthreads",
            "2",
            "--dashboard-address",
            ":0",
        ],
        stdout=open(logs / "workers.log", "w"),  # noqa: SIM115
        **common,
    )
    try:
        import distributed

        deadline = time.monotonic() + 120
        with distributed.Client(address, timeout=60) as client:
            while len(client.scheduler_info()["workers"]) < 2:
                assert time.monotonic() < deadline, (logs / "workers.log").read_text()[-3000:]
                time.sleep(0.5)
        yield address
    finally:
        for p in (workers, scheduler):
            p.terminate()
        for p in (workers, scheduler):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def _config(tmp_path: Path, address: str | None) -> Path:
    vol = synthetic.flow_volume(synthetic.taylor_green(), 32)
    vol.to_nvdb(tmp_path / "tg.nvdb")
    cfg = {
        "volume": {"path": str(tmp_path / "tg.nvdb")},
        "points": {
            "kind": "plane",
            "origin": [0.1, 0.1, 3.0],
            "u": [6.0, 0, 0],
            "v": [0, 6.0, 0],
            "resolution": [300, 200],
            "chunk": 10_000,
        },
        "sampling": {"mode": "catmull_rom", "outputs": ["value", "jacobian", "q_criterion"]},
        "cluster": {"kind": "address", "address": address or "tcp://127.0.0.1:1"},  # or a client given
        "output": {"path": str(tmp_path / "slice.nc"), "overwrite": "always"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.mark.slow
def test_repeated_netcdf_jobs_on_long_lived_workers(tmp_path, persistent_cluster):
    """Four jobs in a row to the same NetCDF path on the same two worker processes: each publishes, each
    file holds the plane's samples (against sampling in this process), nothing hidden is left."""
    config = _config(tmp_path, persistent_cluster)
    vol = vdbflow.open(tmp_path / "tg.nvdb")
    for attempt in range(4):
        done = subprocess.run(
            [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(config)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"job {attempt + 1}: {done.stdout}\n{done.stderr}"
        with xr.open_dataset(tmp_path / "slice.nc", engine="h5netcdf") as ds:
            pts = np.stack([ds[c].values for c in "xyz"], axis=-1)
            ref = vol.sample_grad(
                pts, mode="catmull_rom", outputs=("value", "jacobian", "q_criterion"), dims=("plane_s", "plane_t")
            )
            np.testing.assert_array_equal(ds["velocity_jacobian"].values, ref["velocity_jacobian"].values)
            np.testing.assert_array_equal(ds["q_criterion"].values, ref["q_criterion"].values)
        assert sorted(p.name for p in tmp_path.glob(".slice*")) == []


@pytest.mark.slow
def test_a_failed_netcdf_job_leaves_nothing(tmp_path, monkeypatch):
    """The file is written from the chunks' Zarr store by one task; when that fails, neither the store nor
    the file is left beside the output, and no earlier result is touched."""
    import distributed

    from vdbflow.jobs.publish.writers import netcdf_file

    config = _config(tmp_path, None)
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        vdbflow.run(config, client=client)
        before = (tmp_path / "slice.nc").read_bytes()

        def fail(staged, staging, target):
            assert Path(staging).is_dir()  # the chunks were written
            raise OSError("disk full (injected)")

        monkeypatch.setattr(netcdf_file, "_write_file", fail)
        with pytest.raises(vdbflow.JobError, match="injected"):
            vdbflow.run(config, client=client)
    assert sorted(p.name for p in tmp_path.glob(".slice*")) == []
    assert (tmp_path / "slice.nc").read_bytes() == before


@pytest.mark.slow
def test_a_job_that_loses_a_worker_says_so(tmp_path):
    """A worker SIGKILLed mid-job (its nanny starts a fresh one): the job completes, and its summary and
    attrs say a worker was lost and how many tasks were computed again (issue: "workers 2" and nothing else)."""
    import os
    import signal
    import threading

    import distributed

    from vdbflow.jobs.progress import recomputed

    cfg = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 32}},
        "points": {"kind": "random", "count": 1_500_000, "chunk": 25_000, "seed": 1},
        "sampling": {"mode": "linear", "outputs": ["value", "jacobian"]},
        "cluster": {"kind": "address", "address": "tcp://127.0.0.1:1"},
        "output": {"path": str(tmp_path / "result.zarr")},
    }
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        pids = client.run(os.getpid)
        outcome: dict = {}
        job = threading.Thread(target=lambda: outcome.update(result=vdbflow.run(config, client=client)))
        job.start()
        deadline = time.monotonic() + 300
        while not any(len(list(p.rglob("velocity/*"))) > 3 for p in tmp_path.glob(".result.zarr.partial-*")):
            assert time.monotonic() < deadline and job.is_alive(), "the job wrote no chunks"
            time.sleep(0.05)
        os.kill(sorted(pids.values())[0], signal.SIGKILL)
        job.join(600)
    result = outcome["result"]
    assert result.workers_lost == 1 and result.workers == 2
    assert result.tasks_recomputed >= 0 and (result.recompute_seconds > 0) == (result.tasks_recomputed > 0)
    with xr.open_zarr(tmp_path / "result.zarr") as ds:
        assert ds.attrs["workers_lost"] == 1 and ds.attrs["tasks_recomputed"] == result.tasks_recomputed
        pts = np.stack([ds[c].values for c in "xyz"], axis=-1)
        vol = synthetic.flow_volume(synthetic.taylor_green(), 32)
        np.testing.assert_array_equal(ds["velocity_jacobian"].values, vol.sample_grad(pts)["velocity_jacobian"].values)
    records = [  # the count of the stream's repeated keys, on a stream made by hand
        {"key": "a", "startstops": [{"action": "compute", "start": 0.0, "stop": 2.0}]},
        {"key": "a", "startstops": [{"action": "compute", "start": 5.0, "stop": 6.0}]},
        {"key": "b", "startstops": [{"action": "compute", "start": 0.0, "stop": 1.0}]},
    ]
    assert recomputed(records) == (1, 2.0)


def test_the_summary_has_a_row_for_lost_workers():
    from rich.console import Console

    from vdbflow.jobs.cli.main import _print_summary
    from vdbflow.jobs.runner import JobResult

    timings = {"total_s": 1.0, "cluster_s": 0.1, "distribute_s": 0.1, "sample_and_write_s": 0.8}
    result = JobResult(
        Path("out.zarr"), 10, 0, 2, ["velocity"], timings, workers_lost=1, tasks_recomputed=3, recompute_seconds=1.25
    )
    console = Console(record=True, width=200)
    _print_summary(result, console)
    text = console.export_text()
    assert "workers lost" in text and "1 of 2 during the job; 3 task(s) computed again (1.2 s" in text
    quiet = JobResult(Path("out.zarr"), 10, 0, 2, ["velocity"], timings)
    console = Console(record=True, width=200)
    _print_summary(quiet, console)
    assert "workers lost" not in console.export_text()
