"""Node arrays and their fields: bounds-checked views of a node array, child offsets resolved to
node indices (an offset that points anywhere but a node of the next level is an error), FpN leaves
walked by their bit widths, quantised leaf values decoded, root keys, child positions, masks and
the tiles vdbflow keeps."""

from __future__ import annotations

import numpy as np

from vdbflow.core import tree
from vdbflow.errors import NanoVDBError
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.header import need


def node_rows(buf: np.ndarray, start: int, count: int, size: int, what: str) -> np.ndarray:
    """(count, size) uint8 view of a contiguous node array."""
    need(buf, start, count * size, f"{what} array")
    return buf[start : start + count * size].reshape(count, size)


def node_index(
    parents: np.ndarray,
    offsets: np.ndarray,
    fields: np.ndarray,
    start: int,
    count: int,
    size: int,
    what: str,
    parent: str,
    count_at: int,
) -> np.ndarray:
    """Index of each child (parent address + offset read from the file at byte ``fields``) in its node
    array; a child that points anywhere else (outside the array, between nodes, or into another level -
    which is how an offset could loop) is an error.  Offsets are range-checked before they are added,
    so no sum can wrap around."""
    if len(offsets) > count:
        raise NanoVDBError(
            f"{len(offsets)} {what} nodes are referenced by {parent}s, but the node count at "
            f"byte {count_at} says the grid has {count}"
        )
    parents = np.asarray(parents, np.int64)
    offsets = np.asarray(offsets, np.int64)
    end = start + count * size
    bad = (offsets < start - parents) | (offsets >= end - parents)  # bounds are small: no overflow
    if not np.any(bad):
        rel = parents + offsets - start
        bad = rel % size != 0
    if np.any(bad):
        k = int(np.argmax(bad))
        raise NanoVDBError(
            f"a {parent} child offset points to byte {int(parents[k]) + int(offsets[k])} (offset read at byte "
            f"{int(fields[k])}), which is not one of the {count} {what} nodes at bytes [{start}, {end})"
        )
    index = (rel // size).astype(np.int64)
    if len(np.unique(index)) != len(index):
        raise NanoVDBError(f"a {what} node at bytes [{start}, {end}) has more than one parent")
    return index


def _fpn_log2_bits(buf: np.ndarray, addr: int) -> int:
    """log2 of the bit width of the FpN leaf at ``addr`` (bits 5-7 of its flags byte)."""
    return int(buf[addr + fmt.LEAF_OFF_FLAGS]) >> fmt.FPN_FLAGS_LOG2_SHIFT


def fpn_leaf_size(buf: np.ndarray, addr: int) -> int:
    """Bytes of the FpN leaf at ``addr``: the fixed part, then 64 bytes of codes per bit of its width."""
    return fmt.FPN_LEAF_FIXED_SIZE + fmt.FPN_CODE_BYTES_PER_BIT * (1 << _fpn_log2_bits(buf, addr))


def fpn_leaf_addresses(buf: np.ndarray, start: int, count: int, end: int, count_at: int) -> np.ndarray:
    """Byte addresses of ``count`` FpN leaves packed from ``start``: each is 96 bytes followed by
    64 x its bit width (1, 2, 4, 8 or 16; log2 in bits 5-7 of the flags byte at 15) of codes."""
    addrs = np.empty(count, np.int64)
    pos = start
    for k in range(count):
        if pos + fmt.FPN_LEAF_FIXED_SIZE > end:
            raise NanoVDBError(
                f"FpN leaf {k} of the {count} the node count at byte {count_at} gives starts at byte "
                f"{pos}, but the grid ends at byte {end}"
            )
        log2 = _fpn_log2_bits(buf, pos)
        if log2 > fmt.FPN_MAX_LOG2_BITS:
            raise NanoVDBError(
                f"FpN leaf {k} at byte {pos} gives a bit width of 2^{log2} (flags at byte "
                f"{pos + fmt.LEAF_OFF_FLAGS}); expected 1, 2, 4, 8 or 16 bits"
            )
        addrs[k] = pos
        pos += fpn_leaf_size(buf, pos)
    if pos > end:
        raise NanoVDBError(
            f"the codes of FpN leaf {count - 1} at byte {addrs[-1]} run to byte {pos}, past the grid's end (byte {end})"
        )
    return addrs


def node_index_among(
    parents: np.ndarray,
    offsets: np.ndarray,
    fields: np.ndarray,
    addrs: np.ndarray,
    what: str,
    parent: str,
    count_at: int,
) -> np.ndarray:
    """Like :func:`node_index` for nodes of different sizes at the known byte addresses ``addrs``."""
    if len(offsets) > len(addrs):
        raise NanoVDBError(
            f"{len(offsets)} {what} nodes are referenced by {parent}s, but the node count at "
            f"byte {count_at} says the grid has {len(addrs)}"
        )
    parents, offsets = np.asarray(parents, np.int64), np.asarray(offsets, np.int64)
    lo, hi = (int(addrs[0]), int(addrs[-1]) + 1) if len(addrs) else (0, 0)
    bad = (offsets < lo - parents) | (offsets >= hi - parents)  # bounds are small: no overflow
    index = np.zeros(len(offsets), np.int64)
    if not np.any(bad):
        target = parents + offsets
        index = np.searchsorted(addrs, target)
        bad = addrs[np.minimum(index, len(addrs) - 1)] != target
    if np.any(bad):
        k = int(np.argmax(bad))
        raise NanoVDBError(
            f"a {parent} child offset points to byte {int(parents[k]) + int(offsets[k])} (offset read at byte "
            f"{int(fields[k])}), which is not the start of one of the {len(addrs)} {what} nodes"
        )
    if len(np.unique(index)) != len(index):
        raise NanoVDBError(f"a {what} node at bytes [{lo}, {hi}) has more than one parent")
    return index


def leaf_floats(buf: np.ndarray, addrs: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
    """(leaves x 512, 1) float32 values of Half or Fp4/8/16/N leaves at ``addrs``: binary16 widened, or
    code * quantum + minimum in float32 (each operation rounded to float32, as NanoVDB's host code)."""

    def at(start: int, stop: int, rows: np.ndarray = addrs) -> np.ndarray:
        return buf[rows[:, None] + np.arange(start, stop)]

    n, voxels, codes_at = len(addrs), tree.LEAF_VOXELS, fmt.FP_LEAF_OFF_CODES
    if layout.leaf_kind == "half":
        return np.ascontiguousarray(at(codes_at, codes_at + 2 * voxels)).view("<f2").astype(np.float32).reshape(-1, 1)
    codes = np.empty((n, voxels), np.float32)
    if layout.leaf_kind == "fp4":  # two codes a byte, the first in the low nibble
        raw = at(codes_at, codes_at + voxels // 2)
        codes[:] = np.stack([raw & 15, raw >> 4], axis=2).reshape(n, voxels)
    elif layout.leaf_kind == "fp8":
        codes[:] = at(codes_at, codes_at + voxels)
    elif layout.leaf_kind == "fp16":
        codes[:] = np.ascontiguousarray(at(codes_at, codes_at + 2 * voxels)).view("<u2")
    else:  # FpN: per leaf bit width, codes packed least significant bit first
        log2 = buf[addrs + fmt.LEAF_OFF_FLAGS] >> fmt.FPN_FLAGS_LOG2_SHIFT
        for b in np.unique(log2):
            sel = np.nonzero(log2 == b)[0]
            bits = 1 << int(b)
            raw = np.ascontiguousarray(at(codes_at, codes_at + fmt.FPN_CODE_BYTES_PER_BIT * bits, addrs[sel]))
            if bits == 16:
                codes[sel] = raw.view("<u2")
            elif bits == 8:
                codes[sel] = raw
            else:
                unpacked = np.unpackbits(raw, axis=1, bitorder="little").reshape(len(sel), voxels, bits)
                codes[sel] = unpacked @ (1 << np.arange(bits))
    head = np.ascontiguousarray(at(fmt.FP_LEAF_OFF_MINIMUM, fmt.FP_LEAF_OFF_QUANTUM + 4)).view("<f4")
    minimum, quantum = head[:, 0:1], head[:, 1:2]
    with np.errstate(over="ignore", invalid="ignore"):
        return (codes * quantum + minimum).reshape(-1, 1)


def values_of(raw: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
    """(n, value_size) uint8 -> (n, C) values, copied (never a view that keeps a mapped file alive)."""
    return raw.copy().view(layout.dtype).reshape(len(raw), layout.components)


def child_positions(bits: np.ndarray, log2: int) -> np.ndarray:
    """Child index n -> (i, j, k) offsets in child units, for an internal node with 2**log2 per axis."""
    n = np.asarray(bits, dtype=np.int64)
    m = (1 << log2) - 1
    return np.stack([(n >> (2 * log2)) & m, (n >> log2) & m, n & m], axis=1)


def key_to_origin(keys: np.ndarray) -> np.ndarray:
    """Root keys (k | j << 21 | i << 42 of coordinates >> 12 as unsigned) -> (n, 3) int32 origins."""
    keys = keys.astype(np.uint64)
    bits = fmt.ROOT_KEY_BITS
    mask = np.uint64((1 << bits) - 1)
    parts = [(keys >> np.uint64(s)) & mask for s in (2 * bits, bits, 0)]
    return (np.stack(parts, axis=1).astype(np.uint32) << np.uint32(fmt.UPPER_LOG2)).view(np.int32)


def overlaps(origins: np.ndarray, size: int, bbox: np.ndarray | None) -> np.ndarray:
    """Which cubes [origin, origin + size) meet the inclusive index box ``bbox`` (2, 3)."""
    if bbox is None:
        return np.ones(len(origins), bool)
    o = np.asarray(origins, np.int64).reshape(-1, 3)
    return np.all((o <= bbox[1]) & (o + size - 1 >= bbox[0]), axis=1)


def column(rows: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """One little-endian field (at ``offset`` in every row of the (n, size) uint8 ``rows``) as (n,)."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(rows[:, offset : offset + width]).view(dtype)[:, 0]


def mask_bits(rows: np.ndarray, offset: int, size: int) -> np.ndarray:
    """The bits of the ``size``-byte mask at ``offset`` of a node (size,) or of rows of nodes (n, size)."""
    return np.unpackbits(rows[..., offset : offset + size], axis=-1, bitorder="little")


def kept_tiles(values: np.ndarray, active: np.ndarray, layout: fmt.GridLayout, background: np.ndarray) -> np.ndarray:
    """Which tiles (values (n, C), active states (n,)) vdbflow keeps: those with a value index (index
    grids), the active ones (Mask and Boolean grids), those whose value differs from the background."""
    if layout.is_index:
        return values[:, 0] != 0
    if layout.is_topology:
        return active
    with np.errstate(invalid="ignore"):
        return np.any(values != background, axis=1)
