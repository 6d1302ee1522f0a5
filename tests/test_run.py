"""``vdbflow run`` end to end through the CLI: results read back with xarray and checked against
analytic Jacobians, provenance, NetCDF, several grids, an interrupted run, and the templates' dry runs."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import yaml
from click.testing import CliRunner

import vdbflow
from vdbflow import synthetic
from vdbflow.jobs.cli.main import main
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.points import plane

REPO = Path(__file__).resolve().parents[1]
MATRIX = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 0.125]]


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def base_config(tmp_path: Path, **sections) -> dict:
    cfg = {
        "volume": {"synthetic": {"field": "linear", "resolution": 32, "params": {"matrix": MATRIX}}},
        "points": {"kind": "random", "count": 20_000, "chunk": 5_000, "seed": 3},
        "sampling": {"mode": "linear", "outputs": ["value", "jacobian", "divergence", "vorticity"]},
        "cluster": {"kind": "local", "workers": 2, "dashboard": False},
        "output": {"path": str(tmp_path / "result.zarr")},
    }
    cfg.update(sections)
    return cfg


def invoke(*args: str):
    return CliRunner(env={"COLUMNS": "250"}).invoke(main, list(args), catch_exceptions=False)


@pytest.mark.slow
def test_run_linear_field_end_to_end(tmp_path):
    """A linear field u = A x: trilinear sampling is exact wherever the stencil is active, so the
    stored Jacobian equals A there, divergence equals trace(A) and vorticity the curl of A x."""
    cfg = base_config(tmp_path)
    cfg["sampling"]["outputs"].append("inside")
    cfg_path = write_config(tmp_path / "job.yaml", cfg)
    result = invoke("run", str(cfg_path))
    assert result.exit_code == 0, result.output
    assert "summary" in result.output and "20,000" in result.output
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert ds.sizes["point"] == 20_000
    assert set(ds.data_vars) == {"velocity", "velocity_jacobian", "divergence", "vorticity", "stencil_inside"}
    assert ds["velocity_jacobian"].dims == ("point", "component", "axis")
    world = np.stack([ds[c].values for c in "xyz"], axis=1)
    interior = synthetic.shell_interior(world, 32, 2 * np.pi, 0.35, 0.5, 1)
    vol = synthetic.flow_volume(synthetic.linear_field(MATRIX), 32)
    inside = ds["stencil_inside"].values
    np.testing.assert_array_equal(inside, vol.stencil_inside(world))
    assert inside[interior].all() and inside.sum() > interior.sum()  # the analytic test is conservative
    np.testing.assert_allclose(
        ds["velocity_jacobian"].values[inside], np.broadcast_to(MATRIX, (inside.sum(), 3, 3)), atol=2e-4
    )  # exact (to float32) wherever the stencil reads only data
    assert interior.sum() > 5_000
    A = np.asarray(MATRIX)
    J = ds["velocity_jacobian"].values[interior]
    np.testing.assert_allclose(J, np.broadcast_to(A, J.shape), atol=2e-4)
    np.testing.assert_allclose(ds["velocity"].values[interior], world[interior] @ A.T, atol=2e-4)
    np.testing.assert_allclose(ds["divergence"].values[interior], np.trace(A), atol=5e-4)
    curl = [A[2, 1] - A[1, 2], A[0, 2] - A[2, 0], A[1, 0] - A[0, 1]]
    np.testing.assert_allclose(ds["vorticity"].values[interior], np.broadcast_to(curl, (interior.sum(), 3)), atol=5e-4)
    # the summary's analytic error is the same figure over the points whose stencil reads only active
    # voxels (stencil_inside, as the stored flag says), and it is stored with the provenance
    assert ds.attrs["analytic_interior_points"] == inside.sum()
    assert ds.attrs["analytic_jacobian_max_error"] == pytest.approx(
        np.abs(ds["velocity_jacobian"].values[inside] - A).max(), rel=1e-6, abs=1e-7
    )
    # provenance: the config round-trips, versions and timings are there
    stored = load_config(text=ds.attrs["vdbflow_config"])
    assert stored.model_dump() == load_config(cfg_path).model_dump()
    versions = json.loads(ds.attrs["versions"])
    assert versions["vdbflow"] == vdbflow.__version__ and "dask" in versions and "xarray" in versions
    assert json.loads(ds.attrs["timings_s"])["total_s"] > 0
    assert not list(tmp_path.glob(".result.zarr.*"))  # nothing partial left behind


@pytest.mark.slow
def test_run_in_index_space(tmp_path):
    """Points and Jacobians in index space: J_index = A h (h the voxel size), and the stored analytic
    error is measured in that space too."""
    cfg = base_config(tmp_path, points={"kind": "grid", "shape": [12, 10, 8], "space": "index", "chunk": 300})
    cfg["sampling"] = {"outputs": ["jacobian", "inside"]}
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert list(ds["axis"].values) == ["i", "j", "k"]
    # the lattice keeps its shape: dim lattice_i follows i, and so on
    assert dict(ds["velocity_jacobian"].sizes) == {
        "lattice_i": 12,
        "lattice_j": 10,
        "lattice_k": 8,
        "component": 3,
        "axis": 3,
    }
    assert ds["i"].dims == ("lattice_i", "lattice_j", "lattice_k") and "points_shape" not in ds.attrs
    np.testing.assert_allclose(ds["i"].values[:, 0, 0], np.linspace(0, 31, 12))
    np.testing.assert_allclose(np.ptp(ds["i"].values, axis=(1, 2)), 0)  # i is constant across lattice_j, lattice_k
    np.testing.assert_allclose(ds["k"].values[0, 0, :], np.linspace(0, 31, 8))
    ds = ds.stack(point=("lattice_i", "lattice_j", "lattice_k")).transpose("point", ...)  # flat, C order
    idx = np.stack([ds[c].values for c in "ijk"], axis=1)
    np.testing.assert_allclose(idx.min(axis=0), [0, 0, 0])  # the lattice spans the index bounding box
    np.testing.assert_allclose(idx.max(axis=0), [31, 31, 31])
    inside = ds["stencil_inside"].values
    h = 2 * np.pi / 32
    np.testing.assert_allclose(
        ds["velocity_jacobian"].values[inside], np.broadcast_to(np.asarray(MATRIX) * h, (inside.sum(), 3, 3)), atol=2e-5
    )
    assert ds.attrs["analytic_jacobian_max_error"] < 2e-5


@pytest.mark.slow
def test_run_taylor_green_from_nvdb_to_netcdf_with_two_grids(tmp_path):
    """An .nvdb with two grids sampled at a slice plane into NetCDF; values against the in-memory
    volume, the stored checksum against the file."""
    tg = synthetic.flow_volume(synthetic.taylor_green(), resolution=24)
    speed = vdbflow.Volume.from_voxels(
        tg.active_voxels(), np.linalg.norm(tg.active_values(), axis=1), transform=tg.index_to_world, name="speed"
    )
    nvdb = tmp_path / "flow.nvdb"
    vdbflow.save(nvdb, {"velocity": tg, "speed": speed})
    plane = {
        "kind": "plane",
        "origin": [0.5, 0.5, 3.0],
        "u": [5.0, 0.0, 0.0],
        "v": [0.0, 5.0, 0.5],
        "resolution": [40, 30],
        "chunk": 500,
    }
    cfg = base_config(
        tmp_path,
        volume={"path": str(nvdb), "grids": ["velocity", "speed"]},
        points=plane,
        output={"path": str(tmp_path / "slice.nc")},
    )
    cfg["sampling"] = {"mode": "linear", "outputs": ["value", "jacobian"]}
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 0, result.output
    ds = xr.open_dataset(tmp_path / "slice.nc", engine="h5netcdf")
    assert dict(ds["velocity"].sizes) == {"plane_s": 40, "plane_t": 30, "component": 3}
    assert "points_shape" not in ds.attrs and "featureType" not in ds.attrs and ds.attrs["Conventions"] == "CF-1.10"
    s, t = np.meshgrid(np.linspace(0, 1, 40), np.linspace(0, 1, 30), indexing="ij")
    expect = np.array([0.5, 0.5, 3.0]) + s[..., None] * [5.0, 0, 0] + t[..., None] * [0, 5.0, 0.5]
    pts = np.stack([ds[c].values for c in "xyz"], axis=-1)
    np.testing.assert_allclose(pts, expect, rtol=0, atol=1e-12)
    ref = tg.sample_grad(expect, dims=("plane_s", "plane_t"))
    np.testing.assert_array_equal(ds["velocity"].values, ref["velocity"].values)
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, ref["velocity_jacobian"].values)
    np.testing.assert_array_equal(ds["speed"].values, speed.sample(expect)["speed"].values)
    digest = hashlib.sha256(nvdb.read_bytes()).hexdigest()
    assert json.loads(ds.attrs["input_sha256"]) == {"velocity": digest, "speed": digest}


@pytest.mark.slow
def test_run_points_from_files(tmp_path):
    """Points read from .npy, .csv, .parquet and .zarr come back as the result's coordinates."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(5)
    pts = rng.uniform(0.5, 5.5, (3000, 3))
    np.save(tmp_path / "p.npy", pts)
    pd.DataFrame(pts, columns=list("xyz")).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame(pts, columns=["px", "py", "pz"]).to_parquet(tmp_path / "p.parquet")
    xr.DataArray(pts, dims=("n", "c")).to_dataset(name="probes").to_zarr(tmp_path / "p.zarr", zarr_format=2)
    vol = synthetic.flow_volume(synthetic.abc_flow(), resolution=24)
    expect = vol.sample_grad(pts)
    for i, spec in enumerate(
        [
            {"path": "p.npy"},
            {"path": "p.csv"},
            {"path": "p.parquet", "columns": ["px", "py", "pz"]},
            {"path": "p.zarr", "array": "probes"},
        ]
    ):
        spec = {"kind": "file", "chunk": 1000, **spec, "path": str(tmp_path / spec["path"])}
        out = tmp_path / f"r{i}.zarr"
        cfg = base_config(tmp_path, points=spec, output={"path": str(out)})
        cfg["volume"] = {"synthetic": {"field": "abc", "resolution": 24}}
        cfg["sampling"] = {"outputs": ["value", "jacobian"]}
        result = invoke("run", str(write_config(tmp_path / f"job{i}.yaml", cfg)))
        assert result.exit_code == 0, (spec, result.output)
        ds = xr.open_zarr(out)
        np.testing.assert_allclose(np.stack([ds[c].values for c in "xyz"], axis=1), pts, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(ds["velocity_jacobian"].values, expect["velocity_jacobian"].values)


@pytest.mark.slow
def test_overwrite_always_replaces_and_set_overrides(tmp_path):
    cfg_path = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    assert invoke("run", str(cfg_path)).exit_code == 0
    result = invoke("run", str(cfg_path), "--set", "output.overwrite=always", "--set", "points.count=1234")
    assert result.exit_code == 0, result.output
    assert xr.open_zarr(tmp_path / "result.zarr").sizes["point"] == 1234
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "result.zarr"]


