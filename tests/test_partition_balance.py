"""Plans balanced by leaves and by where the points fall, and by the workers' memory (issue 51).

Oracles: the leaf counts and weights summed per partition in NumPy, the points counted per owner by
routing them through the plan's own router, and the single-process volume (bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

import vdbflow
from vdbflow import synthetic
from vdbflow.distribution.plan import leaf_weights, plan_partitions


@pytest.fixture(scope="module")
def vol():
    return synthetic.flow_volume(synthetic.taylor_green(), 96, periodic=False)


def _corner_points(vol, n=60_000, seed=0):
    """Points crowded in one octant of the box (index space), all near data."""
    ijk = vol.active_voxels()
    corner = ijk[np.all(ijk < 48, axis=1)]
    rng = np.random.default_rng(seed)
    return corner[rng.integers(0, len(corner), n)] + rng.uniform(0, 1, (n, 3))


def _points_per_partition(plan, vol, pts):
    order, bounds, _ = plan.router.route(pts, vol.transform, "index")
    return np.diff(bounds)[1:]


def test_default_and_unit_weights_cut_equal_leaf_counts(vol):
    t = vol.topology
    a = plan_partitions(t, 4)
    b = plan_partitions(t, 4, weights=np.ones(t.leaf_count))
    assert [len(o) for o in a.owned] == [len(o) for o in b.owned]
    assert all(np.array_equal(x, y) for x, y in zip(a.owned, b.owned, strict=True))


def test_weights_are_cut_where_their_sum_reaches_each_share(vol):
    t = vol.topology
    rng = np.random.default_rng(1)
    w = rng.uniform(0, 3, t.leaf_count)
    shares = np.array([1.0, 2.0, 1.0, 4.0])
    plan = plan_partitions(t, 4, weights=w, shares=shares)
    sums = np.array([w[o].sum() for o in plan.owned])
    want = w.sum() * shares / shares.sum()
    assert np.all(np.abs(sums - want) <= 2 * w.max())  # within a leaf or two of each target
    assert sorted(np.concatenate(plan.owned).tolist()) == list(range(t.leaf_count))


def test_points_crowded_in_a_corner_spread_over_the_partitions(vol):
    """By leaves alone one partition samples most of a crowded cloud; balanced by the points too (half
    each), the busiest partition gets far less, and the leaves stay within a factor of the even cut."""
    t = vol.topology
    pts = _corner_points(vol)
    plain = _points_per_partition(plan_partitions(t, 4), vol, pts)
    plan = plan_partitions(t, 4, weights=leaf_weights(t, pts))
    balanced = _points_per_partition(plan, vol, pts)
    assert plain.max() > 0.7 * len(pts)  # one partition does most of the work
    assert balanced.max() < 0.55 * len(pts)
    assert max(len(o) for o in plan.owned) < 3 * t.leaf_count / 4


def test_bad_weights_and_shares_are_refused(vol):
    t = vol.topology
    with pytest.raises(vdbflow.VolumeError, match="finite leaf weights"):
        plan_partitions(t, 2, weights=np.full(t.leaf_count, np.nan))
    with pytest.raises(vdbflow.VolumeError, match="positive partition shares"):
        plan_partitions(t, 2, shares=np.array([1.0, 0.0]))


@pytest.mark.slow
def test_distribute_balanced_by_points_equals_one_process(vol):
    import distributed

    pts = _corner_points(vol, 20_000, seed=2)
    world = vol.transform.apply(pts)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as c,
        distributed.Client(c) as client,
    ):
        with vdbflow.distribute(vol, client, 4, balance=world[:5000]) as dv:
            got = dv.sample_grad(world).compute()
            counts = _points_per_partition(dv.plan, vol, pts)
        with pytest.raises(vdbflow.VolumeError, match=r"balance points of shape \(N, 3\)"):
            vdbflow.distribute(vol, client, 2, balance=world[:, :2])
    want = vol.sample_grad(world)
    for name in want.data_vars:
        np.testing.assert_array_equal(got[name].values, want[name].values)
    assert counts.max() < 0.55 * len(pts)
