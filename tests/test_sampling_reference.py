"""vdbflow's kernels against the NumPy reference sampler in tests/reference.py."""

import numpy as np
import pytest
from reference import ReferenceVolume, probe_points, random_sparse_voxels

import vdbflow

LAYOUTS = ["per-leaf", "index"]


def build(layout, ijk, values, background, tiles=None, transform=None):
    if layout == "per-leaf":
        return vdbflow.Volume.from_voxels(ijk, values, background, transform, tiles=tiles)
    topo = vdbflow.Volume.from_active(ijk, transform, tiles=None if tiles is None else tiles[:2])
    order = {tuple(p): n for n, p in enumerate(ijk.tolist())}
    perm = np.array([order[tuple(p)] for p in topo.active_voxels().tolist()])
    return topo.with_data(values[perm], background, None if tiles is None else tiles[2])


@pytest.mark.parametrize(
    ("layout", "components"),
    [("per-leaf", 1), ("per-leaf", 3), ("per-leaf", 4), ("index", 1), ("index", 3), ("index", 4), ("index", 9)],
)
@pytest.mark.parametrize("mode", ["linear", "closest"])
def test_float64_matches_reference(rng, layout, components, mode):
    ijk, values = random_sparse_voxels(rng, components=components)
    bg = rng.standard_normal(components) if components > 1 else 0.25
    vol = build(layout, ijk, values, bg)
    ref = ReferenceVolume(ijk, values, bg)
    pts = probe_points(rng, ijk, 150)
    got_v, got_j = vdbflow.sample_grad_arrays(vol, pts, mode)
    want_v, want_j = ref.sample(pts, mode)
    np.testing.assert_allclose(got_v.reshape(want_v.shape), want_v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_j.reshape(want_j.shape), want_j, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float32_matches_reference(rng, layout):
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float32)
    vol = build(layout, ijk, values, np.float32(0.5))
    ref = ReferenceVolume(ijk, values, 0.5)
    pts = probe_points(rng, ijk, 150).astype(np.float32)
    got_v, got_j = vdbflow.sample_grad_arrays(vol, pts, "linear")
    want_v, want_j = ref.sample(pts.astype(np.float64), "linear")
    tol = 32 * np.finfo(np.float32).eps * np.abs(values).max()
    assert got_v.dtype == np.float32 and got_j.dtype == np.float32
    np.testing.assert_allclose(got_v, want_v, atol=tol, rtol=0)
    np.testing.assert_allclose(got_j, want_j, atol=2 * tol, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tiles_of_every_level(rng, layout):
    """Leaves, 8^3, 128^3 and 4096^3 tiles and background side by side."""
    ijk, values = random_sparse_voxels(rng, n_leaves=4, spread=2, components=3)  # leaves inside [-16, 16)
    tiles = (
        np.array([[16, 0, 0], [-24, 0, 0], [128, 0, 0], [-256, -256, 0], [4096, 0, 0], [-8192, 4096, 0]]),
        np.array([8, 8, 128, 128, 4096, 4096]),
        rng.standard_normal((6, 3)),
    )
    bg = np.array([0.1, -0.2, 0.3])
    vol = build(layout, ijk, values, bg, tiles=tiles)
    ref = ReferenceVolume(ijk, values, bg, tiles=list(zip(*tiles, strict=True)))
    # points across tile borders, in the middle of tiles, and at their corners
    centres = np.array(
        [[20.0, 4, 4], [-20, 4, 4], [190, 60, 60], [-200, -200, 64], [6000, 100, 100], [-6000, 6000, 100]]
    )
    borders = np.array(
        [
            [15.5, 3.2, 3.7],
            [23.6, 7.5, 7.2],
            [127.3, 0.4, 0.5],
            [255.5, 127.5, 127.5],
            [-0.5, -0.5, 0.5],
            [4095.5, 0.5, 4095.5],
            [-4096.5, 4095.5, 0.5],
            [-128.5, -128.5, 64],
            [16.0, 8.0, 8.0],
        ]
    )
    pts = np.concatenate([centres, borders, probe_points(rng, ijk, 50)])
    for mode in ("linear", "closest"):
        got_v, got_j = vdbflow.sample_grad_arrays(vol, pts, mode)
        want_v, want_j = ref.sample(pts, mode)
        np.testing.assert_allclose(got_v, want_v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_j, want_j, rtol=1e-12, atol=1e-12)
    assert vol.tile_count == 6


def test_index_layout_inactive_voxels_read_background(rng):
    """Inside a leaf of an index grid, inactive voxels read the background, not a neighbour."""
    ijk = np.array([[0, 0, 0], [1, 1, 1], [7, 7, 7]])
    topo = vdbflow.Volume.from_active(ijk)
    vol = topo.with_data(np.array([1.0, 2.0, 3.0]), background=-5.0)
    v, _ = vdbflow.sample_grad_arrays(vol, np.array([[0, 0, 0], [1, 1, 1], [7, 7, 7], [0, 0, 1], [3, 3, 3]]), "closest")
    np.testing.assert_array_equal(v, [1.0, 2.0, 3.0, -5.0, -5.0])
    ref = ReferenceVolume(ijk, [1.0, 2.0, 3.0], -5.0)
    pts = rng.uniform(-1, 9, (200, 3))
    got = vdbflow.sample_grad_arrays(vol, pts, "linear")
    want = ref.sample(pts, "linear")
    np.testing.assert_allclose(got[0], want[0][:, 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1][:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_closest_is_exact(rng, dtype):
    ijk, values = random_sparse_voxels(rng, dtype=dtype)
    if dtype == np.int64:
        values = values * np.int64(2**40) + 1  # beyond float64's exact integers: must stay exact
    vol = vdbflow.Volume.from_voxels(ijk, values, background=7)
    pts = probe_points(rng, ijk, 100)
    got, jac = vdbflow.sample_grad_arrays(vol, pts, "closest")
    lookup = {tuple(p): v for p, v in zip(ijk.tolist(), values.tolist(), strict=True)}
    rounded = np.sign(pts) * np.floor(np.abs(pts) + 0.5)
    want = np.array([lookup.get(tuple(int(c) for c in r), 7) for r in rounded], dtype=dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    assert jac.shape == (len(pts), 3) and not jac.any()


def test_large_coordinates_keep_precision():
    """|u| ~ 1e6: the base cell and fraction come out exact from float64 points."""
    base = np.array([1_000_000, -1_000_008, 999_992])
    ijk = base + np.stack(np.meshgrid(*[np.arange(3)] * 3, indexing="ij"), -1).reshape(-1, 3)
    A = np.array([[1.0, -2.0, 0.5]])
    values = (ijk - base) @ A.T
    vol = vdbflow.Volume.from_voxels(ijk, values[:, 0], 0.0)
    pts = base + np.array([[0.25, 0.5, 0.75], [1.125, 1.0, 0.0625]])
    v, j = vdbflow.sample_grad_arrays(vol, pts)
    np.testing.assert_allclose(v, (pts - base) @ A[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(j, np.broadcast_to(A, (2, 3)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_world_space_points_and_jacobian(rng, layout):
    """Rotated, sheared, anisotropic transform: world points map through M^-1 and J_world = J . M^-1."""
    ijk, values = random_sparse_voxels(rng, components=3)
    theta = 0.7
    R = np.array([[np.cos(theta), -np.sin(theta), 0], [np.sin(theta), np.cos(theta), 0], [0, 0, 1]])
    shear = np.array([[1, 0.3, 0], [0, 1, -0.2], [0.1, 0, 1]])
    M = np.eye(4)
    M[:3, :3] = R @ shear @ np.diag([0.5, 2.0, 1.25])
    M[:3, 3] = [3.0, -1.0, 7.5]
    vol = build(layout, ijk, values, 0.0, transform=M)
    ref = ReferenceVolume(ijk, values, 0.0, transform=M)
    # generic points: a world round trip may move points on integer planes across a cell face,
    # where the trilinear Jacobian jumps, so keep clear of them
    idx_pts = ijk[rng.integers(0, len(ijk), 400)] + rng.uniform(-1.5, 1.5, (400, 3))
    idx_pts = idx_pts[np.all(np.abs(idx_pts - np.round(idx_pts)) > 1e-6, axis=1)]
    world = idx_pts @ M[:3, :3].T + M[:3, 3]
    got_v, got_j = vdbflow.sample_grad_arrays(vol, world, space="world", jacobian_space="world")
    want_v, want_j = ref.sample(ref.to_index(world))
    Minv = np.linalg.inv(M[:3, :3])
    np.testing.assert_allclose(got_v, want_v, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_j, want_j @ Minv, rtol=1e-9, atol=1e-9)
    # index-space Jacobian for world points
    _, got_ji = vdbflow.sample_grad_arrays(vol, world, space="world", jacobian_space="index")
    np.testing.assert_allclose(got_ji, want_j, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("components", [1, 3, 9])
def test_point_order_loops_agree_bit_for_bit(rng, components):
    """The CPU's coherent loop and its prefetching loop for scattered points give identical results,
    in input order, whichever 'auto' picks."""
    ijk, values = random_sparse_voxels(rng, n_leaves=30, components=components, dtype=np.float32)
    vol = build("index" if components == 9 else "per-leaf", ijk, values, np.float32(0.0))
    scattered = probe_points(rng, ijk, 8_000).astype(np.float32)
    coherent = scattered[np.argsort(scattered[:, 0], kind="stable")]
    for pts in (scattered, coherent):
        results = {
            order: vdbflow.sample_grad_arrays(vol, pts, point_order=order)
            for order in ("auto", "coherent", "scattered")
        }
        for order in ("auto", "scattered"):
            np.testing.assert_array_equal(results[order][0], results["coherent"][0])
            np.testing.assert_array_equal(results[order][1], results["coherent"][1])
    ref = ReferenceVolume(ijk, values, 0.0)
    sel = rng.integers(0, len(scattered), 300)
    want_v, want_j = ref.sample(scattered[sel].astype(np.float64))
    got_v, got_j = vdbflow.sample_grad_arrays(vol, scattered, point_order="scattered")
    tol = 32 * np.finfo(np.float32).eps * np.abs(values).max()
    np.testing.assert_allclose(got_v[sel].reshape(want_v.shape), want_v, atol=tol, rtol=0)
    np.testing.assert_allclose(got_j[sel].reshape(want_j.shape), want_j, atol=2 * tol, rtol=0)
