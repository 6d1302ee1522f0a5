"""Volumes through xarray / Zarr and back, gradient fields split into vec3 grids for .nvdb."""

import numpy as np
import pytest

import vdbflow
from vdbflow import synthetic
from vdbflow.io.volumes import from_dataset, to_dataset


def sparse_volume(rng, C=3, tiles=True):
    ijk = np.argwhere(rng.random((20, 20, 20)) < 0.3) - 6
    vals = rng.standard_normal((len(ijk), C)).astype(np.float32)
    t = (np.array([[64, 0, 0], [128, 128, 0]]), np.array([8, 128]), rng.standard_normal((2, C))) if tiles else None
    vol = vdbflow.Volume.from_voxels(
        ijk, vals if C > 1 else vals[:, 0], background=0.5, voxel_size=0.2, origin=(1, -2, 3), tiles=t, name="velocity"
    )
    vol.units, vol.length_units = "m/s", "m"
    return vol


@pytest.mark.parametrize("C", [1, 3, 4])
def test_zarr_round_trip_samples_identically(tmp_path, rng, C):
    vol = sparse_volume(rng, C)
    vol.to_zarr(tmp_path / "v.zarr")
    back = vdbflow.open_zarr(tmp_path / "v.zarr")
    assert back.active_voxel_count == vol.active_voxel_count and back.tile_count == 2
    assert back.name == "velocity" and back.units == "m/s" and back.length_units == "m"
    np.testing.assert_array_equal(back.index_to_world, vol.index_to_world)
    pts = rng.uniform(-8, 200, (4000, 3))  # voxels, tiles and background
    a, b = vol.sample_grad(pts, space="index"), back.sample_grad(pts, space="index")
    np.testing.assert_array_equal(a["velocity"].values, b["velocity"].values)
    np.testing.assert_array_equal(a["velocity_jacobian"].values, b["velocity_jacobian"].values)
    with pytest.raises(vdbflow.WriteError):
        vol.to_zarr(tmp_path / "v.zarr")
    vol.to_zarr(tmp_path / "v.zarr", overwrite=True)


def test_dataset_has_voxel_coordinates_and_rejects_foreign_data(rng):
    vol = sparse_volume(rng, 3, tiles=False)
    ds = to_dataset(vol)
    ijk = np.stack([ds[c].values for c in "ijk"], 1)
    np.testing.assert_array_equal(ijk, vol.active_voxels())
    np.testing.assert_array_equal(ds["values"].values, vol.active_values())
    with pytest.raises(vdbflow.VolumeError, match="written by vdbflow"):
        from_dataset(ds.assign_attrs(format="other"))
    with pytest.raises(vdbflow.VolumeError, match="one value row per active voxel"):
        from_dataset(ds.isel(voxel=slice(1, None)))


def test_gradient_field_to_zarr_and_to_nvdb_as_three_vec3_grids(tmp_path):
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=24)
    grad = vdbflow.gradient_field(vol, "fd4")
    assert grad.components == 9 and vdbflow.core.units.same(grad.units, "m/s/m") and grad.units == "1/s"
    grad.to_zarr(tmp_path / "g.zarr")
    back = vdbflow.open_zarr(tmp_path / "g.zarr")
    np.testing.assert_array_equal(back.active_values(), grad.active_values())
    parts = vdbflow.split_channels(grad)
    assert list(parts) == ["velocity_jacobian_du", "velocity_jacobian_dv", "velocity_jacobian_dw"]
    assert parts["velocity_jacobian_dv"].component_names == ("dv/dx", "dv/dy", "dv/dz")
    vdbflow.save(tmp_path / "g.nvdb", parts)
    names = [g.name for g in vdbflow.list_grids(tmp_path / "g.nvdb")]
    assert names == list(parts)
    J = grad.active_values().reshape(-1, 3, 3)
    for c, name in enumerate(parts):
        read = vdbflow.open(tmp_path / "g.nvdb", grid=name)
        assert read.value_type.name == "vec3f"
        np.testing.assert_array_equal(read.active_values(), J[:, c, :])
    with pytest.raises(vdbflow.VolumeError, match="divisible by 3"):
        vdbflow.split_channels(vol.topology.with_data(np.zeros((vol.active_voxel_count, 4), np.float32)))
