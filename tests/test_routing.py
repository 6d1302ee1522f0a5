"""Routing in the kernels (route.h) against a NumPy oracle: partition of each point, a stable grouping,
and the background shortcut (points sent nowhere must read only background)."""

import numpy as np
import pytest
from reference import probe_points, random_sparse_voxels

import vdbflow
from vdbflow.distribution.plan import near_blocks, plan_partitions


def spread21(v):
    v = v.astype(np.uint64) & np.uint64(0x1FFFFF)
    out = np.zeros_like(v)
    for bit in range(21):  # bit b of v goes to bit 3b
        out |= ((v >> np.uint64(bit)) & np.uint64(1)) << np.uint64(3 * bit)
    return out


def partition_oracle(points, router, transform, space):
    """Partition of each point: floor of the index coordinate, leaf key, Morton code, boundaries."""
    u = points if space == "index" else transform.apply_inverse(points)
    keys = np.floor(u).astype(np.int64) >> 3
    rel = np.clip((keys - router.origin) >> router.shift, 0, (1 << 21) - 1)
    code = (spread21(rel[:, 0]) << np.uint64(2)) | (spread21(rel[:, 1]) << np.uint64(1)) | spread21(rel[:, 2])
    return np.searchsorted(router.boundaries, code, side="right")


def volume(rng):
    ijk, values = random_sparse_voxels(rng, n_leaves=60, spread=6, fill=0.4, components=3)
    tiles = (np.array([[128, 0, 0], [-8, 64, 0]]), np.array([128, 8]), np.ones((2, 3)))
    return ijk, vdbflow.Volume.from_voxels(ijk, values, 0.25, tiles=tiles, voxel_size=0.5, origin=(1, 2, 3))


@pytest.mark.parametrize("partitions", [1, 2, 7, 17])
@pytest.mark.parametrize("space", ["index", "world"])
def test_partitions_match_the_numpy_oracle(rng, partitions, space):
    ijk, vol = volume(rng)
    plan = plan_partitions(vol.topology, partitions)
    pts_index = np.concatenate([probe_points(rng, ijk, 5_000), rng.uniform(-60, 300, (5_000, 3))])
    pts = pts_index if space == "index" else vol.transform.apply(pts_index)
    order, bounds, grouped = plan.router.route(pts, vol.transform, space)
    assert bounds[0] == 0 and bounds[1] == 0 and bounds[-1] == len(pts)  # no shortcut without a table
    want = partition_oracle(pts, plan.router, vol.transform, space)
    got = np.empty(len(pts), np.int64)
    got[order] = np.repeat(np.arange(-1, partitions), np.diff(bounds))
    # points within rounding of a leaf border may fall either side in the oracle's world->index map
    u = vol.transform.apply_inverse(pts) if space == "world" else pts
    clear = np.all(np.abs(u - np.round(u / 8) * 8) > 1e-6, axis=1)
    np.testing.assert_array_equal(got[clear], want[clear])
    # stable: inside each group, input order; grouped points are the points in that order
    for g in range(len(bounds) - 1):
        assert np.all(np.diff(order[bounds[g] : bounds[g + 1]]) > 0)
    np.testing.assert_array_equal(grouped, pts[order])
    assert sorted(order.tolist()) == list(range(len(pts)))


def test_background_shortcut_only_takes_background_points(rng):
    ijk, vol = volume(rng)
    plan = plan_partitions(vol.topology, 5, stencil_radius=1)
    near = near_blocks(vol.topology, plan.stencil, plan.router)
    pts = np.concatenate(
        [
            probe_points(rng, ijk, 2_000),
            rng.uniform(-2000, 2000, (20_000, 3)),
            rng.uniform(100, 280, (2_000, 3)),  # in and around the 128^3 tile
            [[np.nan, 0, 0], [3e9, 0, 0]],
        ]
    )
    order, bounds, _ = plan.router.route(pts, vol.transform, "index", near)
    quiet = order[bounds[0] : bounds[1]]
    assert len(quiet) > 10_000  # most far points are answered without a partition
    for mode in ("linear", "closest"):
        ds = vol.sample_grad(pts[quiet], mode, space="index")
        assert np.all(ds["value"].values == 0.25)
        assert np.all(ds["value_jacobian"].values == 0)
    # never a point based in a leaf or a tile, nor a non-finite one
    assert not np.isin(quiet, np.arange(2_000)).any()
    assert not np.isin(quiet, [len(pts) - 2, len(pts) - 1]).any()


@pytest.mark.parametrize("partitions", [2, 7, 40])
def test_blocks_of_one_partition_route_like_their_points(rng, partitions):
    """A near block owned by one partition answers with that partition (one lookup); blocks where
    partitions meet fall back to each point's code.  Both must agree with the oracle."""
    keys = np.unique(rng.integers(-64, 64, (400, 3)), axis=0)  # leaves scattered over ~8^3 blocks
    ijk = keys * 8 + rng.integers(0, 8, keys.shape)
    vol = vdbflow.Volume.from_voxels(ijk, rng.random(len(ijk)), 0.0, voxel_size=0.5)
    plan = plan_partitions(vol.topology, partitions)
    near = near_blocks(vol.topology, plan.stencil, plan.router)
    values = near[:, 3][near[:, 3] != np.iinfo(np.int32).min]
    mixed = values == vdbflow._core.ROUTE_MIXED_BLOCK
    assert mixed.any() and (~mixed).any()  # both kinds of block occur
    assert values[~mixed].min() >= 0 and values[~mixed].max() < partitions
    pts = np.concatenate([ijk + rng.random(ijk.shape), rng.uniform(-600, 600, (40_000, 3))])
    order, bounds, _ = plan.router.route(pts, vol.transform, "index", near)
    got = np.empty(len(pts), np.int64)
    got[order] = np.repeat(np.arange(-1, partitions), np.diff(bounds))
    routed = got >= 0
    assert routed[: len(ijk)].all()  # points in leaves are never sent to the background
    np.testing.assert_array_equal(got[routed], partition_oracle(pts, plan.router, vol.transform, "index")[routed])


def test_routing_with_float32_points_and_empty_input(rng):
    ijk, vol = volume(rng)
    plan = plan_partitions(vol.topology, 3)
    pts = probe_points(rng, ijk, 1_000).astype(np.float32)
    order, bounds, grouped = plan.router.route(pts, vol.transform, "index")
    assert grouped.dtype == np.float32
    np.testing.assert_array_equal(grouped, pts[order])
    order, bounds, grouped = plan.router.route(np.zeros((0, 3)), vol.transform, "index")
    assert len(order) == 0 and bounds.tolist() == [0] * 5 and grouped.shape == (0, 3)
