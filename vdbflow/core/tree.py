"""Leaf-level tree chores, vectorised: NanoVDB tree order, active masks, OnIndex prefix counts.

Shapes: leaf origins (L, 3) int32 (multiples of 8); masks (L, 8) uint64 with bit
``(x&7)<<6 | (y&7)<<3 | (z&7)`` of word ``bit >> 6``.
"""

from __future__ import annotations

import numpy as np

from vdbflow.core import kernel

# facts of the kernels (grid.h, read through vdbflow.core.kernel)
LEAF_DIM = kernel.LEAF_DIM
LEAF_VOXELS = kernel.LEAF_VOXELS
TILE_SIZES = kernel.TILE_SIZES  # level 0 (lower-node tile), 1 (upper-node tile), 2 (root tile)
LEVEL_SHIFTS = kernel.LEVEL_SHIFTS
LEAF_SHIFT = kernel.LEAF_SHIFT  # leaf key = voxel >> LEAF_SHIFT
# in-leaf coordinates (LEAF_VOXELS, 3) of each voxel offset, the inverse of the kernels' voxel_offset
_LOCAL = np.stack(np.meshgrid(*[np.arange(LEAF_DIM)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
LOCAL_COORDINATES = np.empty_like(_LOCAL, dtype=np.int32)
LOCAL_COORDINATES[kernel.voxel_offsets(_LOCAL)] = _LOCAL
LOCAL_COORDINATES.setflags(write=False)


def voxel_offsets(ijk: np.ndarray) -> np.ndarray:
    """Offset of voxels (N, 3) int32 inside their leaf, (N,) int64 in [0, 512): the kernels'
    ``voxel_offset``."""
    return kernel.voxel_offsets(ijk)


def tree_order(leaf_keys: np.ndarray) -> np.ndarray:
    """Permutation sorting leaf keys (L, 3) = origin >> 3 in NanoVDB tree order.

    The order of a NanoVDB tree walk: root children by their 4096^3 block coordinates (signed,
    lexicographic in i, j, k), then the child index in the upper node (32^3), then the child index in
    the lower node (16^3).  Matches the voxel order of Warp's index grids.
    """
    s0, s1, s2 = LEVEL_SHIFTS  # leaf, lower-node and upper-node shifts: 3, 7, 12
    lower_bits, upper_bits = s1 - s0, s2 - s1  # children per axis: 16 and 32
    origin = leaf_keys.astype(np.int64) << s0
    root = origin >> s2
    upper = (origin >> s1) & ((1 << upper_bits) - 1)
    lower = (origin >> s0) & ((1 << lower_bits) - 1)
    child = (((upper[:, 0] << 2 * upper_bits) | (upper[:, 1] << upper_bits) | upper[:, 2]) << 3 * lower_bits) | (
        (lower[:, 0] << 2 * lower_bits) | (lower[:, 1] << lower_bits) | lower[:, 2]
    )
    return np.lexsort((child, root[:, 2], root[:, 1], root[:, 0]))


def in_tree_order(leaf_keys: np.ndarray) -> bool:
    """Whether leaf keys (L, 3) = origin >> 3 of int32 origins are already in NanoVDB tree order
    (``tree_order`` would leave them as they are: non-decreasing by root block, then child index),
    checked pair by pair without sorting."""
    if len(leaf_keys) < 2:
        return True
    s0, s1, s2 = LEVEL_SHIFTS  # 3, 7, 12
    lower_bits, upper_bits = s1 - s0, s2 - s1  # 4 and 5 bits of each leaf key coordinate
    cols = np.ascontiguousarray(leaf_keys.T, dtype=np.int32)  # (3, L); keys of int32 origins fit
    # the root block coordinates (within +-2^19), biased into 21 bits each and packed into one int64
    block = np.zeros(len(leaf_keys), np.int64)
    child = np.zeros(len(leaf_keys), np.int32)  # the child index: upper-node bits, then lower-node bits
    for axis, k in enumerate(cols):
        block |= ((k >> (s2 - s0)) + (1 << 20)).astype(np.int64) << (21 * (2 - axis))
        child |= ((k >> lower_bits) & ((1 << upper_bits) - 1)) << (3 * lower_bits + upper_bits * (2 - axis))
        child |= (k & ((1 << lower_bits) - 1)) << (lower_bits * (2 - axis))
    step = np.diff(block)
    return bool(np.all((step > 0) | ((step == 0) & (child[1:] >= child[:-1]))))


def masks_from_bits(bits: np.ndarray) -> np.ndarray:
    """(L, 8) uint64 masks from (L, 512) booleans indexed by voxel offset."""
    packed = np.packbits(np.ascontiguousarray(bits, dtype=bool), axis=1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64, copy=False).reshape(-1, 8)


def bits_from_masks(masks: np.ndarray) -> np.ndarray:
    """(L, 512) booleans from (L, 8) uint64 masks."""
    as_bytes = np.ascontiguousarray(masks.astype("<u8", copy=False)).view(np.uint8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little").astype(bool)


def word_prefix(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OnIndex bookkeeping: per-word prefix counts (L, 8) uint16 and the first index of each leaf
    (L,) int64 (voxels numbered leaf by leaf, by mask bit)."""
    counts = np.bitwise_count(masks).astype(np.uint16)  # at most 64 a word, 512 a leaf: uint16 holds the sums
    prefix = np.empty_like(counts)
    prefix[:, 0] = 0
    for w in range(1, counts.shape[1]):
        np.add(prefix[:, w - 1], counts[:, w - 1], out=prefix[:, w])
    per_leaf = prefix[:, -1].astype(np.int64) + counts[:, -1]
    first = np.cumsum(per_leaf) - per_leaf
    return prefix, first


def active_coordinates(leaf_origins: np.ndarray, masks: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """(n, 3) int32 coordinates of active voxels, leaf by leaf, by mask bit (OnIndex order)."""
    parts = []
    local = LOCAL_COORDINATES
    for start in range(0, len(masks), chunk):
        bits = bits_from_masks(masks[start : start + chunk])
        leaf, off = np.nonzero(bits)
        parts.append(leaf_origins[start + leaf] + local[off])
    if not parts:
        return np.zeros((0, 3), np.int32)
    return np.concatenate(parts).astype(np.int32, copy=False)


def active_bbox(leaf_origins: np.ndarray, masks: np.ndarray, chunk: int = 1 << 16) -> np.ndarray | None:
    """(2, 3) int64 [min, max] of active voxels, or None when there is none."""
    lo = np.full(3, np.iinfo(np.int64).max)
    hi = np.full(3, np.iinfo(np.int64).min)
    found = False
    idx = np.arange(LEAF_DIM)
    for start in range(0, len(masks), chunk):
        bits = bits_from_masks(masks[start : start + chunk]).reshape(-1, 8, 8, 8)
        origins = leaf_origins[start : start + chunk].astype(np.int64)
        for axis in range(3):
            others = tuple(a for a in range(1, 4) if a != axis + 1)
            occupied = np.asarray(bits.any(axis=others))  # (L, 8)
            has = occupied.any(axis=1)
            if not has.any():
                continue
            found = True
            first = np.argmax(occupied, axis=1)
            last = LEAF_DIM - 1 - np.argmax(occupied[:, ::-1], axis=1)
            lo[axis] = min(lo[axis], int((origins[has, axis] + idx[first[has]]).min()))
            hi[axis] = max(hi[axis], int((origins[has, axis] + idx[last[has]]).max()))
    return np.stack([lo, hi]) if found else None


def gather_leaf_values(flat: np.ndarray, at: np.ndarray, C: int) -> np.ndarray:
    """(L * 512, C) read-only copy of the leaves' values, leaf l's 512 x C starting at element ``at[l]`` of
    the flat array ``flat`` (values left in place inside a mapped file)."""
    out = np.empty((len(at) * LEAF_VOXELS, C), flat.dtype)
    span = np.arange(LEAF_VOXELS * C)
    for start in range(0, len(at), 4096):
        block = at[start : start + 4096]
        out[start * LEAF_VOXELS : (start + len(block)) * LEAF_VOXELS] = flat[block[:, None] + span].reshape(-1, C)
    out.setflags(write=False)
    return out


def strided_leaf_values(flat: np.ndarray, at: np.ndarray, C: int) -> np.ndarray | None:
    """(L, 512, C) read-only strided view of the leaves' values when they lie evenly spaced in ``flat``
    (leaf l at element ``at[l]``), else None."""
    if len(at) > 1 and np.all(np.diff(at) == at[1] - at[0]) and at[1] > at[0]:
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[at[0] :],
            shape=(len(at), LEAF_VOXELS, C),
            strides=(int(at[1] - at[0]) * item, C * item, item),
            writeable=False,
        )
    return None
