"""The volume model: constructors, properties, tree order, tiles, validation."""

import numpy as np
import pytest
from reference import random_sparse_voxels

import vdbflow
from vdbflow.core import tree


def test_from_voxels_properties(rng):
    ijk, values = random_sparse_voxels(rng, n_leaves=7, components=3)
    vol = vdbflow.Volume.from_voxels(ijk, values, background=(1, 2, 3), voxel_size=(0.5, 1.0, 2.0), origin=(10, 20, 30))
    assert vol.dtype == np.float64 and vol.components == 3 and vol.value_type.name == "vec3d"
    assert vol.leaf_count == len(np.unique(ijk >> 3, axis=0))
    assert vol.active_voxel_count == len(ijk)
    np.testing.assert_array_equal(vol.background, [1, 2, 3])
    np.testing.assert_array_equal(vol.voxel_size, [0.5, 1.0, 2.0])
    M = vol.index_to_world
    np.testing.assert_array_equal(M, [[0.5, 0, 0, 10], [0, 1, 0, 20], [0, 0, 2, 30], [0, 0, 0, 1]])
    np.testing.assert_array_equal(vol.index_bbox, [ijk.min(axis=0), ijk.max(axis=0)])
    lo, hi = ijk.min(axis=0), ijk.max(axis=0) + 1
    np.testing.assert_allclose(vol.world_bbox, [lo * [0.5, 1, 2] + [10, 20, 30], hi * [0.5, 1, 2] + [10, 20, 30]])
    active = vol.active_voxels()
    assert active.dtype == np.int32 and active.shape == ijk.shape
    assert {tuple(p) for p in active.tolist()} == {tuple(p) for p in ijk.tolist()}
    # active_values follow active_voxels
    lookup = {tuple(p): v for p, v in zip(ijk.tolist(), values.tolist(), strict=True)}
    np.testing.assert_array_equal(vol.active_values(), [lookup[tuple(p)] for p in active.tolist()])


def test_the_tree_order_check_agrees_with_sorting(rng):
    """tree.in_tree_order (pairwise, no sort) says yes exactly when tree.tree_order leaves the keys as
    they are: sorted keys, repeated keys, one pair swapped, every level's boundaries, the int32 edges."""
    edge = np.array([-(2**28), 2**28 - 1])
    for case in range(400):
        span = [4, 300, 5000, 2**28][case % 4]
        keys = rng.integers(-span, span, (int(rng.integers(0, 50)), 3)).astype(np.int32)
        if case % 5 == 0 and len(keys):
            keys[rng.integers(0, len(keys), 3)] = rng.choice(edge, (3, 3))
        if case % 3:
            keys = keys[tree.tree_order(keys)]
        if case % 6 == 1 and len(keys) > 2:
            keys[[0, 1]] = keys[[1, 0]]
        if case % 7 == 0 and len(keys) > 3:
            keys[2] = keys[1]
        assert tree.in_tree_order(keys) == np.array_equal(tree.tree_order(keys), np.arange(len(keys)))
    masks = rng.integers(0, 2**63, (500, 8), dtype=np.uint64)
    masks[::9], masks[::13] = 0, np.uint64(2**64 - 1)
    counts = np.bitwise_count(masks).astype(np.int64)
    prefix, first = tree.word_prefix(masks)
    np.testing.assert_array_equal(prefix, np.cumsum(counts, axis=1) - counts)
    np.testing.assert_array_equal(first, np.concatenate([[0], np.cumsum(counts.sum(axis=1))[:-1]]))
    assert prefix.dtype == np.uint16 and first.dtype == np.int64


def test_active_voxels_are_in_tree_order(rng):
    ijk, _ = random_sparse_voxels(rng, n_leaves=20, spread=800)  # several root tiles, negative ones too
    topo = vdbflow.Volume.from_active(ijk)
    active = topo.active_voxels()
    leaves = active >> 3
    change = np.any(np.diff(leaves, axis=0) != 0, axis=1)
    leaf_seq = np.concatenate([leaves[:1], leaves[1:][change]])
    assert len(leaf_seq) == topo.leaf_count  # each leaf's voxels are contiguous
    np.testing.assert_array_equal(tree.tree_order(leaf_seq), np.arange(len(leaf_seq)))
    # voxels by mask bit inside a leaf
    offsets = tree.voxel_offsets(active)
    same_leaf = ~np.concatenate([[True], change])
    assert np.all(np.diff(offsets)[same_leaf[1:]] > 0)