def fake_result(path: Path, content: str) -> Path:
    """A directory shaped like a vdbflow Zarr result (vdbflow's attrs, one array holding ``content``)."""
    path.mkdir()
    (path / ".zattrs").write_text(json.dumps({"title": "vdbflow run result", "vdbflow_config": "{}"}))
    (path / "data").mkdir()
    (path / "data" / ".zarray").write_text("{}")
    (path / "data" / "0").write_text(content)
    return path


def test_publish_swaps_atomically_and_never_overwrites_unasked(tmp_path):
    from vdbflow.jobs.publish.output import OutputError, partial_path, publish

    final = tmp_path / "r.zarr"
    for content in ("old", "new"):
        part = fake_result(partial_path(final), content)
        publish(part, final, "always")
        assert (final / "data" / "0").read_text() == content and not part.exists()
    part = fake_result(partial_path(final), "newer")
    with pytest.raises(OutputError, match="the complete result is kept at .*unpublished"):
        publish(part, final, "never")
    (kept,) = tmp_path.glob("r.zarr.unpublished-*")
    assert (kept / "data" / "0").read_text() == "newer" and (final / "data" / "0").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([final.name, kept.name])


def _running_partial(tmp_path: Path) -> list[Path]:
    """Chunk files already written into a partial store."""
    return [p for p in tmp_path.glob(".result.zarr.partial-*/velocity/*") if not p.name.startswith(".")]


