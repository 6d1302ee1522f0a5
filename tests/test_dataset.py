"""The xarray API: variables, dims, labels, coordinates and attrs."""

import numpy as np
import xarray as xr

import vdbflow


def make(components, names=None, name="velocity"):
    ijk = np.stack(np.meshgrid(*[np.arange(4)] * 3, indexing="ij"), -1).reshape(-1, 3)
    values = np.random.default_rng(1).standard_normal((len(ijk), components) if components > 1 else len(ijk))
    return vdbflow.Volume.from_voxels(ijk, values, voxel_size=0.5, name=name, component_names=names)


def test_vector_dataset_layout():
    vol = make(3, names=("u", "v", "w"))
    pts = np.array([[0.3, 0.4, 0.6], [1.0, 1.2, 0.2]])
    ds = vol.sample_grad(pts)
    assert isinstance(ds, xr.Dataset)
    assert ds["velocity"].dims == ("point", "component")
    assert ds["velocity_jacobian"].dims == ("point", "component", "axis")
    assert list(ds["component"].values) == ["u", "v", "w"]
    assert list(ds["axis"].values) == ["x", "y", "z"]
    np.testing.assert_array_equal(ds["x"].values, pts[:, 0])
    np.testing.assert_array_equal(ds["z"].values, pts[:, 2])
    attrs = ds["velocity_jacobian"].attrs
    assert attrs["convention"] == "velocity_jacobian[component, axis] = d velocity[component] / d axis"
    assert attrs["sampling_mode"] == "linear" and attrs["point_space"] == "world"
    assert attrs["jacobian_space"] == "world"
    # same numbers as the array API
    v, j = vdbflow.sample_grad_arrays(vol, pts, space="world")
    np.testing.assert_array_equal(ds["velocity"].values, v)
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, j)
    # label-based selection reads like the maths: du/dy
    np.testing.assert_array_equal(ds["velocity_jacobian"].sel(component="u", axis="y").values, j[:, 0, 1])


def test_index_space_and_default_labels():
    vol = make(4, name="value")
    ds = vol.sample_grad(np.array([[1.5, 1.5, 1.5]]), space="index")
    assert list(ds["component"].values) == ["x", "y", "z", "w"]
    assert list(ds["axis"].values) == ["i", "j", "k"]
    assert "i" in ds.coords and ds["value_jacobian"].attrs["jacobian_space"] == "index"
    ds2 = vol.sample_grad(np.array([[0.75, 0.75, 0.75]]), space="world", jacobian_space="index")
    assert list(ds2["axis"].values) == ["i", "j", "k"]
    np.testing.assert_allclose(ds2["value_jacobian"].values, ds["value_jacobian"].values)


def test_scalar_dataset_and_sample():
    vol = make(1, name="pressure")
    ds = vol.sample_grad(np.array([[0.1, 0.2, 0.3]]), mode="closest")
    assert ds["pressure"].dims == ("point",)
    assert ds["pressure_jacobian"].dims == ("point", "axis")
    assert "component" not in ds.dims
    values_only = vol.sample(np.array([[0.1, 0.2, 0.3]]), mode="closest")
    assert list(values_only.data_vars) == ["pressure"] and "axis" not in values_only.dims
    assert values_only.attrs["value_type"] == "float64"


def test_module_level_functions_match_methods():
    vol = make(3)
    pts = np.random.default_rng(2).uniform(0, 1.5, (20, 3))
    xr.testing.assert_identical(vdbflow.sample_grad(vol, pts), vol.sample_grad(pts))
    xr.testing.assert_identical(vdbflow.sample(vol, pts), vol.sample(pts))
