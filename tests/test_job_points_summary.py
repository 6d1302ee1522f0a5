"""What a job says about its points: an empty points file is a config error (exit 2, nothing runs);
non-finite points are counted; the share of points whose stencil reads the background is stated,
on both paths (one pass per chunk, and partitioned), and equals the stencil-inside flags."""

import numpy as np
import pytest
import xarray as xr
from test_run import base_config, invoke, write_config

from vdbflow.errors import PointsError
from vdbflow.jobs.config.load import load_config


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_an_empty_points_file_is_a_config_error_and_nothing_runs(tmp_path, suffix):
    path = tmp_path / f"points{suffix}"
    if suffix == ".npy":
        np.save(path, np.zeros((0, 3)))
    else:
        path.write_text("x,y,z\n")
    cfg = base_config(tmp_path, points={"kind": "file", "path": str(path)})
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 2, result.output
    assert "expected at least one point" in result.output and str(path) in result.output
    assert not (tmp_path / "result.zarr").exists()


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        with distributed.Client(lc) as c:
            yield c


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [None, 2])
def test_the_summary_counts_non_finite_points_and_the_edge_of_the_data(tmp_path, client, partitions):
    from vdbflow.jobs.runner import run_job

    rng = np.random.default_rng(5)
    pts = rng.random((3000, 3)) * 3.2  # the 32^3 box of voxel size 0.1: inside and around its edges
    pts[[7, 100]] = [[np.nan, 1, 1], [1, np.inf, 1]]
    np.save(tmp_path / "p.npy", pts)
    cfg = base_config(tmp_path, points={"kind": "file", "path": str(tmp_path / "p.npy"), "chunk": 1000})
    cfg["sampling"]["outputs"] += ["inside"]
    if partitions:
        cfg["partitions"] = partitions
    result = run_job(load_config(data=cfg), client=client)
    assert result.nonfinite_points == 2
    flags = xr.open_zarr(tmp_path / "result.zarr")["stencil_inside"].values
    finite = np.isfinite(pts).all(axis=1)
    assert result.edge_checked == finite.sum()
    assert result.edge_outside == (finite & ~flags).sum() > 0
    # without the flags the share is counted all the same, the same number (every point of a small chunk)
    cfg["sampling"]["outputs"].remove("inside")
    cfg["output"]["overwrite"] = "always"
    again = run_job(load_config(data=cfg), client=client)
    assert (again.edge_checked, again.edge_outside) == (result.edge_checked, result.edge_outside)
    attrs = xr.open_zarr(tmp_path / "result.zarr").attrs
    assert attrs["points_nonfinite"] == 2 and attrs["stencil_outside_points"] == again.edge_outside > 0


# -- issue 40, row 6: a chunk whose points are all non-finite, on a synthetic field with its analytic check --


@pytest.mark.parametrize("partitions", [None, 2])
def test_a_chunk_of_only_nan_points_publishes_with_them_counted(tmp_path, client, partitions):
    from vdbflow.jobs.runner import run_job

    pts = np.random.default_rng(6).random((3000, 3)) * 3.2
    pts[1000:2000] = np.nan  # the whole second chunk
    np.save(tmp_path / "p.npy", pts)
    cfg = base_config(tmp_path, points={"kind": "file", "path": str(tmp_path / "p.npy"), "chunk": 1000})
    if partitions:
        cfg["partitions"] = partitions
    result = run_job(load_config(data=cfg), client=client)
    assert result.nonfinite_points == 1000
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert ds.sizes["point"] == 3000 and ds.attrs["points_nonfinite"] == 1000
    jac = ds["velocity_jacobian"].values
    assert np.isnan(jac[1000:2000]).all() and np.isfinite(jac[:1000]).all() and np.isfinite(jac[2000:]).all()


def test_the_analytic_check_of_no_finite_points_is_empty():
    """The check of a chunk without a finite point: no error, no point compared."""
    from vdbflow import synthetic
    from vdbflow.jobs.chunks import AnalyticCheck, analytic_error

    field = synthetic.make_field("taylor_green")
    vol = synthetic.flow_volume(field, 16, 2 * np.pi, np.dtype("float32"), 0.0, 0.6)
    P = np.full((50, 3), np.nan)
    for output, shape in (("jacobian", (50, 3, 3)), ("q_criterion", (50,)), ("vorticity", (50, 3))):
        check = AnalyticCheck(field, output, "linear", "index", "index", vol.index_to_world)
        got = analytic_error(check, np.full(shape, np.nan, np.float32), P, vol.topology)
        assert got.tolist() == [[0.0, 0.0]], output


# -- issue 40, "also look at these": points files whose header repeats a column, or whose codecs run code --


def test_a_csv_header_that_repeats_a_column_is_refused(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("x,x,y,z\n0.1,0.2,0.3,0.4\n")
    cfg = base_config(tmp_path, points={"kind": "file", "path": str(path)})
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run")
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "points.columns" in said and "['x'] more than once" in said, said
    path.write_text("x,y,z,x2\n0.1,0.2,0.3,0.4\n")  # a header without repeats still reads
    assert invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run").exit_code == 0


def test_a_zarr_points_file_naming_pickle_is_refused_before_zarr_reads_it(tmp_path):
    import json

    import zarr

    store = tmp_path / "points.zarr"
    zarr.save_array(str(store), np.random.default_rng(0).random((100, 3)), zarr_format=2)
    meta = json.loads((store / ".zarray").read_text())
    meta["filters"] = [{"id": "pickle", "protocol": 4}]
    (store / ".zarray").write_text(json.dumps(meta))
    cfg = base_config(tmp_path, points={"kind": "file", "path": str(store)})
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run")
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "points.path" in said and "'pickle'" in said and "would run code" in said, said


def test_a_npy_points_file_replaced_while_the_job_runs_is_refused_never_mixed(tmp_path):
    """Each chunk of a .npy points file is read checked against the file the job planned with: a file
    renamed over it (or rewritten in place) between two chunks is a PointsError, not a mix of two files."""
    from vdbflow.jobs.points import make_points

    path = tmp_path / "p.npy"
    np.save(path, np.random.default_rng(1).random((3000, 3)))
    cfg = load_config(data=base_config(tmp_path, points={"kind": "file", "path": str(path), "chunk": 1000}))
    points = make_points(cfg.points, None).points
    first = points.blocks[0].compute(scheduler="synchronous")
    np.testing.assert_array_equal(first, np.load(path)[:1000])
    np.save(tmp_path / "other.npy", np.full((3000, 3), 7.0))
    (tmp_path / "other.npy").replace(path)  # another writer's file renamed over it
    with pytest.raises(PointsError, match="the points file .* as the job was planned .* replaced or rewrote it"):
        points.blocks[1].compute(scheduler="synchronous")