# a worker preload: once a chunk of the result's velocity is written, a worker that finishes writing a
# chunk creates the marker file and stops (for two minutes at most), so the run is certainly mid-write,
# and cannot finish, when the test kills it
STALL_AFTER_A_WRITE = """
import glob
import time

from distributed import WorkerPlugin


class StallAfterAWrite(WorkerPlugin):
    def transition(self, key, start, finish, **kwargs):
        name = key[0] if isinstance(key, tuple) else key
        if finish == "memory" and str(name).startswith(("store-map", "vdbflow-write-index")) and glob.glob({chunks!r}):
            open({marker!r}, "a").close()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(0.05)


async def dask_setup(worker):
    await worker.plugin_add(StallAfterAWrite(), name="stall-after-a-write")
"""


@pytest.mark.slow
def test_interrupted_run_leaves_no_result_and_rerun_succeeds(tmp_path):
    cfg = base_config(tmp_path)
    cfg["points"] = {"kind": "random", "count": 2_000_000, "chunk": 20_000}
    cfg["volume"]["synthetic"]["resolution"] = 24
    cfg_path = write_config(tmp_path / "job.yaml", cfg)
    marker = tmp_path / "mid-write"
    preload = tmp_path / "stall_after_a_write.py"
    chunks = str(tmp_path / ".result.zarr.partial-*" / "velocity" / "*")  # what _running_partial finds
    preload.write_text(STALL_AFTER_A_WRITE.format(marker=str(marker), chunks=chunks))
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(cfg_path)],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # created by a worker once a chunk was written (and it stopped)
            assert proc.poll() is None, "the run ended before it was interrupted"
            assert time.monotonic() < deadline, "no worker wrote a chunk of the result within 120 s"
            time.sleep(0.05)
        assert _running_partial(tmp_path), "a worker said it wrote a chunk, but the partial store holds none"
        assert proc.poll() is None, "the run ended before it was interrupted"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the client and its cluster's processes, mid-write
        proc.wait()
    assert not (tmp_path / "result.zarr").exists()
    partial = list(tmp_path.glob(".result.zarr.partial-*"))
    assert len(partial) == 1
    # the rerun (smaller, to be quick) publishes a complete result and says where the stale one lies
    result = invoke("run", str(cfg_path), "--set", "points.count=10000", "-v")
    assert result.exit_code == 0, result.output
    assert "interrupted run" in result.output
    assert not list(tmp_path.glob(".result.zarr.*"))  # its writer is gone: the stale partial was removed
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert ds.sizes["point"] == 10_000 and np.isfinite(ds["velocity"].values).all()


