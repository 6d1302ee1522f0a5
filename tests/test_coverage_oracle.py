"""stencil_inside against the sampler itself as the oracle.

A point's stencil is inside when every voxel it reads is defined; so where it is inside, changing
the background (what every undefined voxel reads) cannot change the sample, and where it is not,
a change of background shows in the values or Jacobians (for schemes whose taps all carry weight at
a generic point).  Closest sampling is checked at negative half-integers, in index and world space."""

import numpy as np
import pytest

import vdbflow
from vdbflow.core.kernel import MODES
from vdbflow.ops.coverage import InsideCheck, stencil_inside

# schemes whose Jacobian reads only a cross or slab of their tap box (node differences): a missing
# voxel off that set changes nothing, so only "inside => unchanged" holds for them
NODE_DIFFERENCES = {"fd2", "fd4", "fd6", "fd8", "fd4lag4"}


def _pair(ijk, transform, tiles=None):
    """The same data over two backgrounds."""
    rng = np.random.default_rng(3)
    data = rng.uniform(-1, 1, len(ijk))
    return tuple(
        vdbflow.Volume.from_voxels(ijk, data, background=b, transform=transform, tiles=tiles) for b in (0.0, 1000.0)
    )


def test_closest_at_negative_half_integers_in_index_and_world_space():
    ijk = np.array([[-2, 0, 0], [-1, 0, 0], [3, 1, -4], [0, -1, 0], [-5, -5, -5], [-6, -5, -5]])
    M = np.diag([0.1, 0.3, 0.7, 1.0])
    M[:3, 3] = [0.3, -0.1, 0.05]  # world points of half-integers that round differently by a last bit
    vols = _pair(ijk, M)
    halves = np.array(
        [
            [-2.5, 0, 0],
            [-1.5, 0, 0],
            [-0.5, 0, 0],
            [0.5, 0, 0],
            [2.5, 1.5, -3.5],
            [3.5, 0.5, -4.5],
            [0, -0.5, 0],
            [0, -1.5, 0],
            [-5.5, -5, -5],
            [-6.5, -5, -5],
            [-4.5, -5.5, -4.5],
            [-2.4999999999999996, 0, 0],
            [-0.49999999999999994, 0, 0],
            [-1.5000000000000002, 0, 0],
        ]
    )
    for space, pts in (("index", halves), ("world", vols[0].transform.apply(halves))):
        got = stencil_inside(vols[0], pts, "closest", space=space)
        a, b = (v.sample(pts, "closest", space=space)["value"].values for v in vols)
        np.testing.assert_array_equal(got, a == b, err_msg=space)
        np.testing.assert_array_equal(InsideCheck(vols[0].topology, "closest")(pts, space), got)
    got = stencil_inside(vols[0], halves, "closest", space="index")
    assert not got[0] and got[1] and got[2] and not got[3]  # -2.5 -> -3 (none), -1.5 -> -2, -0.5 -> -1, 0.5 -> 1


@pytest.mark.parametrize("mode", sorted(MODES))
def test_inside_exactly_where_the_background_cannot_reach_the_sample(rng, mode):
    """Random points near the boundary of a block with holes, next to tiles, under a rotated map."""
    ijk = np.argwhere(rng.random((18, 16, 20)) < 0.997) - (6, 5, 9)
    tiles = (np.array([[16, 0, 0], [16, 8, 0], [128, 0, 0]]), np.array([8, 8, 128]), np.array([0.5, -0.25, 2.0]))
    M = np.eye(4)
    M[:3, :3] = [[0.9, 0.4, 0.0], [-0.3, 1.2, 0.2], [0.1, -0.2, 0.7]]
    M[:3, 3] = [1.0, -2.0, 0.5]
    vols = _pair(ijk, M, tiles)
    base = np.concatenate([ijk[rng.integers(0, len(ijk), 1500)], rng.integers(-12, 30, (500, 3))])
    idx = base + rng.uniform(0.05, 0.95, base.shape)  # generic points: every tap carries weight
    idx[:100] = np.round(idx[:100] * 2) / 2  # and on voxel centres and cell faces
    pts = vols[0].transform.apply(idx)
    got = stencil_inside(vols[0], pts, mode)
    a, b = (vdbflow.sample_grad_arrays(v, pts, mode, space="world") for v in vols)
    unchanged = np.all(a[0] == b[0], axis=tuple(range(1, a[0].ndim))) & np.all(
        (a[1] == b[1]).reshape(len(pts), -1), axis=1
    )
    assert got.any() and not got.all()
    assert unchanged[got].all(), f"{mode}: background reached {int((~unchanged[got]).sum())} inside points"
    if mode not in NODE_DIFFERENCES:
        generic = np.ones(len(pts), bool)
        generic[:100] = False
        np.testing.assert_array_equal(got[generic], unchanged[generic], err_msg=mode)
    np.testing.assert_array_equal(InsideCheck(vols[0], mode)(pts), got)
