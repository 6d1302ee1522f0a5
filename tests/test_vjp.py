"""Reverse mode: against Warp's tape, finite differences and the linearity identity."""

import subprocess
import sys

import numpy as np
import pytest
from reference import probe_points, random_sparse_voxels

import vdbflow

wo = pytest.importorskip("warp_oracle")


def index_volume(rng, components, dtype, tiles=None):
    ijk, _ = random_sparse_voxels(rng, n_leaves=6, spread=3, fill=0.5)
    topo = vdbflow.Volume.from_active(ijk, tiles=tiles)
    shape = (topo.active_voxel_count,) if components == 1 else (topo.active_voxel_count, components)
    bg = np.linspace(0.25, 1, components).astype(dtype) if components > 1 else dtype(0.5)
    return ijk, topo, topo.with_data(rng.standard_normal(shape).astype(dtype), bg)


def interior_points(rng, ijk, n):
    """Points inside cells, away from integer planes (where the Jacobian jumps)."""
    return ijk[rng.integers(0, len(ijk), n)] + rng.uniform(0.05, 0.95, (n, 3)) - rng.integers(0, 2, (n, 3))


@pytest.mark.parametrize(("type_name", "components"), [("float32", 1), ("vec4f", 4)])
def test_matches_warp_tape(rng, type_name, components):
    ijk, topo, vol = index_volume(rng, components, np.float32)
    wvol = wo.warp_index_volume(ijk)
    pts = interior_points(rng, ijk, 300).astype(np.float32)
    vshape = (len(pts),) if components == 1 else (len(pts), components)
    jshape = (len(pts), 3) if components == 1 else (len(pts), components, 3)
    a_val = rng.standard_normal(vshape).astype(np.float32)
    a_jac = rng.standard_normal(jshape).astype(np.float32)
    w_data, w_bg, w_pts = wo.warp_index_vjp(wvol, type_name, pts, vol.voxel_data, vol.background, a_val, a_jac)
    got = vdbflow.sample_grad_vjp(vol, pts, a_val, a_jac)
    scale = max(1.0, float(np.abs(vol.voxel_data).max()))
    tol = 64 * np.finfo(np.float32).eps * scale * max(1.0, float(np.abs(a_val).max() + np.abs(a_jac).max()))
    assert got.voxel_data.shape == vol.voxel_data.shape and got.voxel_data.dtype == np.float32
    np.testing.assert_allclose(got.voxel_data, w_data.reshape(got.voxel_data.shape), atol=tol, rtol=0)
    np.testing.assert_allclose(got.background, w_bg, atol=4 * tol, rtol=0)  # sums many corners
    np.testing.assert_allclose(got.points, w_pts, atol=tol, rtol=0)


def loss(vol, pts, a_val, a_jac, space="index"):
    v, j = vdbflow.sample_grad_arrays(vol, pts, space=space)
    return float(np.sum(v * a_val) + np.sum(j * a_jac))


@pytest.mark.parametrize("components", [1, 3])
def test_point_adjoint_against_finite_differences(rng, components):
    ijk, _, vol = index_volume(rng, components, np.float64)
    pts = interior_points(rng, ijk, 40)
    vshape = (1,) if components == 1 else (1, components)
    jshape = (1, 3) if components == 1 else (1, components, 3)
    for p in pts:
        a_val, a_jac = rng.standard_normal(vshape), rng.standard_normal(jshape)
        got = vdbflow.sample_grad_vjp(vol, p[None], a_val, a_jac).points[0]
        h = 1e-6
        fd = [
            (loss(vol, (p + h * e)[None], a_val, a_jac) - loss(vol, (p - h * e)[None], a_val, a_jac)) / (2 * h)
            for e in np.eye(3)
        ]
        np.testing.assert_allclose(got, fd, atol=1e-6, rtol=1e-6)


def test_data_adjoint_against_finite_differences(rng):
    ijk, topo, vol = index_volume(rng, 3, np.float64)
    pts = interior_points(rng, ijk, 50)
    a_val, a_jac = rng.standard_normal((50, 3)), rng.standard_normal((50, 3, 3))
    got = vdbflow.sample_grad_vjp(vol, pts, a_val, a_jac)
    data = vol.voxel_data.copy()
    for row in rng.integers(0, len(data), 12):
        for c in range(3):
            bumped = data.copy()
            bumped[row, c] += 1.0  # the loss is linear in the data: a unit step is exact
            delta = loss(topo.with_data(bumped, vol.background), pts, a_val, a_jac) - loss(vol, pts, a_val, a_jac)
            np.testing.assert_allclose(got.voxel_data[row, c], delta, atol=1e-9)
    bg_step = loss(topo.with_data(data, vol.background + np.array([0, 1.0, 0])), pts, a_val, a_jac) - loss(
        vol, pts, a_val, a_jac
    )
    np.testing.assert_allclose(got.background[1], bg_step, atol=1e-9)