@pytest.mark.slow
def test_run_on_an_existing_scheduler_address(tmp_path):
    """cluster.kind: address - a scheduler started outside the job (here a LocalCluster of processes)."""
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        cfg = base_config(tmp_path, cluster={"kind": "address", "address": lc.scheduler_address, "dashboard": False})
        cfg["points"] = {"kind": "line", "start": [0.5, 3.1, 3.1], "end": [5.8, 3.1, 3.1], "count": 500}
        result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
        assert result.exit_code == 0, result.output
        assert len(lc.scheduler.workers) == 2  # the job leaves the cluster it did not start running
    ds = xr.open_zarr(tmp_path / "result.zarr")
    np.testing.assert_allclose(ds["x"].values, np.linspace(0.5, 5.8, 500), rtol=0, atol=1e-12)
    inside = ~np.isnan(ds["divergence"].values) & synthetic.shell_interior(
        np.stack([ds[c].values for c in "xyz"], 1), 32, 2 * np.pi, 0.35, 0.5, 1
    )
    assert inside.sum() > 10  # the line crosses the shell twice (22 of its points lie well inside)
    np.testing.assert_allclose(ds["divergence"].values[inside], np.trace(MATRIX), atol=5e-4)


@pytest.mark.slow
def test_a_failing_task_exits_1_and_publishes_nothing(tmp_path, monkeypatch):
    """A task that fails on a worker mid-run: exit code 1, the error shown, the partial store removed."""
    import dask

    from vdbflow.jobs import executors as job

    def failing(*args):
        def boom(*parts):
            raise RuntimeError("a worker says no")

        return dask.delayed(boom)(*[dask.delayed(a) for a in args[:1]])

    monkeypatch.setattr(job, "_analytic_error", failing)  # a job whose volume is partitioned

    def failing_chunk(*args):  # a job whose workers read the whole volume: one task a chunk
        raise RuntimeError("a worker says no")

    from vdbflow.jobs import chunks

    monkeypatch.setattr(chunks, "sample_chunk", failing_chunk)
    result = invoke("run", str(write_config(tmp_path / "job.yaml", base_config(tmp_path))))
    assert result.exit_code == 1, result.output
    assert "a worker says no" in result.output and "no result was published" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path):
    cfg_path = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    result = invoke("run", str(cfg_path), "--dry-run")
    assert result.exit_code == 0, result.output
    for text in ("plan", "20,000", "LocalCluster: 2 worker", "result.zarr", "halo 1"):
        assert text in result.output, (text, result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


@pytest.mark.slow
def test_demo_config_runs(tmp_path, monkeypatch):
    """configs/demo.yaml itself (smaller through --set), via `vdbflow demo`."""
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "demo", "--set", "points.count=50000", "--set", "volume.synthetic.resolution=32", "--set", "cluster.workers=2"
    )
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "vdbflow-demo" / "result.zarr")
    assert {"velocity", "velocity_jacobian", "q_criterion", "vorticity_magnitude"} <= set(ds.data_vars)
    assert (tmp_path / "vdbflow-demo" / "taylor_green.nvdb").is_file()
    # Taylor-Green at h = 2 pi / 32: the trilinear Jacobian is first order, |J - J_exact| <= |u''| h
    assert 0 < ds.attrs["analytic_jacobian_max_error"] < 2 * np.pi / 32
    assert "max |J - J_exact|" in result.output


