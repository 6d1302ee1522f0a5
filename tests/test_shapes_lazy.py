"""Points with a shape keep it; Dask points give a lazy Dataset, sampled block by block when computed."""

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow import synthetic
from vdbflow.jobs.points import plane


def _no_compute(*args, **kwargs):
    raise AssertionError("something was computed while the Dataset was built")


@pytest.fixture(scope="module")
def tg():
    return synthetic.flow_volume(synthetic.taylor_green(), resolution=24)


@pytest.fixture(scope="module")
def pts():
    return np.random.default_rng(7).uniform(0.5, 5.8, (1000, 3))


def test_dask_points_give_a_lazy_dataset(tg, pts):
    dpts = da.from_array(pts, chunks=(300, 3))
    with dask.config.set(scheduler=_no_compute):
        ds = tg.sample_grad(dpts)
        q = ds.vdbflow.q_criterion()
    for name in ("velocity", "velocity_jacobian", "x"):
        assert isinstance(ds[name].data, da.Array), name
    assert ds["velocity"].data.chunks == ((300, 300, 300, 100), (3,))
    assert ds["velocity_jacobian"].data.chunks == ((300, 300, 300, 100), (3,), (3,))
    assert isinstance(q.data, da.Array)
    values, jac = vdbflow.sample_grad_arrays(tg, pts, space="world")  # the array API: the oracle
    with dask.config.set(scheduler="sync"):
        got = ds.compute()
    np.testing.assert_array_equal(got["velocity"].values, values)
    np.testing.assert_array_equal(got["velocity_jacobian"].values, jac)
    np.testing.assert_array_equal(got["x"].values, pts[:, 0])
    np.testing.assert_allclose(q.values, -0.5 * np.einsum("nij,nji->n", jac, jac), rtol=1e-5, atol=1e-6)
    xr.testing.assert_identical(got, tg.sample_grad(pts))


def test_values_only_and_scalar_fields_stay_lazy(tg, pts):
    speed = vdbflow.Volume.from_voxels(
        tg.active_voxels(), np.linalg.norm(tg.active_values(), axis=1), transform=tg.index_to_world, name="speed"
    )
    dpts = da.from_array(pts, chunks=(250, 3))
    with dask.config.set(scheduler=_no_compute):
        values_only = tg.sample(dpts)
        scalar = speed.sample_grad(dpts, mode="catmull_rom")
    assert list(values_only.data_vars) == ["velocity"] and isinstance(values_only["velocity"].data, da.Array)
    assert scalar["speed_jacobian"].dims == ("point", "axis") and isinstance(scalar["speed"].data, da.Array)
    v, j = vdbflow.sample_grad_arrays(speed, pts, "catmull_rom", space="world")
    np.testing.assert_array_equal(scalar["speed"].values, v)
    np.testing.assert_array_equal(scalar["speed_jacobian"].values, j)
    np.testing.assert_array_equal(values_only["velocity"].values, vdbflow.sample_grad_arrays(tg, pts, space="world")[0])


def test_a_plane_keeps_its_shape(tg):
    pts = plane((0.3, 0.2, np.pi), (5.6, 0, 0), (0, 5.8, 0), (20, 15), keep_shape=True)
    flat = plane((0.3, 0.2, np.pi), (5.6, 0, 0), (0, 5.8, 0), (20, 15))
    np.testing.assert_array_equal(pts.reshape(-1, 3), flat)
    ds = tg.sample_grad(pts)
    assert ds["velocity"].dims == ("point_0", "point_1", "component")
    assert ds["velocity_jacobian"].dims == ("point_0", "point_1", "component", "axis")
    assert ds["x"].dims == ("point_0", "point_1") and "point" not in ds.dims
    assert "featureType" not in ds.attrs and ds.attrs["Conventions"] == "CF-1.10"
    values, jac = vdbflow.sample_grad_arrays(tg, flat, space="world")
    np.testing.assert_array_equal(ds["velocity"].values, values.reshape(20, 15, 3))
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, jac.reshape(20, 15, 3, 3))
    np.testing.assert_array_equal(ds["y"].values, pts[..., 1])
    q = ds.vdbflow.q_criterion()
    assert q.dims == ("point_0", "point_1")


