"""``xr.open_dataset(..., engine="vdbflow")`` (issue 50 row 10): a periodic volume's periods are in the
Dataset's attrs, as results carry them, and the index coordinates ``i, j, k`` stay plain arrays (indexed
beside ``x, y, z``) when xarray chunks the rest.  And the grid's points, ``xr.broadcast(box.x, box.y, box.z)``,
sample with the grid's dims as the result's (row 11)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow import synthetic
from vdbflow.errors import PointsError


def periodic_file(tmp_path):
    vol = synthetic.flow_volume(synthetic.make_field("taylor_green"), 16, 2 * np.pi, np.dtype("float32"))
    assert vol.periodic is not None  # the whole box: one period of the field
    path = tmp_path / "tg.nvdb"
    vdbflow.save(path, {"velocity": vol})
    return path, vol


def test_periods_in_attrs_and_index_coordinates_in_memory(tmp_path):
    path, vol = periodic_file(tmp_path)
    sampled = vdbflow.open(path).sample_grad(vol.transform.apply(np.array([[3.0, 4.0, 5.0]])))
    for dim_order in ("xyz", "zyx"):
        with xr.open_dataset(path, engine="vdbflow", chunks={}, dim_order=dim_order) as box:
            for key in ("periodic_axes", "period_lo", "period_voxels"):  # as a result of the same volume says
                np.testing.assert_array_equal(box.attrs[key], sampled.attrs[key], err_msg=key)
            assert box.attrs["periodic_axes"] == "xyz" and list(box.attrs["period_voxels"]) == [16, 16, 16]
            assert hasattr(box["velocity"].data, "dask")  # the values stay lazy
            for world, index in (("x", "i"), ("y", "j"), ("z", "k")):
                assert isinstance(box[index].data, np.ndarray), index  # not a Dask array
                assert box[index].dims == (world,) and index in box.indexes
                lo, hi = box.attrs["index_bbox"][:3], box.attrs["index_bbox"][3:]
                axis = "xyz".index(world)
                np.testing.assert_array_equal(box[index].values, np.arange(lo[axis], hi[axis] + 1))
            picked = box.sel(i=5, j=6, k=7)["velocity"].values
            np.testing.assert_array_equal(picked, box.isel(x=5, y=6, z=7)["velocity"].values)


def test_a_volume_that_is_not_periodic_says_nothing_of_periods(tmp_path):
    rng = np.random.default_rng(3)
    ijk = np.unique(rng.integers(0, 20, (300, 3)), axis=0)
    vol = vdbflow.Volume.from_voxels(ijk, rng.standard_normal(len(ijk)).astype(np.float32))
    vdbflow.save(tmp_path / "s.nvdb", {"s": vol})
    with xr.open_dataset(tmp_path / "s.nvdb", engine="vdbflow", chunks={}) as box:
        assert not {"periodic_axes", "period_lo", "period_voxels"} & set(box.attrs)
        assert isinstance(box["i"].data, np.ndarray)


def test_points_of_a_grid_keep_its_dims(tmp_path):
    path, _ = periodic_file(tmp_path)
    vol = vdbflow.open(path)
    with xr.open_dataset(path, engine="vdbflow") as whole:
        box = whole.isel(x=slice(2, 7), y=slice(3, 6), z=slice(4, 6)).load()
    parts = xr.broadcast(box.x, box.y, box.z)
    ds = vol.sample_grad(parts, outputs=("value", "jacobian", "q_criterion", "inside"))
    assert ds["velocity"].dims == ("x", "y", "z", "component") and ds["q_criterion"].dims == ("x", "y", "z")
    for c in ("x", "y", "z", "i"):  # the grid's own coordinates, 1-D on their dims
        np.testing.assert_array_equal(ds[c].values, box[c].values)
    # the oracle: the engine's dense read of the same voxels (sampling at a voxel centre gives its value; in
    # world space up to the last bit of the world-to-index map)
    dense = box["velocity"].transpose("x", "y", "z", "component").values
    np.testing.assert_allclose(ds["velocity"].values, dense, rtol=1e-6, atol=1e-7)
    flat = vol.sample_grad(np.stack([p.values for p in parts], axis=-1), outputs=("jacobian", "q_criterion"))
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, flat["velocity_jacobian"].values)
    lazy = vol.sample_grad(tuple(p.chunk({"x": 2}) for p in parts)).compute()  # Dask points: the same
    np.testing.assert_array_equal(lazy["velocity_jacobian"].values, ds["velocity_jacobian"].values)
    index = vol.sample_grad(xr.broadcast(*(box[c].astype(float) for c in "ijk")), space="index")
    assert index["velocity"].dims == ("x", "y", "z", "component") and index["i"].dims == ("x", "y", "z")
    np.testing.assert_array_equal(index["velocity"].values, dense)  # integer index points: exact


def test_points_that_are_not_the_grid_are_refused(tmp_path):
    path, _ = periodic_file(tmp_path)
    vol = vdbflow.open(path)
    with xr.open_dataset(path, engine="vdbflow") as whole:
        box = whole.isel(x=slice(0, 3), y=slice(0, 3), z=slice(0, 3)).load()
    x, y, z = xr.broadcast(box.x, box.y, box.z)
    with pytest.raises(PointsError, match="expected the points' x to be their dim x's coordinate broadcast"):
        vol.sample_grad((x + 0.01, y, z))
    with pytest.raises(PointsError, match="expected three DataArrays of coordinates on the same dims"):
        vol.sample_grad((box.x, box.y, box.z))  # not broadcast
    with pytest.raises(PointsError, match="expected point dims named apart from the result's own names"):
        vol.sample_grad(xr.DataArray(np.zeros((2, 3)), dims=("x", "xyz")))  # dim x without the grid's x
