"""Random points with ``bounds:`` and ``inside: stencil`` (points whose sampling stencil reads only data), and
the one box convention (docs/design.md "Boxes"): ``vdbflow info``, ``data_bounds`` and the point generators
of .nvdb and .vdb files agree on the box of the voxel centres.  Oracles: dense boolean masks of the active
voxels, checked with NumPy."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import vdbflow
from vdbflow.errors import PointsError
from vdbflow.jobs.cli.main import main
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError, RandomPoints
from vdbflow.jobs.points import make_points

sys.path.insert(0, str(Path(__file__).parent))
from vdb_writer import write_vdb  # noqa: E402

N, H = 24, 0.25  # a dense 24^3 box of voxels of 0.25, its first voxel centre at (1, 2, 3)
ORIGIN = np.array([1.0, 2.0, 3.0])


def dense_box() -> vdbflow.Volume:
    return vdbflow.Volume.from_dense(np.ones((N, N, N)), voxel_size=H, origin=ORIGIN)


def shell() -> tuple[vdbflow.Volume, np.ndarray]:
    """A sparse spherical shell of active voxels and its dense mask (the oracle)."""
    ijk = np.stack(np.meshgrid(*[np.arange(40)] * 3, indexing="ij"), -1)
    r = np.linalg.norm(ijk - 19.5, axis=-1)
    mask = (r > 10) & (r < 16)
    return vdbflow.Volume.from_dense(np.where(mask, 1.0, 0.0), active=mask), mask


def drawn(vol, **spec) -> np.ndarray:
    spec = {"kind": "random", "count": 20_000, "chunk": 6_000, "seed": 4, **spec}
    mode = spec.pop("mode", "linear")
    return np.asarray(make_points(RandomPoints(**spec), vol.topology, mode=mode).points.compute())


def corners_active(mask: np.ndarray, ijk: np.ndarray, radius: int) -> np.ndarray:
    """The oracle of a stencil of ``radius`` (linear: 1): every voxel b - radius + 1 .. b + radius of the
    point's cell b = floor(ijk) is active in the dense ``mask``."""
    b = np.floor(ijk).astype(np.int64)
    ok = np.ones(len(ijk), bool)
    offsets = range(1 - radius, radius + 1)
    for dx in offsets:
        for dy in offsets:
            for dz in offsets:
                c = b + (dx, dy, dz)
                inb = ((c >= 0) & (c < np.array(mask.shape))).all(axis=1)
                ok &= inb
                ok[inb] &= mask[tuple(c[inb].T)]
    return ok


# -- row 5: bounds and inside: stencil --------------------------------------------------------------------


def test_random_points_in_bounds():
    lo, hi = [2.0, 3.5, 4.0], [3.0, 4.0, 6.0]
    pts = drawn(dense_box(), bounds=[lo, hi])
    assert pts.shape == (20_000, 3)
    assert (pts >= lo).all() and (pts <= hi).all()
    sigma = (np.subtract(hi, lo)) / np.sqrt(12 * len(pts))  # uniform: the mean within a few standard errors
    assert (np.abs(pts.mean(axis=0) - np.add(lo, hi) / 2) < 5 * sigma).all()
    np.testing.assert_array_equal(pts, drawn(dense_box(), bounds=[lo, hi]))  # the seed decides the points


def test_bounds_keep_random_points_on_the_active_voxels():
    """``bounds`` with ``inside: voxels``: only points of the box whose nearest voxel is active."""
    vol, mask = shell()
    pts = drawn(vol, bounds=[[0, 0, 0], [19.5, 40, 40]], space="index")
    assert (pts[:, 0] <= 19.5).all() and mask[tuple(np.round(pts).astype(int).T)].all()
    assert pts[:, 0].min() < 5  # the whole half shell, not a corner of it


@pytest.mark.parametrize(("mode", "radius"), [("linear", 1), ("lag4", 2)])
def test_inside_stencil_draws_only_points_whose_stencil_is_in_the_data(mode, radius):
    vol, mask = shell()
    pts = drawn(vol, inside="stencil", space="index", mode=mode)
    assert corners_active(mask, pts, radius).all()
    assert vol.stencil_inside(pts, mode, "index").all()
    voxels = drawn(vol, space="index")  # the voxels' cells reach past where the stencil stays inside
    assert not corners_active(mask, voxels, radius).all()
    # uniform over the accepted region: as many points in each half of the shell, within a few sigma
    assert abs((pts[:, 0] < 19.5).mean() - 0.5) < 5 * 0.5 / np.sqrt(len(pts))


def test_a_dense_box_with_inside_stencil_reads_no_background():
    vol = dense_box()
    pts = drawn(vol, inside="stencil")
    assert vol.stencil_inside(pts).all()
    centres = vol.data_bounds()
    assert (pts >= centres[0]).all() and (pts <= centres[1]).all()
    ds = vol.sample(pts)
    np.testing.assert_array_equal(ds["value"].values, 1.0)  # the background (0) mixed into none