def test_particles_config_runs(tmp_path, monkeypatch):
    """configs/particles.yaml itself (smaller through --set): an FTLE field on its plane of seeds."""
    monkeypatch.chdir(tmp_path)
    small = ["--set", "points.resolution=[40, 30]", "--set", "volume.synthetic.resolution=32"]
    result = invoke("run", str(REPO / "configs" / "particles.yaml"), *small, "--set", "cluster.workers=2")
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "vdbflow-particles" / "ftle.zarr")
    assert ds.ftle.dims == ("plane_s", "plane_t") and ds.position.sizes["time"] == 5
    assert (ds.status == 0).all() and np.isfinite(ds.ftle).all()  # the box holds every particle for t <= 1


@pytest.mark.parametrize("template", ["slurm", "cuda", "remote"])
def test_cluster_templates_dry_run(tmp_path, template):
    """Each template validates; its input paths are pointed at files made here."""
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    vdbflow.save(tmp_path / "v.nvdb", {"velocity": vol})
    sets = ["--set", f"volume.path={tmp_path / 'v.nvdb'}", "--set", f"output.path={tmp_path / 'out.zarr'}"]
    if template == "slurm":
        import pandas as pd

        pd.DataFrame(np.zeros((10, 3)), columns=list("xyz")).to_parquet(tmp_path / "p.parquet")
        sets += ["--set", f"points.path={tmp_path / 'p.parquet'}"]
    if template == "remote":
        sets[-1] = f"output.path={tmp_path / 'out.nc'}"
    result = invoke("run", str(REPO / "configs" / f"{template}.yaml"), "--dry-run", *sets)
    assert result.exit_code == 0, result.output
    assert "nothing has run" in result.output
    if template == "slurm":
        out = result.output
        for line in (
            "#SBATCH -p compute",
            "#SBATCH -A flowlab",
            "#SBATCH -t 02:00:00",
            "#SBATCH --exclusive",
            "#SBATCH --cpus-per-task=32",
            "module load python/3.11",
            "--nworkers 8",
            "--nthreads 4",
            "distributed.cli.dask_worker tcp://<scheduler address>:8786",
        ):
            assert line in out, (line, out)
    if template == "cuda":
        assert "LocalCUDACluster" in result.output and "134,217,728" in result.output
    if template == "remote":
        assert "tcp://scheduler.example.org:8786" in result.output and "netcdf" in result.output


# -- bad configs: exit code 2, a message naming the key (and line), nothing written ----------------------