def test_from_active_with_data_shares_topology(rng):
    ijk = np.array([[0, 0, 0], [5, 5, 5], [5, 5, 5], [-1, -1, -1], [100, 0, -100]])
    topo = vdbflow.Volume.from_active(ijk)  # repeats allowed
    assert topo.active_voxel_count == 4 and topo.leaf_count == 3
    a = topo.with_data(np.arange(4.0), background=-1)
    b = topo.with_data(np.arange(8.0).reshape(4, 2), background=0)
    assert a.topology is b.topology and b.components == 2 and a.index_layout
    v, _ = vdbflow.sample_grad_arrays(a, topo.active_voxels().astype(float), "closest")
    np.testing.assert_array_equal(v, np.arange(4.0))


def test_from_dense_layout_and_default_activity(rng):
    dense = np.zeros((20, 9, 17, 3), np.float32)
    dense[2:5, 1:4, 3:9] = rng.standard_normal((3, 3, 6, 3))
    dense[18, 8, 16] = [1, 2, 3]
    vol = vdbflow.Volume.from_dense(dense, voxel_size=0.1, origin=(1, 2, 3), background=0)
    assert vol.value_type.name == "vec3f"
    assert vol.active_voxel_count == int(np.any(dense != 0, axis=3).sum())
    i, j, k = np.nonzero(np.any(dense != 0, axis=3))
    pts = np.stack([i, j, k], 1).astype(float)
    assert vol.leaf_count == len(np.unique(np.stack([i, j, k], 1) >> 3, axis=0)) == 3
    v, _ = vdbflow.sample_grad_arrays(vol, pts, "closest")
    np.testing.assert_array_equal(v, dense[i, j, k])
    # world placement: voxel (i, j, k) at origin + ijk * voxel_size
    w = vdbflow.sample_grad_arrays(vol, np.array([[1 + 18 * 0.1, 2 + 0.8, 3 + 1.6]]), "closest", space="world")[0]
    np.testing.assert_array_equal(w[0], [1, 2, 3])
    # every voxel of the dense array reads back, active or not
    all_pts = np.stack(np.meshgrid(*[np.arange(s) for s in dense.shape[:3]], indexing="ij"), -1).reshape(-1, 3)
    v, _ = vdbflow.sample_grad_arrays(vol, all_pts.astype(float), "closest")
    np.testing.assert_array_equal(v, dense.reshape(-1, 3))


def test_from_dense_explicit_mask_and_scalar():
    dense = np.arange(4 * 4 * 4, dtype=np.float64).reshape(4, 4, 4)
    active = dense % 3 == 0
    vol = vdbflow.Volume.from_dense(dense, active=active, background=0)
    assert vol.active_voxel_count == int(active.sum())
    assert vol.components == 1 and np.ndim(vol.background) == 0
    with pytest.raises(vdbflow.VolumeError, match="boolean active mask of shape"):
        vdbflow.Volume.from_dense(dense, active=active[:2])


@pytest.mark.parametrize("name", list(vdbflow.VALUE_TYPES))
def test_all_value_types(name):
    vt = vdbflow.VALUE_TYPES[name]
    shape = (3,) if vt.components == 1 else (3, vt.components)
    vol = vdbflow.Volume.from_voxels([[0, 0, 0], [1, 0, 0], [9, 9, 9]], np.ones(shape, vt.dtype))
    assert vol.value_type == vt and vol.dtype == vt.dtype and vol.components == vt.components


