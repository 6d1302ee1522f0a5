"""Random points inside active voxels: the kernels' rank-select against the NumPy list of active
voxels (OnIndex order), and generated points that land in active voxels."""

import numpy as np
import pytest
from reference import random_sparse_voxels

import vdbflow
from vdbflow import devices
from vdbflow.jobs.points import _random_in_voxels


def test_rank_select_gives_the_active_voxels_in_onindex_order(rng):
    ijk, _ = random_sparse_voxels(rng, n_leaves=30, spread=5, fill=0.3)
    topo = vdbflow.Volume.from_active(ijk)
    leaf_end = np.cumsum(np.bitwise_count(topo.masks).sum(axis=1, dtype=np.int64))
    ranks = np.arange(leaf_end[-1], dtype=np.int64)
    got = devices.run("active_voxels_at", topo.leaf_origins, topo.masks, leaf_end, ranks)
    np.testing.assert_array_equal(got, topo.active_voxels())  # every rank, in order
    with pytest.raises(IndexError):
        devices.run("active_voxels_at", topo.leaf_origins, topo.masks, leaf_end, np.array([leaf_end[-1]]))


def test_random_points_fall_in_active_voxels(rng):
    ijk, _ = random_sparse_voxels(rng, n_leaves=30, spread=5, fill=0.3)
    topo = vdbflow.Volume.from_active(ijk)
    leaf_end = np.cumsum(np.bitwise_count(topo.masks).sum(axis=1, dtype=np.int64))
    pts = _random_in_voxels(3, 0, 50_000, 7, topo.leaf_origins, topo.masks, leaf_end, None)
    voxel = np.round(pts).astype(np.int64)  # each point lies within half a voxel of its voxel's centre
    active = {tuple(v) for v in topo.active_voxels().tolist()}
    assert all(tuple(v) in active for v in voxel.tolist())
    expected = len(active) * (1 - np.exp(-50_000 / len(active)))  # distinct voxels of 50,000 uniform draws
    assert len({tuple(v) for v in voxel.tolist()}) > 0.9 * expected
    again = _random_in_voxels(3, 0, 50_000, 7, topo.leaf_origins, topo.masks, leaf_end, None)
    np.testing.assert_array_equal(pts, again)  # a pure function of (seed, block)