BAD = [
    (
        "unknown key",
        {"volume": {"synthetic": {"field": "abc", "resolutoin": 32}}},
        "volume.synthetic.resolutoin",
        "unknown key",
        "resolutoin:",
    ),
    ("wrong type", {"points": {"kind": "random", "count": "many"}}, "points.count", "integer", "count:"),
    ("bad choice", {"sampling": {"mode": "cubic"}}, "sampling.mode", "'cubic'", None),
    ("bad kind", {"points": {"kind": "sphere", "count": 5}}, "points", "'sphere'", None),
    ("missing key", {"output": {"overwrite": "always"}}, "output.path", "missing", None),
    ("missing volume file", {"volume": {"path": "nowhere.nvdb"}}, "volume.path", "nowhere.nvdb", "path: nowhere"),
    ("missing points file", {"points": {"kind": "file", "path": "nowhere.npy"}}, "points.path", "nowhere.npy", None),
    ("both sources", {"volume": {"path": "a.nvdb", "synthetic": {"field": "abc"}}}, "volume", "both", None),
    (
        "slurm walltime",
        {"cluster": {"kind": "slurm", "queue": "q", "cores": 4, "memory": "8GB", "walltime": "soon"}},
        "cluster.walltime",
        "walltime",
        None,
    ),
    ("bad address", {"cluster": {"kind": "address", "address": "localhost"}}, "cluster.address", "tcp://", None),
    ("generator params", {"volume": {"synthetic": {"field": "linear"}}}, "volume.synthetic.params", "matrix", None),
    ("advect dt", {"advect": {"t1": 1.0, "dt": 0}}, "advect.dt", "greater than 0", "dt: 0"),
    ("series unadvected", {"volume": {"series": {"paths": "s/*.nvdb"}}}, "advect", "volume.series", None),
    ("advect ftle at t0", {"advect": {"t1": 0.0, "dt": 0.1, "outputs": ["ftle"]}}, "advect", "t1 != t0", None),
    ("advect output", {"advect": {"t1": 1.0, "dt": 0.1, "outputs": ["pressure"]}}, "advect.outputs", "pressure", None),
    (
        "derived of closest",
        {"sampling": {"mode": "closest", "outputs": ["q_criterion"]}},
        "sampling.outputs",
        "closest",
        None,
    ),
]


@pytest.mark.parametrize("name,patch,key,text,line", BAD, ids=[b[0] for b in BAD])
def test_bad_configs_exit_2_naming_the_key(tmp_path, monkeypatch, name, patch, key, text, line):
    monkeypatch.chdir(tmp_path)
    cfg = base_config(tmp_path)
    for section, value in patch.items():
        cfg[section] = value
    cfg_path = write_config(tmp_path / "job.yaml", cfg)
    result = invoke("run", str(cfg_path))
    assert result.exit_code == 2, result.output
    assert key in result.output and text in result.output, result.output
    if line:  # the message gives the line of the key in the file
        number = next(n for n, text in enumerate(cfg_path.read_text().splitlines(), 1) if line in text)
        assert f"line {number})" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


