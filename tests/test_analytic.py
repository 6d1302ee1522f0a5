"""Fields with known Jacobians: linear fields are reproduced exactly by trilinear sampling."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vdbflow
from vdbflow import synthetic

A4 = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]], dtype=np.float64)


def block(lo, hi):
    axis = np.arange(lo, hi)
    return np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["per-leaf", "index"])
def test_vec4_linear_field_has_jacobian_A(rng, dtype, layout):
    ijk = block(-10, 14)  # spans leaf boundaries and negative coordinates
    values = (ijk @ A4.T).astype(dtype)
    if layout == "per-leaf":
        vol = vdbflow.Volume.from_voxels(ijk, values)
    else:
        topo = vdbflow.Volume.from_active(ijk)
        vol = topo.with_data((topo.active_voxels() @ A4.T).astype(dtype))
    pts = rng.uniform(-10, 13, (2000, 3))  # inside: the whole stencil is active
    pts[:100] = np.round(rng.uniform(-10, 12, (100, 3)))  # integer planes (not the top face: +side cell)
    v, j = vdbflow.sample_grad_arrays(vol, pts.astype(dtype))
    tol = 1e-12 if dtype == np.float64 else 32 * np.finfo(np.float32).eps * np.abs(values).max()
    assert j.shape == (2000, 4, 3)
    np.testing.assert_allclose(j, np.broadcast_to(A4, j.shape), atol=tol, rtol=0)
    np.testing.assert_allclose(v, pts.astype(dtype).astype(np.float64) @ A4.T, atol=tol * 4, rtol=0)


def test_world_jacobian_of_linear_field_under_sheared_transform(rng):
    """u(x) = B x in world space; sampled through any affine transform its world Jacobian is B."""
    B = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 0.5]])
    M = np.eye(4)
    M[:3, :3] = [[0.9, 0.4, 0.0], [-0.3, 1.2, 0.2], [0.1, -0.2, 0.7]]
    M[:3, 3] = [5.0, -3.0, 2.0]
    ijk = block(-6, 10)
    world = ijk @ M[:3, :3].T + M[:3, 3]
    vol = vdbflow.Volume.from_voxels(ijk, world @ B.T, transform=M)
    idx = rng.uniform(-6, 9, (500, 3))
    pts = idx @ M[:3, :3].T + M[:3, 3]
    ds = vol.sample_grad(pts, space="world")
    np.testing.assert_allclose(ds["value_jacobian"].values, np.broadcast_to(B, (500, 3, 3)), atol=1e-11)
    np.testing.assert_allclose(ds["value"].values, pts @ B.T, atol=1e-11)


def test_world_jacobian_matches_finite_differences(rng):
    """A non-linear field through a rotated, anisotropic transform: J_world against central
    differences of world-space sampling inside one cell."""
    M = np.eye(4)
    c, s = np.cos(0.4), np.sin(0.4)
    M[:3, :3] = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]) @ np.diag([0.7, 1.3, 0.9])
    vol = synthetic.flow_volume(synthetic.abc_flow(), resolution=24, dtype=np.float64)
    vol = vdbflow.Volume.from_voxels(vol.active_voxels(), vol.active_values(), transform=M)
    idx = vol.active_voxels()[rng.integers(0, vol.active_voxel_count, 50)] + rng.uniform(0.3, 0.7, (50, 3))
    pts = vol.transform.apply(idx)
    J = vol.sample_grad(pts)["value_jacobian"].values
    h = 1e-6
    for a in range(3):
        e = np.zeros(3)
        e[a] = h
        fd = (vol.sample(pts + e)["value"].values - vol.sample(pts - e)["value"].values) / (2 * h)
        np.testing.assert_allclose(J[:, :, a], fd, atol=1e-6)


def test_synthetic_fields_jacobians_against_finite_differences(rng):
    for field in (synthetic.taylor_green(k=1.3), synthetic.abc_flow(), synthetic.burgers_vortex()):
        x = rng.uniform(-3, 3, (40, 3))
        h = 1e-6
        fd = np.stack([(field.velocity(x + h * e) - field.velocity(x - h * e)) / (2 * h) for e in np.eye(3)], -1)
        np.testing.assert_allclose(field.jacobian(x), fd, atol=1e-7)


@settings(max_examples=60, deadline=None)
@given(
    voxels=st.lists(st.tuples(*[st.integers(-3000, 3000)] * 3), min_size=1, max_size=40, unique=True),
    seed=st.integers(0, 2**31 - 1),
    components=st.sampled_from([1, 3, 4]),
    dtype=st.sampled_from([np.float32, np.float64]),
    index_layout=st.booleans(),
)
def test_voxel_centres_return_stored_values(voxels, seed, components, dtype, index_layout):
    ijk = np.array(voxels, dtype=np.int32)
    r = np.random.default_rng(seed)
    values = r.standard_normal((len(ijk), components) if components > 1 else len(ijk)).astype(dtype)
    if index_layout:
        topo = vdbflow.Volume.from_active(ijk)
        order = {tuple(p): n for n, p in enumerate(ijk.tolist())}
        vol = topo.with_data(values[[order[tuple(p)] for p in topo.active_voxels().tolist()]], 0)
    else:
        vol = vdbflow.Volume.from_voxels(ijk, values)
    for mode in ("linear", "closest"):
        got, _ = vdbflow.sample_grad_arrays(vol, ijk.astype(dtype), mode)
        np.testing.assert_array_equal(got, values)
