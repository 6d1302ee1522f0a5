"""stencil_inside: against a brute-force reference over the dense box, and by the defining property
(sampling a field of ones gives exactly 1 where the stencil is inside)."""

import numpy as np
import pytest

import vdbflow
from vdbflow.ops.coverage import defined_voxels
from vdbflow.ops.sampling import STENCIL_RADIUS


def brute(active: set, idx: np.ndarray, mode: str) -> np.ndarray:
    out = []
    for p in idx:
        if mode == "closest":
            cells = [tuple(int(np.sign(x) * np.floor(abs(x) + 0.5)) for x in p)]  # half away from zero
        else:
            r = STENCIL_RADIUS[mode]
            b = np.floor(p).astype(int)
            rng_ = range(1 - r, r + 1)
            cells = [(b[0] + a, b[1] + c, b[2] + d) for a in rng_ for c in rng_ for d in rng_]
        out.append(all(c in active for c in cells))
    return np.array(out)


@pytest.mark.parametrize("mode", ["closest", "linear", "lag4", "catmull_rom", "lag6"])
def test_stencil_inside_matches_brute_force(rng, mode):
    ijk = np.argwhere(rng.random((20, 18, 22)) < 0.995) - (9, 4, 11)  # a block with a few holes
    vol = vdbflow.Volume.from_voxels(ijk, np.ones(len(ijk), np.float32), voxel_size=0.5, origin=(1, 2, 3))
    idx = rng.uniform(-12, 14, (3000, 3))
    idx[:200] = np.round(idx[:200])  # on voxel centres and cell faces
    got = vol.stencil_inside(vol.transform.apply(idx), mode=mode)
    expect = brute(set(map(tuple, ijk)), idx, mode)
    np.testing.assert_array_equal(got, expect)
    assert got.any() and not got.all()


def test_linear_field_of_ones_is_one_exactly_where_inside(rng):
    ijk = np.argwhere(rng.random((24, 24, 24)) < 0.95)
    vol = vdbflow.Volume.from_voxels(ijk, np.ones(len(ijk), np.float32), background=0.0)
    pts = rng.uniform(0, 23, (5000, 3))
    inside = vol.stencil_inside(pts, mode="linear", space="index")
    v = vol.sample(pts, mode="linear", space="index")["value"].values
    assert np.all(v[inside] == 1.0)
    assert np.all(v[~inside] < 1.0)  # a missing corner with a non-zero weight reads background 0


def test_tiles_count_as_defined_and_bad_input():
    vol = vdbflow.Volume.from_voxels(
        np.zeros((1, 3), int),
        np.ones(1, np.float32),
        tiles=(np.array([[128, 0, 0], [8, 0, 0]]), np.array([128, 8]), np.ones(2)),
    )
    assert defined_voxels(
        vol.topology, np.array([[200, 5, 5], [9, 1, 1], [0, 0, 0], [1, 0, 0], [-1, 0, 0]])
    ).tolist() == [True, True, True, False, False]
    np.testing.assert_array_equal(
        vol.stencil_inside(np.array([[150.2, 3.5, 4.0], [np.nan, 0, 0]]), space="index"), [True, False]
    )
    with pytest.raises(vdbflow.SamplingError, match="expected a mode"):
        vol.stencil_inside(np.zeros((1, 3)), mode="cubic")
    with pytest.raises(vdbflow.PointsError, match=r"\(N, 3\)"):
        vol.stencil_inside(np.zeros((3, 2)))


def test_closest_agrees_with_closest_sampling_at_negative_half_integers(rng):
    """The oracle is the sampler itself: on a field of ones over a background of 0, closest sampling
    returns 1 exactly where stencil_inside(mode="closest") says its voxel is active."""
    ijk = np.array([[-2, 0, 0], [-1, 0, 0], [3, 1, -4], [0, -1, 0]])
    vol = vdbflow.Volume.from_voxels(ijk, np.ones(len(ijk), np.float32), background=0.0)
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
            [-2.4999999999999996, 0, 0],
            [-0.49999999999999994, 0, 0],
        ]
    )
    pts = np.concatenate([halves, ijk[rng.integers(0, len(ijk), 400)] + rng.uniform(-0.6, 0.6, (400, 3)).round(1)])
    got = vdbflow.ops.coverage.stencil_inside(vol, pts, "closest", space="index")
    want = vol.sample(pts, "closest", space="index")["value"].values == 1
    np.testing.assert_array_equal(got, want)
    assert not got[0] and got[1]  # -2.5 rounds to -3 (no voxel), -1.5 to -2
