"""The host's vector sampling path (kernels/vdbflow/simd.h) against the scalar path, bit for bit.

``VDBFLOW_SIMD=0`` (read by the CPU kernels at each call) runs the scalar loops of schemes.h; unset, the
vector path runs for closest and linear on float data.  Both must give the same bytes for every case
the two paths treat differently: cells inside one leaf (the fast path), cells across 2, 4 or 8 leaves,
inactive voxels and background, tiles, non-finite points and points far outside int32, world-space
points and Jacobians, float32 and float64 data, C = 1, 2, 3, 4, 5, both value layouts, both point
orders, counts that are no multiple of a vector width, and outputs large enough for the non-temporal
line stores (written into misaligned buffers).  The vector path is also checked against the NumPy
reference sampler (tests/reference.py) within float tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import ReferenceVolume

import vdbflow
from vdbflow import _core

ORDERS = ("coherent", "scattered")

ROTATION = np.array([[np.cos(0.3), -np.sin(0.3), 0.0], [np.sin(0.3), np.cos(0.3), 0.1], [0.0, 0.0, 1.5]]) * 0.5
TILE = (np.array([[16, 0, 0]]), np.array([8]))  # an 8^3 tile next to the leaves at x in [8, 16)


def _volume(rng, dtype, C: int, index_layout: bool, rotated: bool):
    ijk = np.unique(rng.integers(-9, 16, size=(2500, 3)), axis=0)  # leaves with inactive voxels
    shape = (len(ijk),) if C == 1 else (len(ijk), C)
    values = rng.standard_normal(shape).astype(dtype)
    transform = None
    if rotated:
        transform = np.eye(4)
        transform[:3, :3] = ROTATION
        transform[:3, 3] = (1.0, -2.0, 0.5)
    tile_value = np.full((1,) if C == 1 else (1, C), 0.75, dtype)
    background = 1.5 if C == 1 else np.linspace(-1.0, 1.0, C)
    vol = vdbflow.Volume.from_voxels(ijk, values, background=background, transform=transform, tiles=(*TILE, tile_value))
    if index_layout:
        vol = vol.topology.with_data(vol.active_values(), background=vol.background, tile_values=vol.tile_values)
    return vol, ijk, values


def _points(rng, n: int) -> np.ndarray:
    """Index-space points over every kind of cell."""
    pts = rng.uniform(-12, 26, size=(n, 3))
    k = n // 6
    pts[:k] = np.floor(pts[:k]) + rng.uniform(0, 1, (k, 3))  # anywhere
    # base cells at x, y or z = 7 mod 8: stencils across 2, 4 and 8 leaves
    m = rng.integers(0, 8, size=k)
    for axis in range(3):
        cross = (m >> axis) & 1 == 1
        pts[k : 2 * k, axis][cross] = 8 * rng.integers(-1, 3, size=cross.sum()) - 1 + rng.uniform(0, 1, cross.sum())
    pts[2 * k : 2 * k + 20] = np.round(pts[2 * k : 2 * k + 20])  # grid nodes
    pts[2 * k + 20 : 2 * k + 40, 0] = rng.uniform(16, 24, 20)  # in the tile
    specials = [
        [np.nan, 0.0, 0.0],
        [0.0, np.inf, 0.0],
        [-np.inf, 1.0, 2.0],
        [1e6 + 0.25, -1e6 + 0.5, 3.0],
        [3e9, 0.0, 0.0],
        [-5e9, 2.5, 2.5],
        [2147483647.5, 0.0, 0.0],
        [-2147483648.5, 0.0, 0.0],
        [1073741823.5, 0.5, 0.5],
        [7.999999, 7.999999, 7.999999],
    ]
    pts[-len(specials) :] = specials
    return pts


def _sample(vol, pts, mode, space, jspace, order, simd: bool, monkeypatch, out=None):
    if simd:
        monkeypatch.delenv("VDBFLOW_SIMD", raising=False)
    else:
        monkeypatch.setenv("VDBFLOW_SIMD", "0")
    return vdbflow.sample_grad_arrays(vol, pts, mode, out=out, space=space, jacobian_space=jspace, point_order=order)


def _assert_same_bytes(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    same = np.ascontiguousarray(a).view(np.uint8) == np.ascontiguousarray(b).view(np.uint8)
    assert same.all(), f"{what}: {np.count_nonzero(~same.reshape(len(a), -1).all(axis=1))} rows differ"


def _scalar_orders_disagree(dtype, C: int, jspace: str) -> bool:
    """The one case where the scalar loops disagree with each other (found by these tests, older than
    the vector path): on an FMA target, float64 data with a run-time C (not 1, 3, 4) and world-space
    Jacobians - the compiler contracts J . M^-1 differently in the scalar coherent loop.  The vector
    path gives the scalar scattered loop's bytes there, in both orders."""
    return dtype == np.float64 and C not in (1, 3, 4) and jspace == "world" and "v3" in _core.CPU_TARGET


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("index_layout", [False, True])
@pytest.mark.parametrize("rotated", [False, True])
def test_vector_path_matches_scalar_bit_for_bit(rng, monkeypatch, dtype, C, index_layout, rotated):
    vol, _, _ = _volume(rng, dtype, C, index_layout, rotated)
    pts = _points(rng, 1001)  # no multiple of 4 or 8
    m = vol.transform.index_to_world
    with np.errstate(invalid="ignore"):
        world = pts @ m[:3, :3].T + m[:3, 3]
    spaces = [("index", "index")] + ([("world", "world"), ("world", "index")] if rotated else [])
    for mode in ("linear", "closest"):
        for space, jspace in spaces:
            p = world if space == "world" else pts
            scalar = {order: _sample(vol, p, mode, space, jspace, order, False, monkeypatch) for order in ORDERS}
            for order in ORDERS:
                got = _sample(vol, p, mode, space, jspace, order, True, monkeypatch)
                for against in ORDERS:
                    if against == "coherent" and _scalar_orders_disagree(dtype, C, jspace):
                        against = "scattered"
                    for a, b, name in zip(got, scalar[against], ("values", "jacobian"), strict=True):
                        _assert_same_bytes(a, b, f"{mode} {space}/{jspace} vector {order} vs scalar {against} {name}")