def test_transforms():
    M = np.array([[0, -2.0, 0, 1], [1.5, 0, 0, 2], [0, 0, 0.5, 3], [0, 0, 0, 1]])
    vol = vdbflow.Volume.from_voxels([[0, 0, 0]], [1.0], transform=M)
    np.testing.assert_array_equal(vol.index_to_world, M)
    np.testing.assert_allclose(vol.voxel_size, [1.5, 2.0, 0.5])
    np.testing.assert_allclose(vol.transform.apply_inverse(vol.transform.apply([[1.0, 2.0, 3.0]])), [[1, 2, 3]])
    with pytest.raises(vdbflow.VolumeError, match="singular"):
        vdbflow.Transform(np.diag([1.0, 0.0, 1.0, 1.0]))
    with pytest.raises(vdbflow.VolumeError, match=r"\(4, 4\)"):
        vdbflow.Transform(np.eye(3))
    with pytest.raises(vdbflow.VolumeError, match="positive finite voxel sizes"):
        vdbflow.Volume.from_voxels([[0, 0, 0]], [1.0], voxel_size=-1)
    with pytest.raises(vdbflow.VolumeError, match="either transform or voxel_size"):
        vdbflow.Volume.from_voxels([[0, 0, 0]], [1.0], transform=np.eye(4), voxel_size=2)


def test_tile_validation():
    ijk = np.array([[0, 0, 0]])
    make = lambda origins, sizes: vdbflow.Volume.from_voxels(  # noqa: E731
        ijk, [1.0], tiles=(np.array(origins), np.array(sizes), np.zeros(len(sizes)))
    )
    assert make([[8, 0, 0], [128, 0, 0], [4096, 0, 0]], [8, 128, 4096]).tile_count == 3
    with pytest.raises(vdbflow.VolumeError, match="8, 128 or 4096"):
        make([[16, 0, 0]], [16])
    with pytest.raises(vdbflow.VolumeError, match="multiples of the tile size"):
        make([[8, 0, 0]], [128])
    with pytest.raises(vdbflow.VolumeError, match="one leaf or tile per key"):
        make([[0, 0, 0]], [8])  # the leaf's own place
    with pytest.raises(vdbflow.VolumeError, match="do not overlap"):
        make([[0, 0, 0]], [128])  # covers the leaf
    assert make([[128, 0, 0], [0, 0, 4096]], [128, 4096]).tile_count == 2  # side by side
    with pytest.raises(vdbflow.VolumeError, match="do not overlap"):
        make([[4096, 0, 0], [4096 + 128, 0, 0]], [4096, 128])


def test_volume_errors(rng):
    with pytest.raises(vdbflow.VolumeError, match=r"voxel \[1, 2, 3\] more than once"):
        vdbflow.Volume.from_voxels([[1, 2, 3], [0, 0, 0], [1, 2, 3]], [1.0, 2.0, 3.0])
    with pytest.raises(vdbflow.VolumeError, match=r"values of shape \(2,\) or \(2, C\)"):
        vdbflow.Volume.from_voxels([[1, 2, 3], [0, 0, 0]], [1.0, 2.0, 3.0])
    with pytest.raises(vdbflow.VolumeError, match=r"ijk of shape \(n, 3\)"):
        vdbflow.Volume.from_voxels([[1, 2]], [1.0])
    with pytest.raises(vdbflow.VolumeError, match="int32 index range"):
        vdbflow.Volume.from_voxels([[2**31, 0, 0]], [1.0])
    with pytest.raises(vdbflow.VolumeError, match="dtype int32, int64, uint32, float32 or float64, got float16"):
        vdbflow.Volume.from_voxels([[0, 0, 0]], np.ones(1, np.float16))
    with pytest.raises(vdbflow.VolumeError, match="representable as int32"):
        vdbflow.Volume.from_voxels([[0, 0, 0]], np.ones(1, np.int32), background=0.5)
    with pytest.raises(vdbflow.VolumeError, match=r"background of shape \(3,\)"):
        vdbflow.Volume.from_voxels([[0, 0, 0]], np.ones((1, 3)), background=[1, 2])
    topo = vdbflow.Volume.from_active([[0, 0, 0], [1, 1, 1]])
    with pytest.raises(vdbflow.VolumeError, match=r"voxel_data of shape \(2,\) or \(2, C\)"):
        topo.with_data(np.zeros(3))
    with pytest.raises(vdbflow.VolumeError, match="representable as uint32"):
        topo.with_data(np.zeros(2, np.uint32), background=-1)
    with pytest.raises(vdbflow.VolumeError, match="1 to 64 components"):
        topo.with_data(np.zeros((2, 65)))
    with pytest.raises(vdbflow.VolumeError, match="distinct component names"):
        topo.with_data(np.zeros((2, 3)), component_names=["u", "u", "w"])


