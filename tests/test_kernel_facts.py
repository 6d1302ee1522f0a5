"""Facts of the kernels that Python reads from the extension (vdbflow.core.kernel), checked against
what the kernels do: a voxel written at its exported offset is read back by sampling, tile codes
round-trip through the tables to sampled tile values, the transform layout maps points as the
matrix does, and the argument record's layout is the one the extension reads."""

import numpy as np
import pytest

import vdbflow
from vdbflow import _core
from vdbflow.core import kernel
from vdbflow.core.value_types import value_type_for


def test_tree_facts_agree_with_each_other():
    assert kernel.LEAF_DIM == 1 << kernel.LEVEL_SHIFTS[0] == 1 << kernel.LEAF_SHIFT
    assert kernel.LEAF_VOXELS == kernel.LEAF_DIM**3
    assert kernel.TILE_SIZES == tuple(1 << s for s in kernel.LEVEL_SHIFTS)
    assert kernel.LEVEL_SHIFTS == tuple(sorted(kernel.LEVEL_SHIFTS))
    from vdbflow.ops import sampling

    assert sampling.MODES == kernel.MODES and sampling.STENCIL_RADIUS == kernel.STENCIL_RADIUS


def test_a_voxel_written_at_its_offset_is_read_back_by_sampling(rng):
    """Per-leaf values put at leaf * LEAF_VOXELS + voxel_offsets(ijk), with the mask bit of that
    offset set, are what closest sampling reads at ijk - on a leaf at negative coordinates too."""
    origins = np.array([[8, -16, 24], [-8, 0, -4096]], np.int32)
    origins = origins[vdbflow.core.tree.tree_order(origins >> kernel.LEAF_SHIFT)]  # a Topology's order
    ijk = np.concatenate([o + rng.integers(0, kernel.LEAF_DIM, (40, 3)) for o in origins])
    ijk = np.unique(ijk, axis=0)
    leaf = np.array(
        [
            int(np.argmax(np.all(o == (p >> kernel.LEAF_SHIFT << kernel.LEAF_SHIFT), axis=1)))
            for p, o in zip(ijk, [origins] * len(ijk), strict=True)
        ]
    )
    offset = kernel.voxel_offsets(ijk)
    assert offset.dtype == np.int64 and offset.min() >= 0 and offset.max() < kernel.LEAF_VOXELS
    rows = leaf * kernel.LEAF_VOXELS + offset
    assert len(np.unique(rows)) == len(ijk)
    data = np.full((len(origins) * kernel.LEAF_VOXELS, 1), -1.0, np.float32)
    data[rows, 0] = np.arange(len(ijk))
    bits = np.zeros(len(origins) * kernel.LEAF_VOXELS, bool)
    bits[rows] = True
    masks = vdbflow.core.tree.masks_from_bits(bits.reshape(len(origins), kernel.LEAF_VOXELS))
    topo = vdbflow.Topology(origins, masks)
    vol = vdbflow.Volume(
        topo,
        data,
        np.zeros(1, np.float32),
        np.zeros((0, 1), np.float32),
        value_type_for(np.dtype(np.float32), 1),
        False,
    )
    got = vdbflow.sample_grad_arrays(vol, ijk.astype(np.float64), "closest", jacobian=False)[0]
    np.testing.assert_array_equal(got, np.arange(len(ijk)))
    # the mask bit of the offset is the voxel's active bit
    np.testing.assert_array_equal(np.sort(np.unique(topo.active_voxels(), axis=0), axis=0), np.sort(ijk, axis=0))


def test_tile_codes_round_trip_through_the_tables_to_sampled_values():
    tiles = np.arange(6, dtype=np.int32)
    codes = kernel.encode_tiles(tiles)
    assert len(set(codes.tolist())) == len(tiles) and codes.max() < kernel.SLOT_NOT_FOUND
    origins = np.array([[8 * 3, 0, 0], [-8, -8, -8], [128, 0, 0], [-256, 128, 0], [4096, 0, 0], [-4096, 0, 4096]])
    sizes = np.array([8, 8, 128, 128, 4096, 4096])
    values = np.arange(10, 16, dtype=np.float32)
    vol = vdbflow.Volume.from_voxels(
        np.zeros((1, 3), int), np.ones(1, np.float32), background=-1.0, tiles=(origins, sizes, values)
    )
    topo = vol.topology
    for level, shift in enumerate(kernel.LEVEL_SHIFTS):
        sel = topo.tile_sizes == kernel.TILE_SIZES[level]
        keys = np.ascontiguousarray(topo.tile_origins[sel] >> shift, np.int32)
        np.testing.assert_array_equal(_core.table_lookup(topo.tables[level], keys), kernel.encode_tiles(tiles[sel]))
    centres = topo.tile_origins + topo.tile_sizes[:, None] // 2 + 0.25
    got = vdbflow.sample_grad_arrays(vol, centres, "linear", jacobian=False)[0]
    np.testing.assert_array_equal(got, values)  # tiles stay in the order given


