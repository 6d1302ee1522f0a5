"""Small jobs and independent readers for the tests of outputs on object stores, Zarr format 3 and
resumed jobs: a config, an in-process Dask cluster (``memory://`` is one process's memory), every stored
object of a result read as bytes, and a job run in its own process group that a test can SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
import yaml

import vdbflow
from vdbflow import synthetic

# the root metadata holds the run's own attrs (created, timings): every other object must match bit for bit
ROOT_METADATA = {".zattrs", ".zmetadata", "zarr.json"}
MANIFEST = ".vdbflow-manifest"


def volume_file(tmp_path: Path) -> Path:
    """A Taylor-Green field in an .nvdb file (the resume checks hash it)."""
    path = tmp_path / "input.nvdb"
    if not path.exists():
        vol = synthetic.flow_volume(synthetic.make_field("taylor_green"), 24, 2 * np.pi, np.dtype("float32"), 0.2, 0.5)
        vdbflow.save(path, {"velocity": vol})
    return path


def job(tmp_path: Path, path: str | Path, count: int = 4_000, chunk: int = 500, **output) -> dict:
    """A job of ``count`` random points in chunks of ``chunk``, values, Jacobians and Q, to ``path``."""
    return {
        "volume": {"path": str(volume_file(tmp_path))},
        "points": {"kind": "random", "count": count, "chunk": chunk, "seed": 7},
        "sampling": {"mode": "linear", "outputs": ["value", "jacobian", "q_criterion"]},
        "cluster": {"kind": "local", "workers": 1, "threads_per_worker": 1, "dashboard": False},
        "output": {"path": str(path), **output},
    }


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def client():
    """One in-process Dask worker (its tasks see this process's memory:// and patched functions)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as c,
    ):
        yield c


def objects(url: str | Path, storage_options: dict | None = None) -> dict[str, bytes]:
    """Every object of a store by key (root metadata and any manifest left out), read with plain fsspec."""
    fs, root = fsspec.core.url_to_fs(str(url), **(storage_options or {}))
    fs.invalidate_cache()
    out = {}
    for path in fs.find(root):
        key = path[len(root.rstrip("/")) :].lstrip("/")
        if key in ROOT_METADATA or key.startswith(MANIFEST):
            continue
        out[key] = fs.cat_file(path)
    return out


def same_data(a, b) -> None:
    """Two results hold the same variables, coordinates and values (attrs aside)."""
    import xarray as xr

    xr.testing.assert_identical(a.drop_attrs(deep=False), b.drop_attrs(deep=False))


# a worker preload: each unit's manifest record is written 0.4 s after its arrays, and counted in a marker file
SLOW_UNITS = """
import time

import vdbflow.jobs.publish.units as units

_write = getattr(units, "unslowed_write_json", units.write_json)
units.unslowed_write_json = _write


def slow_write(fs, path, document):
    if "/units/" in path:
        time.sleep(0.4)
    _write(fs, path, document)
    if "/units/" in path:
        with open({marker!r}, "a") as f:
            f.write("x")


units.write_json = slow_write
"""


def start_job(tmp_path: Path, config: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, Path]:
    """``vdbflow run CONFIG --resume`` in a new process group, its units slowed (:data:`SLOW_UNITS`); returns
    the process and the marker file that counts the units recorded."""
    marker = tmp_path / f"units-{time.monotonic_ns()}"
    preload = tmp_path / f"slow_units_{time.monotonic_ns()}.py"
    preload.write_text(SLOW_UNITS.format(marker=str(marker)))
    full_env = {**os.environ, **(env or {}), "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(config), "--resume", *extra],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, marker


def kill_after_units(proc: subprocess.Popen, marker: Path, units: int, limit_s: float = 300) -> None:
    """SIGKILL the job's whole process group (client, nannies, workers: a lost node) once ``units``
    units are recorded."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if marker.exists() and len(marker.read_text()) >= units:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the job ended before {units} unit(s) were written: {proc.stdout.read()}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
