"""Derived flow quantities against analytic fields and independent formulas."""

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow import synthetic
from vdbflow.analysis import flow


def as_jacobian(J, units=None):
    da = xr.DataArray(
        J, dims=("point", "component", "axis"), coords={"component": ["x", "y", "z"], "axis": ["x", "y", "z"]}
    )
    if units:
        da.attrs["units"] = units
    return da


def test_taylor_green_divergence_vorticity_q(rng):
    x = rng.uniform(-3, 3, (500, 3))
    J = as_jacobian(synthetic.taylor_green().jacobian(x), "1/s")
    sx, sy, sz = np.sin(x.T)
    cx, cy, cz = np.cos(x.T)
    np.testing.assert_allclose(flow.divergence(J).values, 0, atol=1e-12)
    omega = np.stack([-cx * sy * sz, -sx * cy * sz, 2 * sx * sy * cz], axis=1)  # curl of the TG velocity
    w = flow.vorticity(J)
    np.testing.assert_allclose(w.values, omega, atol=1e-12)
    assert w.dims == ("point", "axis") and w.attrs["units"] == "1/s"
    np.testing.assert_allclose(flow.vorticity_magnitude(J).values, np.linalg.norm(omega, axis=1), atol=1e-12)
    q = flow.q_criterion(J)
    np.testing.assert_allclose(q.values, -0.5 * np.einsum("nij,nji->n", J.values, J.values), atol=1e-12)
    assert q.attrs["units"] == "1/s^2" and "Omega" in q.attrs["formula"]
    S, W = flow.strain_rate(J).values, flow.rotation_rate(J).values
    np.testing.assert_allclose(S + W, J.values, atol=1e-15)
    np.testing.assert_allclose(S, np.swapaxes(S, 1, 2))
    np.testing.assert_allclose(W, -np.swapaxes(W, 1, 2))


def test_abc_flow_is_beltrami(rng):
    """For the ABC flow curl u = u, so the helicity density is |u|^2."""
    field = synthetic.abc_flow()
    x = rng.uniform(-3, 3, (300, 3))
    J = as_jacobian(field.jacobian(x))
    u = xr.DataArray(field.velocity(x), dims=("point", "component"), coords={"component": ["u", "v", "w"]})
    np.testing.assert_allclose(flow.vorticity(J).values, field.velocity(x), atol=1e-12)
    np.testing.assert_allclose(flow.helicity(u, J).values, np.sum(field.velocity(x) ** 2, axis=1), atol=1e-12)


def test_lambda2_and_swirling_strength_of_simple_motions():
    w, a, b, c = 2.0, 3.0, -1.0, -2.0
    rotation = np.array([[0, -w, 0], [w, 0, 0], [0, 0, 0]], float)
    strain = np.diag([a, b, c])
    J = as_jacobian(np.stack([rotation, strain]))
    np.testing.assert_allclose(flow.lambda2(J).values, [-(w**2), sorted([a * a, b * b, c * c])[1]])
    np.testing.assert_allclose(flow.swirling_strength(J).values, [w, 0.0], atol=1e-12)


def test_accessor_on_a_sampled_field_and_dask(rng):
    vol = synthetic.flow_volume(synthetic.abc_flow(), resolution=48, dtype=np.float64, inner=0.0)
    idx = vol.active_voxels()[rng.integers(0, vol.active_voxel_count, 400)] + rng.uniform(0.2, 0.8, (400, 3))
    idx = idx[np.linalg.norm(idx - 23.5, axis=1) < 0.5 * 48 - 3]  # whole stencil inside the ball of voxels
    pts = vol.transform.apply(idx)
    ds = vol.sample_grad(pts)
    omega = ds.vdbflow.vorticity()
    exact = synthetic.abc_flow().velocity(pts)
    assert np.abs(omega.values - exact).max() < vol.voxel_size[0]  # trilinear gradients: O(h), |d2u| <= 1
    assert ds["velocity_jacobian"].attrs["units"] == "1/s" and omega.attrs["units"] == "1/s"  # m/s/m, by pint
    assert ds.vdbflow.q_criterion().attrs["units"] == "1/s^2"
    assert ds.vdbflow.helicity().attrs["units"] == "m/s^2"
    lazy = ds.chunk({"point": 50})
    q = lazy.vdbflow.q_criterion()
    assert q.chunks is not None
    np.testing.assert_allclose(q.values, ds.vdbflow.q_criterion().values)
    np.testing.assert_allclose(lazy.vdbflow.helicity().values, ds.vdbflow.helicity().values)


def test_wrong_shapes_are_refused():
    with pytest.raises(vdbflow.SamplingError, match=r"3 x 3 dims \('component', 'axis'\)"):
        flow.divergence(xr.DataArray(np.zeros((4, 3)), dims=("point", "axis")))
    J = xr.DataArray(np.zeros((2, 4, 3)), dims=("point", "component", "axis"))
    with pytest.raises(vdbflow.SamplingError, match="sizes"):
        flow.q_criterion(J)


def test_q_and_vorticity_magnitude_of_integer_and_half_jacobians():
    """Integer and float16 Jacobians are computed in float64 / float32, against einsum and norm."""
    J = np.array([[[0, -2, 1], [2, 0, 3], [-1, 5, 4]], [[1, 2, 3], [4, 5, 6], [7, 8, 9]]])
    for dtype, want in ((np.int64, np.float64), (np.float16, np.float32)):
        jac = xr.DataArray(J.astype(dtype), dims=("point", "component", "axis"))
        q, w = flow.q_criterion(jac), flow.vorticity_magnitude(jac)
        ref = J.astype(np.float64)
        np.testing.assert_allclose(q.values, -0.5 * np.einsum("...ij,...ji->...", ref, ref), rtol=1e-6)
        curl = np.stack([ref[:, 2, 1] - ref[:, 1, 2], ref[:, 0, 2] - ref[:, 2, 0], ref[:, 1, 0] - ref[:, 0, 1]], -1)
        np.testing.assert_allclose(w.values, np.linalg.norm(curl, axis=-1), rtol=1e-6)
        assert q.dtype == w.dtype == want