@pytest.mark.parametrize("layout", ["index", "per-leaf"])
def test_sum_identity_with_tiles(rng, layout):
    """adj_value = 1: sum of values = sum(data * adj_data) + sum(tiles * adj_tiles) + background * adj_background."""
    tiles = (np.array([[64, 0, 0], [-128, 0, 0]]), np.array([8, 128]))
    ijk, _ = random_sparse_voxels(rng, n_leaves=6, spread=3, fill=0.5)
    if layout == "index":
        topo = vdbflow.Volume.from_active(ijk, tiles=tiles)
        vol = topo.with_data(rng.standard_normal(topo.active_voxel_count), 0.75, tile_values=[2.0, -3.0])
    else:
        vol = vdbflow.Volume.from_voxels(
            ijk, rng.standard_normal(len(ijk)), 0.75, tiles=(*tiles, np.array([2.0, -3.0]))
        )
    pts = np.concatenate([probe_points(rng, ijk, 200), [[63.5, 3.2, 4.1], [-60.2, 5.5, 5.5], [-127.5, 0.5, 0.5]]])
    for mode in ("linear", "closest"):
        values, _ = vdbflow.sample_grad_arrays(vol, pts, mode)
        got = vdbflow.sample_grad_vjp(vol, pts, np.ones(len(pts)), mode=mode)
        total = (
            np.sum(vol.voxel_data * got.voxel_data)
            + np.sum(np.array([2.0, -3.0]) * got.tile_values)
            + 0.75 * got.background
        )
        np.testing.assert_allclose(total, values.sum(), rtol=1e-12)
        assert got.tile_values[0] != 0 and got.tile_values[1] != 0
        if mode == "closest":
            assert not got.points.any()


def test_world_space_point_adjoint_with_sheared_transform(rng):
    ijk, _ = random_sparse_voxels(rng, n_leaves=6, spread=3, fill=0.9, components=3)
    M = np.eye(4)
    M[:3, :3] = [[0.9, 0.4, 0.0], [-0.3, 1.2, 0.2], [0.1, -0.2, 0.7]]  # not symmetric
    M[:3, 3] = [1.0, 2.0, -3.0]
    topo = vdbflow.Volume.from_active(ijk, M)
    vol = topo.with_data(rng.standard_normal((topo.active_voxel_count, 3)), 0.0)
    pts = vol.transform.apply(interior_points(rng, ijk, 20))
    for p in pts:
        a_val, a_jac = rng.standard_normal((1, 3)), rng.standard_normal((1, 3, 3))
        got = vdbflow.sample_grad_vjp(vol, p[None], a_val, a_jac, space="world").points[0]
        h = 1e-6
        fd = [
            (loss(vol, (p + h * e)[None], a_val, a_jac, "world") - loss(vol, (p - h * e)[None], a_val, a_jac, "world"))
            / (2 * h)
            for e in np.eye(3)
        ]
        np.testing.assert_allclose(got, fd, atol=2e-6, rtol=1e-6)


def test_cpu_accumulation_is_deterministic_across_thread_counts(tmp_path):
    script = """
import numpy as np, sys, vdbflow
from vdbflow import _core
_core.set_num_threads(int(sys.argv[1]))
rng = np.random.default_rng(5)
ijk = rng.integers(-20, 20, (3000, 3))
topo = vdbflow.Volume.from_active(ijk)
vol = topo.with_data(rng.standard_normal((topo.active_voxel_count, 3)).astype(np.float32), 0.0)
pts = rng.uniform(-21, 21, (100_000, 3)).astype(np.float32)
r = vdbflow.sample_grad_vjp(vol, pts, rng.standard_normal((len(pts), 3)).astype(np.float32),
                            rng.standard_normal((len(pts), 3, 3)).astype(np.float32))
np.save(sys.argv[2], np.concatenate([r.voxel_data.ravel(), r.background.ravel(), r.points.ravel()]))
"""
    outs = []
    for threads in (1, 2):
        out = tmp_path / f"r{threads}.npy"
        subprocess.run([sys.executable, "-c", script, str(threads), str(out)], check=True, timeout=300)
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_vjp_errors(rng):
    _, _, vol = index_volume(rng, 3, np.float64)
    pts = np.zeros((4, 3))
    with pytest.raises(vdbflow.PointsError, match=r"adj_value of shape \(4, 3\)"):
        vdbflow.sample_grad_vjp(vol, pts, np.ones(4))
    with pytest.raises(vdbflow.PointsError, match=r"adj_jacobian of shape \(4, 3, 3\) \[component, axis\]"):
        vdbflow.sample_grad_vjp(vol, pts, np.ones((4, 3)), np.ones((4, 9)))
    ivol = vdbflow.Volume.from_voxels([[0, 0, 0]], np.array([1], np.int32))
    with pytest.raises(vdbflow.SamplingError, match="float32 or float64 data for reverse mode, got int32"):
        vdbflow.sample_grad_vjp(ivol, pts, np.ones(4))