@pytest.mark.parametrize("written", [True, False], ids=["from-file", "in-memory"])
def test_particle_job_writes_the_trajectories_of_advect(tmp_path, written):
    """``advect:`` jobs: seeds from a plane, one task a chunk on the workers; the store holds, bit for
    bit, what vdbflow.advect gives on the same volume and seeds, on the plane's dims, with provenance."""
    synth = {"field": "abc", "resolution": 24, "shell": [0.0, 0.9]}
    if written:
        synth["write"] = str(tmp_path / "abc.nvdb")
    cfg = base_config(
        tmp_path,
        volume={"synthetic": synth, "periodic": False},  # not periodic: particles leave the box
        points={
            "kind": "plane",
            "origin": [1.0, 1.5, 3.0],
            "u": [4.0, 0, 0],
            "v": [0, 3.0, 0],
            "resolution": [30, 20],
            "chunk": 250,
        },
        sampling={"mode": "lag4"},
        advect={"t0": 0.5, "t1": 1.7, "dt": 0.1, "save_every": 4, "outputs": ["velocity", "jacobian", "ftle"]},
    )
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 0, result.output
    assert "600 x 12 steps" in result.output and "particle-steps/s" in result.output
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert ds.position.dims == ("plane_s", "plane_t", "time", "axis") and ds.position.shape == (30, 20, 4, 3)
    vol = synthetic.flow_volume(synthetic.abc_flow(), 24, 2 * np.pi, np.float32, 0.0, 0.9, periodic=False)
    seeds = plane([1.0, 1.5, 3.0], [4.0, 0, 0], [0, 3.0, 0], (30, 20), keep_shape=True)
    np.testing.assert_array_equal(np.stack([ds[c].values for c in "xyz"], axis=-1), seeds)  # seeds kept as coords
    want = vdbflow.advect(
        vol, seeds, 0.5, 1.7, 0.1, "rk4", "lag4", save_every=4, with_velocity=True, with_jacobian=True, with_ftle=True
    )
    np.testing.assert_array_equal(ds.time.values, want.time.values)
    for got, expected in (
        (ds.position, want.position),
        (ds.status, want.status),
        (ds.end_time, want.end_time),
        (ds.velocity, want.velocity),
        (ds.velocity_jacobian, want.velocity_jacobian),
        (ds.ftle, want.ftle),
    ):
        np.testing.assert_array_equal(got.values.reshape(expected.shape), expected.values)
    assert {0, 1} <= set(np.unique(ds.status.values).tolist())  # some particles leave the shell's box
    left, nonfinite = int((ds.status.values == 1).sum()), int((ds.status.values == 2).sum())
    assert (ds.attrs["particles_left_data"], ds.attrs["particles_nonfinite"]) == (left, nonfinite)
    assert f"{left + nonfinite:,} of 600 particles: {left:,} left the data (status 1)" in result.output
    assert ds.attrs["steps"] == 12 and ds.attrs["method"] == "rk4" and ds.attrs["sampling_mode"] == "lag4"
    assert load_config(text=ds.attrs["vdbflow_config"]).advect.outputs == ["velocity", "jacobian", "ftle"]
    sha = json.loads(ds.attrs["input_sha256"]) if written else ds.attrs["input_sha256"]
    if written:
        assert sha["velocity"] == hashlib.sha256((tmp_path / "abc.nvdb").read_bytes()).hexdigest()
    assert json.loads(ds.attrs["worker_seconds_by_step"])["advection"] > 0


def test_particle_job_through_a_series_in_time(tmp_path):
    """volume.series: the double gyre as files; one task a chunk opens the series on its worker and
    advects through space and time (pchip): the store equals vdbflow.advect on the series, bit for bit."""
    from vdbflow.synthetic import unsteady

    times = np.arange(0.0, 3.01, 0.25)
    unsteady.write_series(unsteady.double_gyre(), tmp_path / "gyre", times, voxel_size=1 / 16, pad=2)
    cfg = base_config(
        tmp_path,
        volume={"series": {"paths": str(tmp_path / "gyre" / "*.nvdb")}},  # cache: auto
        points={
            "kind": "plane",
            "origin": [0.05, 0.05, 0.0],
            "u": [1.9, 0, 0],
            "v": [0, 0.9, 0],
            "resolution": [24, 12],
            "chunk": 100,
        },
        sampling={"mode": "lag4"},
        advect={"t0": 0.5, "t1": 2.5, "dt": 0.1, "save_every": 5, "outputs": ["velocity", "ftle"], "time": "pchip"},
    )
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "result.zarr")
    seeds = plane([0.05, 0.05, 0.0], [1.9, 0, 0], [0, 0.9, 0], (24, 12), keep_shape=True)
    series = vdbflow.open_series(str(tmp_path / "gyre" / "*.nvdb"))
    want = vdbflow.advect(
        series, seeds, 0.5, 2.5, 0.1, "rk4", "lag4", save_every=5, with_velocity=True, with_ftle=True, time="pchip"
    )
    for var in ("position", "status", "end_time", "velocity", "ftle"):
        np.testing.assert_array_equal(ds[var].values.reshape(want[var].shape), want[var].values)
    assert (ds.status == 0).all() and np.isfinite(ds.ftle).all()  # the gyre's box is invariant
    sha = json.loads(ds.attrs["input_sha256"])
    assert len(sha) == len(times) and all(len(v) == 64 for v in sha.values())
    assert ds.attrs["time_interpolation"] == "pchip"
    # volume.series.cache auto: the workers kept the window's steps open (t 0.25 .. 2.75 for pchip over [0.5, 2.5]:
    # 11 small files, far under a quarter of a worker's memory)
    assert ds.attrs["series_cache"] == 11
    # t1 beyond the series (by a hair): refused by the plan, so by a dry run too, exit 2
    bad = write_config(tmp_path / "bad.yaml", {**cfg, "advect": {**cfg["advect"], "t1": 3.0 + 1e-12}})
    for extra in ((), ("--dry-run",)):
        result = invoke("run", str(bad), "--set", f"output.path={tmp_path / 'bad.zarr'}", *extra)
        assert result.exit_code == 2, result.output
        assert "inside the series' times [0.0, 3.0], got t0=0.5, t1=3.000000000001" in result.output, result.output
    result = invoke(
        "run",
        str(bad),
        "--set",
        "volume.series.times=[0, 1]",
        "--set",
        f"output.path={tmp_path / 'b.zarr'}",
        "--dry-run",
    )
    assert result.exit_code == 2 and "one time per step (13 steps), got 2 times" in result.output, result.output