def test_transform_layout_maps_points_as_the_matrix_does(rng):
    """Sampling a field equal to its own index coordinates at world points gives the points' index
    coordinates: the parameters sit where the kernels read them (a rotated, sheared, offset map)."""
    M = np.eye(4)
    M[:3, :3] = [[0.9, 0.4, 0.0], [-0.3, 1.2, 0.2], [0.1, -0.2, 0.7]]
    M[:3, 3] = [3.0, -2.0, 5.0]
    ijk = np.stack(np.meshgrid(*[np.arange(-6, 7)] * 3, indexing="ij"), -1).reshape(-1, 3)
    vol = vdbflow.Volume.from_voxels(ijk, ijk.astype(np.float64), transform=M)
    idx = rng.uniform(-5, 5, (500, 3))
    got = vdbflow.sample_grad_arrays(vol, vol.transform.apply(idx), "linear", space="world", jacobian=False)[0]
    np.testing.assert_allclose(got, idx, atol=1e-12)
    assert len(kernel.TRANSFORM_PARAMETERS) == len(vol.transform.kernel_parameters()) == 12


def test_record_layout_is_the_extensions():
    dt = kernel.ABI_DTYPE
    assert dt.itemsize == _core.ABI_SIZE
    spans = sorted(
        (off, off + dt.fields[name][0].itemsize) for name, (_, off) in ((n, dt.fields[n][:2]) for n in dt.names)
    )
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)) and spans[-1][1] <= dt.itemsize
    assert sum(b - a for a, b in spans) == dt.itemsize  # every byte of KernelAbi is an exported field
    assert dt["xform"].shape == (len(kernel.TRANSFORM_PARAMETERS),) and dt["tables"].shape == (3,)
    # the options of a call land where the kernels read them: the mode field switches the scheme
    ijk = np.stack(np.meshgrid(*[np.arange(-4, 5)] * 3, indexing="ij"), -1).reshape(-1, 3)
    vol = vdbflow.Volume.from_voxels(ijk, np.sin(ijk.sum(axis=1)).astype(np.float32))
    pts = np.array([[0.3, -0.2, 0.45]])
    k = vol.kernel_arrays()
    rec = kernel.host_record(k)
    for mode in ("closest", "linear", "lag4"):
        out = np.empty((1, 1), np.float32)
        _core.sample(rec.call(kernel.MODES[mode]).tobytes(), pts, True, 1, out, None, 0)
        assert out[0, 0] == vdbflow.sample_grad_arrays(vol, pts, mode, jacobian=False)[0][0]
    bad = rec.call(kernel.MODES["linear"])
    bad["table_masks"][0] = 6  # capacity 7: not a power of two
    with pytest.raises(ValueError, match="power-of-two"):
        _core.sample(bad.tobytes(), pts, True, 1, np.empty((1, 1), np.float32), None, 0)
    with pytest.raises(ValueError, match="kernel record"):
        _core.sample(b"\0" * 8, pts, True, 1, np.empty((1, 1), np.float32), None, 0)


def test_kernel_arrays_are_kept_and_records_are_not_pickled():
    import pickle

    vol = vdbflow.Volume.from_voxels(np.zeros((1, 3), int), np.ones(1, np.float32))
    k = vol.kernel_arrays()
    assert vol.kernel_arrays() is k
    kernel.host_record(k)
    assert "cpu" in k.device_cache
    assert pickle.loads(pickle.dumps(k)).device_cache == {}


def test_records_point_into_checked_copies_of_unusual_arrays(rng):
    """Big-endian, strided kernel arrays are copied once into the kernels' layout; results are the same."""
    import dataclasses

    from vdbflow.devices import cpu

    ijk = np.unique(rng.integers(-10, 10, (800, 3)), axis=0)
    vol = vdbflow.Volume.from_voxels(ijk, rng.standard_normal((len(ijk), 3)).astype(np.float32))
    k = vol.kernel_arrays()
    odd = dataclasses.replace(
        k,
        values=np.repeat(k.values.astype(">f4"), 2, axis=0)[::2],
        masks=np.asfortranarray(k.masks),
        background=k.background.astype(">f4"),
        tile_values=k.tile_values.astype(">f4"),
        device_cache={},
    )
    assert not odd.values.flags.c_contiguous and not odd.values.dtype.isnative
    pts = rng.uniform(-12, 12, (300, 3))
    want = vdbflow.sample_grad_arrays(vol, pts, "lag4")
    got = np.empty((300, 3), np.float32), np.empty((300, 3, 3), np.float32)
    cpu.sample(odd, pts, kernel.MODES["lag4"], False, False, *got)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert kernel.host_record(odd).arrays.values.flags.c_contiguous