@pytest.mark.xfail(
    condition="v3" in _core.CPU_TARGET,
    reason="older than the vector path: the scalar coherent loop contracts J . M^-1 differently",
    strict=True,
)
def test_scalar_loops_agree_for_float64_with_run_time_components(rng, monkeypatch):
    vol, _, _ = _volume(rng, np.float64, 2, False, True)
    pts = _points(rng, 1001)[:-10]
    m = vol.transform.index_to_world
    world = pts @ m[:3, :3].T + m[:3, 3]
    a, b = (_sample(vol, world, "linear", "world", "world", order, False, monkeypatch)[1] for order in ORDERS)
    _assert_same_bytes(a, b, "scalar coherent vs scalar scattered jacobian")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C", [1, 3, 4])
def test_vector_path_streams_large_outputs_into_misaligned_buffers(rng, monkeypatch, dtype, C):
    """Outputs from 8 MiB on leave through non-temporal line stores: misaligned starts and ends, every
    point order, sorted and scattered points, both paths alike."""
    vol, _, _ = _volume(rng, dtype, C, False, False)
    n = 180_001
    pts = _points(rng, n)
    sorted_pts = pts[np.lexsort((pts[:, 2], pts[:, 1], np.floor(pts[:, 0] / 8)))]
    vshape = (n,) if C == 1 else (n, C)
    jshape = (n, 3) if C == 1 else (n, C, 3)
    jdtype = np.float32 if dtype == np.float32 else np.float64
    for points in (pts, sorted_pts):
        for order in ("auto", "coherent", "scattered"):
            results = []
            for simd in (True, False):
                # views one element into larger arrays: neither start is aligned to a line
                v = np.empty(int(np.prod(vshape)) + 1, dtype)[1:].reshape(vshape)
                j = np.empty(int(np.prod(jshape)) + 1, jdtype)[1:].reshape(jshape)
                results.append(_sample(vol, points, "linear", "index", "index", order, simd, monkeypatch, out=(v, j)))
            for a, b, name in zip(results[0], results[1], ("values", "jacobian"), strict=True):
                _assert_same_bytes(a, b, f"{order} {name}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C", [1, 3, 4])
def test_vector_path_matches_the_numpy_reference(rng, monkeypatch, dtype, C):
    vol, ijk, values = _volume(rng, dtype, C, False, True)
    # the reference knows the active voxels, the tile and the background (the volume's inactive voxels
    # read the background too)
    tile_value = np.full(C, 0.75)
    ref = ReferenceVolume(
        ijk, values, vol.background, tiles=[(TILE[0][0], 8, tile_value)], transform=vol.transform.index_to_world
    )
    pts = _points(rng, 400)[:-10]  # finite, in range
    want_v, want_j = ref.sample(pts)
    got_v, got_j = _sample(vol, pts, "linear", "index", "index", "coherent", True, monkeypatch)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got_v.reshape(len(pts), C), want_v, atol=tol * 8, rtol=tol)
    np.testing.assert_allclose(got_j.reshape(len(pts), C, 3), want_j, atol=tol * 16, rtol=tol)