def test_particle_job_refuses_a_scalar_grid(tmp_path):
    vol = vdbflow.Volume.from_dense(np.ones((8, 8, 8), np.float32), name="density")
    vdbflow.save(tmp_path / "d.nvdb", {"density": vol})
    cfg = base_config(tmp_path, volume={"path": str(tmp_path / "d.nvdb")}, advect={"t1": 1.0, "dt": 0.1})
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 2, result.output
    assert "expected a vec3 float velocity grid" in result.output and "density" in result.output


def test_bad_config_files_and_overrides(tmp_path):
    good = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("volume: [unclosed\n")
    cases = [
        (["run", str(tmp_path / "absent.yaml")], "found nothing"),
        (["run", str(bad_yaml)], "not valid YAML"),
        (["run", str(good), "--set", "points.count"], "key.path=value"),
        (["run", str(good), "--set", "points.count=0"], "points.count (from --set)"),
        (["run", str(good), "--set", "output.path.deeper=1"], "not a mapping"),
    ]
    for args, text in cases:
        result = invoke(*args)
        assert result.exit_code == 2 and text in result.output, (args, result.output)
    # a table without the coordinate columns is refused before anything runs
    import pandas as pd

    pd.DataFrame(np.zeros((4, 3)), columns=["a", "b", "c"]).to_csv(tmp_path / "p.csv", index=False)
    result = invoke("run", str(good), "--set", f"points={{kind: file, path: {tmp_path / 'p.csv'}}}")
    assert result.exit_code == 2 and "missing ['x', 'y', 'z']" in result.output, result.output
    (tmp_path / "p.csv").unlink()
    # an existing output with overwrite: never is refused before anything runs
    (tmp_path / "result.zarr").mkdir()
    result = invoke("run", str(good))
    assert result.exit_code == 2 and "overwrite" in result.output
    # a grid that is not in the file, and derived outputs of a scalar grid
    vol = vdbflow.Volume.from_voxels(np.zeros((1, 3), int), np.ones(1, np.float32), name="rho")
    vdbflow.save(tmp_path / "s.nvdb", {"rho": vol})
    for sets, text in ((["volume.grids=[velocity]"], "not in"), ([], "vec3")):
        result = invoke(
            "run",
            str(good),
            "--set",
            f"volume={{path: {tmp_path / 's.nvdb'}}}",
            *[a for s in sets for a in ("--set", s)],
            "--set",
            "output.path=other.zarr",
        )
        assert result.exit_code == 2 and text in result.output, result.output


def test_blosc_takes_a_workers_spare_cores():
    from vdbflow.jobs.publish.writers.zarr_store import blosc_threads

    assert blosc_threads(2, 2, 1) == 1  # this machine's 2 workers x 1 thread: none spare
    assert blosc_threads(16, 1, 1) == 16  # one GPU worker on 16 cores: its 15 spare ones and its own
    assert blosc_threads(16, 4, 2) == 3
    assert blosc_threads(8, 16, 1) == 1 and blosc_threads(1, 1, 4) == 1