def test_empty_volume_reads_background():
    vol = vdbflow.Volume.from_voxels(np.zeros((0, 3), np.int32), np.zeros((0, 3)), background=(1.0, 2.0, 3.0))
    assert vol.leaf_count == 0 and vol.index_bbox is None and vol.world_bbox is None
    v, j = vdbflow.sample_grad_arrays(vol, np.array([[0.5, 0.5, 0.5]]))
    np.testing.assert_array_equal(v, [[1, 2, 3]])
    assert not j.any()


def test_from_dense_and_from_voxels_take_units():
    """Units given to the constructors are the volume's and its samples' (issue: from_dense took none);
    text that is not printable is refused."""
    vel = np.ones((8, 8, 8, 3), np.float32)
    vol = vdbflow.Volume.from_dense(vel, voxel_size=0.5, name="velocity", units="m/s", length_units="m")
    assert (vol.units, vol.length_units) == ("m/s", "m")
    ds = vol.sample_grad([[1.0, 1.0, 1.0]])
    assert ds["velocity"].attrs["units"] == "m/s" and ds["velocity_jacobian"].attrs["units"] == "1/s"
    pts = vdbflow.Volume.from_voxels([[0, 0, 0]], [2.0], units="K")
    assert pts.units == "K" and pts.length_units is None
    for bad in ("\ud800", "m\x00s", 5):
        with pytest.raises(vdbflow.VolumeError, match="printable text"):
            vdbflow.Volume.from_dense(np.ones((8, 8, 8)), units=bad)
    with pytest.raises(vdbflow.VolumeError, match="length_units"):
        vdbflow.Volume.from_voxels([[0, 0, 0]], [1.0], length_units=b"m")


def test_a_transform_reads_as_its_matrix():
    """``vol.transform[0, 0]`` and ``numpy.asarray(vol.transform)`` (the new-user pass tried the first: not
    subscriptable) read the index-to-world matrix."""
    vol = vdbflow.Volume.from_dense(np.ones((8, 8, 8)), voxel_size=(0.5, 0.25, 2.0), origin=(1.0, 2.0, 3.0))
    t = vol.transform
    assert t[0, 0] == 0.5 and t[1, 1] == 0.25 and t[2, 2] == 2.0
    np.testing.assert_array_equal(t[:3, 3], [1.0, 2.0, 3.0])
    m = np.asarray(t)
    np.testing.assert_array_equal(m, t.index_to_world)
    m[0, 0] = 7.0  # a copy: the transform is unchanged
    assert t[0, 0] == 0.5
    np.testing.assert_allclose(t.apply([[2.0, 4.0, 1.0]]), [[2.0, 3.0, 5.0]])


def test_apply_finite_gives_the_bits_of_apply():
    """Transform.apply_finite (the job's random points, elementwise for an axis-aligned transform) equals
    apply's matrix product bit for bit on finite coordinates, zeros of both signs included; other
    transforms go through apply itself."""
    from vdbflow.core.transform import Transform

    rng = np.random.default_rng(7)
    flipped = np.diag([-0.5, 2.0, 1e-3, 1.0])
    flipped[:3, 3] = [-0.0, 3.25, 1e6]
    sheared = np.eye(4)
    sheared[0, 1] = 0.3
    for t in (
        Transform.from_voxel_size(2 * np.pi / 64, (np.pi / 64,) * 3),
        Transform.from_voxel_size((0.5, 0.25, 2.0), (-3.0, 0.0, 7.0)),
        Transform(flipped),
        Transform(sheared),
    ):
        for scale in (1.0, 1e3, 1e7):
            p = rng.uniform(-scale, scale, (200_000, 3))
            p[:100] = 0.0
            p[100:200] = -0.0
            p[200:300, 1] = -0.0
            want, got = t.apply(p), t.apply_finite(p)
            np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