def test_inside_stencil_with_bounds_in_world_space():
    vol = dense_box()
    lo, hi = ORIGIN + 5 * H, ORIGIN + [30 * H, 10 * H, 10 * H]  # past the data's upper x face
    pts = drawn(vol, inside="stencil", bounds=[lo.tolist(), hi.tolist()])
    assert (pts >= lo).all() and (pts <= hi).all() and vol.stencil_inside(pts).all()
    assert pts[:, 0].max() > ORIGIN[0] + (N - 2) * H  # reaches the last cell of data


def test_bounds_that_miss_the_data_are_refused():
    with pytest.raises(PointsError, match=r"points.bounds: expected .*found none of 4,096"):
        drawn(dense_box(), bounds=[[50, 50, 50], [60, 60, 60]])


@pytest.mark.parametrize(
    "bounds",
    [[[0, 0, 0], [1, 1]], [[1, 0, 0], [0, 1, 1]], [[0, 0, 0], [0, 1, 1]], [[0, 0, 0], [float("nan"), 1, 1]]],
)
def test_bad_bounds_are_config_errors(bounds):
    cfg = {
        "volume": {"synthetic": {"field": "abc", "resolution": 16}},
        "points": {"kind": "random", "count": 10, "bounds": bounds},
        "output": {"path": "x.zarr"},
    }
    with pytest.raises(ConfigError, match="points"):
        load_config(data=cfg)


def test_a_job_with_bounds_and_inside_stencil(tmp_path):
    path = tmp_path / "box.nvdb"
    vdbflow.save(str(path), {"rho": dense_box()})
    cfg = {
        "volume": {"path": str(path)},
        "points": {"kind": "random", "count": 3_000, "inside": "stencil", "bounds": [[1, 2, 3], [9, 9, 9]]},
        "sampling": {"mode": "lag4", "outputs": ["value", "jacobian", "inside"]},
        "cluster": {"kind": "local", "workers": 1, "dashboard": False},
        "output": {"path": str(tmp_path / "out.zarr")},
    }
    result = vdbflow.run(cfg)
    ds = xr.open_zarr(result.output)
    assert ds.sizes["point"] == 3_000 and ds.stencil_inside.values.all()
    np.testing.assert_allclose(ds.rho.values, 1.0)
    assert ds.attrs["points_inside"] == "stencil" and json.loads(ds.attrs["points_bounds"]) == [[1, 2, 3], [9, 9, 9]]


# -- row 6: one box --------------------------------------------------------------------------------------


def box_files(tmp_path: Path) -> tuple[Path, Path]:
    """The same 24^3 dense box as .nvdb and as .vdb (voxel size H, first centre at ORIGIN)."""
    nvdb, vdb = tmp_path / "box.nvdb", tmp_path / "box.vdb"
    vdbflow.save(str(nvdb), {"grid": dense_box()})
    ijk = np.stack(np.meshgrid(*[np.arange(N)] * 3, indexing="ij"), -1).reshape(-1, 3)
    matrix = np.diag([H, H, H, 1.0])
    matrix[:3, 3] = ORIGIN
    write_vdb(vdb, "Tree_float_5_4_3", np.float32, 1, ijk, np.ones(len(ijk)), 0.0, matrix)
    return nvdb, vdb


def test_info_and_data_bounds_give_the_voxel_centres_for_both_formats(tmp_path):
    centres = np.array([ORIGIN, ORIGIN + (N - 1) * H])
    runner = CliRunner(env={"COLUMNS": "200"})
    for path in box_files(tmp_path):
        vol = vdbflow.open(path)
        np.testing.assert_allclose(vol.data_bounds(), centres)
        np.testing.assert_allclose(vol.data_bounds("index"), [[0, 0, 0], [N - 1] * 3])
        out = runner.invoke(main, ["info", str(path)], catch_exceptions=False).output
        assert "(voxel cells)" not in out
        assert "data box (world)" in out and "[1.0, 2.0, 3.0] .. [6.75, 7.75, 8.75] (voxel centres)" in out, out
        assert "data box (index)" in out and "[0, 0, 0] .. [23, 23, 23]" in out
        (grid,) = json.loads(runner.invoke(main, ["info", "--json", str(path)]).output)[0]["grids"]
        np.testing.assert_allclose(grid["data_box"], centres)
        # NanoVDB's header box ([min, max + 1] of the index box), the same for a .vdb
        np.testing.assert_allclose(grid["world_bbox"], [ORIGIN, ORIGIN + N * H])


def test_the_generators_follow_the_convention(tmp_path):
    """``inside: voxels`` draws in the active voxels' cells (half a voxel past the data box),
    ``inside: stencil`` and lattices inside the data box (the voxel centres)."""
    vol = vdbflow.open(box_files(tmp_path)[1])
    lo, hi = vol.data_bounds()
    cells = drawn(vol)
    assert (cells >= lo - H / 2).all() and (cells <= hi + H / 2).all()
    assert cells.min() < lo[0] - H / 4 and cells.max() > hi[0] + H / 4
    inside = drawn(vol, inside="stencil")
    assert (inside >= lo).all() and (inside <= hi).all()
