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
            [sys.executable, "-m", "vdbflow.jobs.cli", "run", str(config)],
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

    from vdbflow.jobs.writers import netcdf_file

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
