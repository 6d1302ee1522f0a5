"""What a job says about its points: an empty points file is a config error (exit 2, nothing runs);
non-finite points are counted; the share of points whose stencil reads the background is stated,
on both paths (one pass per chunk, and partitioned), and equals the stencil-inside flags."""

import numpy as np
import pytest
import xarray as xr
from test_run import base_config, invoke, write_config

from vdbflow.jobs.config_load import load_config


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
