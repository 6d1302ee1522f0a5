"""``xr.open_dataset(..., engine="vdbflow")`` (issue 50 row 10): a periodic volume's periods are in the
Dataset's attrs, as results carry them, and the index coordinates ``i, j, k`` stay plain arrays (indexed
beside ``x, y, z``) when xarray chunks the rest."""

from __future__ import annotations

import numpy as np
import xarray as xr

import vdbflow
from vdbflow import synthetic


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