def test_a_lazy_lattice_keeps_its_shape_and_chunks(tg):
    axes = [np.linspace(0.5, 5.5, n) for n in (6, 7, 8)]
    z, y, x = np.meshgrid(axes[0], axes[1], axes[2], indexing="ij")
    lattice = np.stack([x, y, z], axis=-1)  # (nz, ny, nx, 3)
    dl = da.from_array(lattice, chunks=(4, 3, 8, 3))
    with dask.config.set(scheduler=_no_compute):
        ds = tg.sample_grad(dl, dims=("nz", "ny", "nx"))
    assert ds["velocity_jacobian"].dims == ("nz", "ny", "nx", "component", "axis")
    assert ds["velocity_jacobian"].data.chunks == ((4, 2), (3, 3, 1), (8,), (3,), (3,))
    values, jac = vdbflow.sample_grad_arrays(tg, lattice.reshape(-1, 3), space="world")
    np.testing.assert_array_equal(ds["velocity"].values, values.reshape(6, 7, 8, 3))
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, jac.reshape(6, 7, 8, 3, 3))
    np.testing.assert_array_equal(ds["z"].values, z)


def test_a_dataarray_of_points_brings_its_dims_and_coords(tg):
    s = np.linspace(0, 1, 5)
    pts = xr.DataArray(
        np.stack([1 + 4 * s, np.full(5, 3.0), np.full(5, 3.0)], axis=1),
        dims=("s", "xyz"),
        coords={"s": s, "label": ("s", list("abcde"))},
    )
    ds = tg.sample_grad(pts)
    assert ds["velocity"].dims == ("s", "component") and ds.attrs["featureType"] == "point"
    np.testing.assert_array_equal(ds["s"].values, s)
    assert list(ds["label"].values) == list("abcde")
    np.testing.assert_array_equal(ds["velocity"].values, vdbflow.sample_grad_arrays(tg, pts.values, space="world")[0])
    lazy = tg.sample_grad(pts.chunk({"s": 2}))
    assert isinstance(lazy["velocity"].data, da.Array)
    xr.testing.assert_identical(lazy.compute(), ds)


def test_shapes_and_dims_that_do_not_fit_are_refused(tg):
    with pytest.raises(vdbflow.PointsError, match=r"expected 2 distinct dim names for points of shape \(4, 5, 3\)"):
        tg.sample_grad(np.ones((4, 5, 3)), dims=("a",))
    with pytest.raises(vdbflow.PointsError, match="apart from the result's own names"):
        tg.sample_grad(np.ones((4, 5, 3)), dims=("y", "x"))
    with pytest.raises(vdbflow.PointsError, match=r"\(N, 3\) or \(\.\.\., 3\), got \(4, 5, 2\)"):
        tg.sample_grad(da.ones((4, 5, 2)))
    with pytest.raises(vdbflow.PointsError, match="known chunk sizes"):
        tg.sample_grad(da.ones((10, 3), chunks=(5, 3))[da.ones(10, chunks=5) > 0])
    with pytest.raises(vdbflow.PointsError, match="float16/32/64 or integer points"):
        tg.sample_grad(da.zeros((4, 3), dtype=complex))
    with pytest.raises(vdbflow.SamplingError, match="mode to be one of"):
        tg.sample_grad(da.zeros((4, 3)), mode="cubic")
    with pytest.raises(vdbflow.PointsError, match=r"expected points of shape \(N, 3\), got \(2, 2, 3\)"):
        vdbflow.sample_grad_arrays(tg, np.zeros((2, 2, 3)))  # the array level stays (N, 3)


def test_integer_data_from_dask_points(tg, pts):
    labels = vdbflow.Volume.from_voxels(
        tg.active_voxels(), np.arange(tg.active_voxel_count, dtype=np.int32), transform=tg.index_to_world, name="label"
    )
    ds = labels.sample_grad(da.from_array(pts, chunks=(400, 3)), mode="closest")
    np.testing.assert_array_equal(
        ds["label"].values, vdbflow.sample_grad_arrays(labels, pts, "closest", space="world")[0]
    )
    with pytest.raises(vdbflow.SamplingError, match="mode='closest'"):
        labels.sample_grad(da.from_array(pts, chunks=(400, 3)))
