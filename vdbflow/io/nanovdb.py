"""Reading NanoVDB (.nvdb) files and raw grid buffers into vdbflow volumes.

Uncompressed files are memory-mapped: only the nodes a grid needs are read.  Node tables are
decoded level by level with NumPy (root tiles -> upper nodes -> lower nodes -> leaves), and every
offset is checked against the node array it must point into, so a corrupt file raises
:class:`NanoVDBError` with the byte offset instead of reading out of bounds or looping.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.transform import Transform
from vdbflow.core.value_types import value_type_for
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError, VolumeError
from vdbflow.io import nanovdb_format as fmt
from vdbflow.io.atomic import atomic_file

MAX_GRID_BYTES = 1 << 40  # refuse absurd sizes before allocating anything
MAX_VALUE_COUNT = 1 << 48  # index grids: values an external array may hold (keeps index sums far from 2**63)
MAX_BLIND_COUNT = 1 << 16  # blind data records a grid may have
MAX_NAME_BYTES = 1 << 20  # a grid name in a file's metadata
_EMPTY_CHECKSUM = 0xFFFFFFFFFFFFFFFF  # "no checksum" (NanoVDB's Checksum::EMPTY64)


# ------------------------------------------------------------------------------------------------
# small readers with bounds checks
def _need(buf: np.ndarray, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(buf):
        raise NanoVDBError(f"{what} at byte {offset} needs {size} bytes, but the buffer ends at byte {len(buf)}")


def _unpack(buf: np.ndarray, offset: int, form: str, what: str) -> tuple:
    _need(buf, offset, struct.calcsize(form), what)
    return struct.unpack_from(form, buf, offset)


@dataclass(frozen=True)
class GridInfo:
    """What a grid is, without decoding its nodes."""

    index: int
    name: str
    grid_type: str
    grid_class: str
    leaf_count: int
    lower_count: int
    upper_count: int
    tile_counts: tuple[int, int, int]  # lower, upper, root
    active_voxel_count: int
    index_bbox: tuple[tuple[int, int, int], tuple[int, int, int]]
    world_bbox: tuple[tuple[float, float, float], tuple[float, float, float]]
    index_to_world: np.ndarray = field(repr=False)
    voxel_size: tuple[float, float, float]
    codec: str
    version: str
    grid_size: int
    checksum: int


@dataclass(frozen=True)
class BlindData:
    """A blind data record of a grid, kept as bytes so it survives a read-write round trip."""

    name: str
    semantic: int
    data_class: int
    data_type: int
    value_size: int
    data: bytes

    @property
    def value_count(self) -> int:
        return len(self.data) // self.value_size if self.value_size else 0


@dataclass
class _GridSource:
    """Where a grid's bytes are: a buffer and the offset of its GridData."""

    buffer: np.ndarray
    offset: int
    codec: str
    file_name: str | None
    chunks: tuple[tuple[int, int, int], ...] = ()  # compressed: (byte offset, size, uncompressed size)


def _grid_header(buf: np.ndarray, base: int) -> dict[str, Any]:
    _need(buf, base, fmt.GRID_SIZE + fmt.TREE_SIZE, "grid header")
    magic, checksum, version, flags, gindex, gcount, gsize = _unpack(buf, base, fmt.GRID_HEAD_FORMAT, "grid header")
    if magic not in fmt.GRID_MAGICS:
        raise NanoVDBError(f"expected a NanoVDB grid magic at byte {base}, found 0x{magic:016x}")
    major, minor, patch = fmt.version_parts(version)
    if major != fmt.MAJOR_VERSION:
        raise NanoVDBError(
            f"expected NanoVDB major version 32 at byte {base + fmt.GRID_OFF_VERSION}, found {major}.{minor}.{patch}"
        )
    if gsize < fmt.GRID_SIZE + fmt.TREE_SIZE or gsize > MAX_GRID_BYTES:
        raise NanoVDBError(f"grid size {gsize} at byte {base + fmt.GRID_OFF_GRID_SIZE} is not a plausible grid size")
    _need(buf, base, gsize, "grid")
    raw_name = bytes(buf[base + fmt.GRID_OFF_NAME : base + fmt.GRID_OFF_NAME + fmt.GRID_NAME_SIZE])
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", "replace")
    mat = np.array(_unpack(buf, base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_MATD, "<9d", "map"))
    vec = np.array(_unpack(buf, base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_VECD, "<3d", "map"))
    world_bbox = _unpack(buf, base + fmt.GRID_OFF_WORLD_BBOX, "<6d", "world bbox")
    voxel_size = _unpack(buf, base + fmt.GRID_OFF_VOXEL_SIZE, "<3d", "voxel size")
    gclass, gtype = _unpack(buf, base + fmt.GRID_OFF_CLASS, "<II", "grid class and type")
    blind_offset, blind_count = _unpack(buf, base + fmt.GRID_OFF_BLIND_OFFSET, "<qI", "blind metadata")
    data1 = _unpack(buf, base + fmt.GRID_OFF_DATA1, "<Q", "grid data1")[0]
    t = base + fmt.GRID_SIZE
    node_offsets = _unpack(buf, t + fmt.TREE_OFF_NODE_OFFSETS, "<4Q", "tree node offsets")
    node_counts = _unpack(buf, t + fmt.TREE_OFF_NODE_COUNTS, "<3I", "tree node counts")
    tile_counts = _unpack(buf, t + fmt.TREE_OFF_TILE_COUNTS, "<3I", "tree tile counts")
    voxel_count = _unpack(buf, t + fmt.TREE_OFF_VOXEL_COUNT, "<Q", "tree voxel count")[0]
    index_to_world = np.eye(4)
    index_to_world[:3, :3] = mat.reshape(3, 3)
    index_to_world[:3, 3] = vec
    return dict(
        magic=magic,
        checksum=checksum,
        version=version,
        flags=flags,
        grid_index=gindex,
        grid_count=gcount,
        grid_size=gsize,
        name=name,
        index_to_world=index_to_world,
        world_bbox=world_bbox,
        voxel_size=voxel_size,
        grid_class=gclass,
        grid_type=gtype,
        blind_offset=blind_offset,
        blind_count=blind_count,
        value_count=data1,
        tree=t,
        node_offsets=node_offsets,
        node_counts=node_counts,
        tile_counts=tile_counts,
        voxel_count=voxel_count,
    )


def _crc(buf: np.ndarray, start: int, stop: int, crc: int = 0) -> int:
    return zlib.crc32(buf[start:stop], crc) & 0xFFFFFFFF


def _blocked_crc(buf: np.ndarray, start: int, stop: int) -> int:
    """NanoVDB's tail rule after 32.6.0: the CRC32 of the CRC32s (u32, little-endian) of the 4 KiB
    blocks of [start, stop), the last block taking the remainder (fewer than 4 KiB: no blocks)."""
    if stop <= start:
        return fmt.EMPTY_CRC32
    n = (stop - start) // fmt.CRC_BLOCK_SIZE
    edges = [start + k * fmt.CRC_BLOCK_SIZE for k in range(n)] + [stop]
    crcs = np.array([_crc(buf, a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)], "<u4")
    return zlib.crc32(crcs.tobytes()) & 0xFFFFFFFF


def _node_crcs(buf: np.ndarray, arrays: list[tuple[int, int, int]]) -> np.ndarray:
    """CRC32 of every node of the (start, count, size) arrays, upper, lower then leaf."""
    return np.array(
        [_crc(buf, start + k * size, start + (k + 1) * size) for start, count, size in arrays for k in range(count)],
        np.uint64,
    )


@dataclass(frozen=True)
class _Checksums:
    """The head spans and tail CRC32s a grid may carry under its version's rules (old rules have variants)."""

    head_spans: tuple[tuple[int, int], ...]
    tails: tuple[tuple[str, Any], ...]  # (what is covered, a callable giving the CRC32 or None)


def _checksum_rules(buf: np.ndarray, base: int, h: dict[str, Any], layout: fmt.GridLayout) -> _Checksums:
    end = base + h["grid_size"]
    head_start, head_end = base + fmt.CHECKSUM_HEAD_START, base + fmt.GRID_SIZE + fmt.TREE_SIZE
    if h["version"] > fmt.CHECKSUM_OLD_RULES_LAST:
        return _Checksums(
            ((head_start, head_end),),
            ((f"bytes [{head_end}, {end}) in 4 KiB blocks", lambda: _blocked_crc(buf, head_end, end)),),
        )
    t = h["tree"]
    offs, counts = h["node_offsets"], h["node_counts"]
    upper = t + offs[2]
    if counts[2] == 0:  # no nodes: versions differ on where the head stops, and there is no tail
        spans = {(head_start, end)}
        if h["blind_count"]:
            spans.add((head_start, min(end, base + max(h["blind_offset"], fmt.CHECKSUM_HEAD_START))))
        root = t + offs[3]
        if root + fmt.ROOT_OFF_TABLE_SIZE + 4 <= end:  # the table size (u32) lies inside the grid
            table = int(struct.unpack_from("<I", buf, root + fmt.ROOT_OFF_TABLE_SIZE)[0])
            spans.add((head_start, min(end, root + layout.root_size + table * layout.root_tile_size)))
        return _Checksums(tuple(sorted(spans)), ())
    inner = [(t + offs[2], counts[2], layout.upper_size), (t + offs[1], counts[1], layout.lower_size)]
    nodes = f"the {counts[2]} upper, {counts[1]} lower and {counts[0]} leaf nodes, one CRC32 each,"
    cache: dict[bool, np.ndarray] = {}

    def leaves(whole: bool) -> list[tuple[int, int, int]]:
        if layout.leaf_kind != "fpn":
            return [(t + offs[0], counts[0], layout.leaf_size)]
        addrs = _fpn_leaf_addresses(buf, t + offs[0], counts[0], end, t + fmt.TREE_OFF_LEAF_COUNT)  # sizes differ
        return [(int(a), 1, _fpn_leaf_size(buf, a) if whole else fmt.FPN_LEAF_FIXED_SIZE) for a in addrs]

    def per_node(width: int, whole: bool = True) -> Any:
        def crc() -> int | None:
            if whole not in cache:
                try:
                    arrays = inner + leaves(whole)
                except NanoVDBError:
                    return None
                if any(start < base or start + count * size > end for start, count, size in arrays):
                    return None
                cache[whole] = _node_crcs(buf, arrays)
            return zlib.crc32(cache[whole].astype(f"<u{width}").tobytes()) & 0xFFFFFFFF

        return crc

    # the per-node CRCs were kept as u32 (current NanoVDB, CUDA) or as 8-byte uint_fast32_t (older
    # host builds on Linux, which also took only the fixed 96 bytes of an FpN leaf); a 32.6
    # development rule CRC'd the 4 KiB blocks from the first upper node
    tails = [(nodes, per_node(4)), (nodes + " (8-byte entries)", per_node(8))]
    if layout.leaf_kind == "fpn":
        tails += [(nodes + " (FpN leaves' first 96 bytes)", per_node(w, False)) for w in (4, 8)]
    tails.append((f"bytes [{upper}, {end}) in 4 KiB blocks", lambda: _blocked_crc(buf, upper, end)))
    return _Checksums(((head_start, min(max(upper, head_start), end)),), tuple(tails))


def _head_as_if(buf: np.ndarray, base: int, start: int, stop: int, index_count: tuple[int, int]) -> int:
    """The head CRC32 over [start, stop) with the grid index and count (bytes 24-32) replaced."""
    index_at, count_end = base + fmt.GRID_OFF_INDEX, base + fmt.GRID_OFF_GRID_SIZE  # the grid size follows them
    if stop < count_end:
        return _crc(buf, start, stop)
    crc = zlib.crc32(struct.pack("<II", *index_count), _crc(buf, start, index_at))
    return _crc(buf, count_end, stop, crc)


def _verify_checksum(
    buf: np.ndarray, base: int, h: dict[str, Any], layout: fmt.GridLayout, tail: bool, position: tuple[int, int]
) -> None:
    """Checks a grid's checksum by the rules of its version: the head (low half) unless 0xFFFFFFFF,
    and with ``tail`` the tail (high half) unless 0xFFFFFFFF.  NanoVDB rewrites a grid's index and
    count (bytes 24-32) when it moves a grid between buffers, so a head is also accepted for the grid
    standing alone (0 of 1) or at ``position`` (index, count) in its payload."""
    checksum = h["checksum"]
    if checksum == _EMPTY_CHECKSUM:
        return
    version = ".".join(map(str, fmt.version_parts(h["version"])))
    rules = _checksum_rules(buf, base, h, layout)
    want_head, want_tail = checksum & 0xFFFFFFFF, checksum >> 32
    if want_head != fmt.EMPTY_CRC32:
        alternatives = {(0, 1), position} - {(h["grid_index"], h["grid_count"])}
        for start, stop in rules.head_spans:
            if _crc(buf, start, stop) == want_head or any(
                _head_as_if(buf, base, start, stop, alt) == want_head for alt in alternatives
            ):
                break
        else:
            start, stop = rules.head_spans[0]
            raise NanoVDBError(
                f"checksum mismatch in grid {h['name']!r} (NanoVDB {version}): bytes [{start}, {stop}) have CRC32 "
                f"0x{_crc(buf, start, stop):08x}, the head half of the checksum at byte "
                f"{base + fmt.GRID_OFF_CHECKSUM} records 0x{want_head:08x} (open with checksum=False to read a grid "
                f"whose writer left a stale checksum)"
            )
    if tail and want_tail != fmt.EMPTY_CRC32 and rules.tails:
        found = []
        for what, crc in rules.tails:
            got = crc()
            if got == want_tail:
                return
            found.append((what, got))
        what, got = found[0]
        raise NanoVDBError(
            f"checksum mismatch in grid {h['name']!r} (NanoVDB {version}): {what} have CRC32 "
            f"{'(out of bounds)' if got is None else f'0x{got:08x}'}, the tail half of the checksum at byte "
            f"{base + fmt.GRID_OFF_CHECKSUM + 4} records 0x{want_tail:08x} "
            f"(open with checksum=False to read it anyway)"
        )


def _layout_of(header: dict[str, Any], base: int) -> fmt.GridLayout:
    gtype = header["grid_type"]
    layout = fmt.LAYOUTS.get(gtype)
    if layout is None:
        name = fmt.GRID_TYPE_NAMES.get(gtype, f"unknown type {gtype}")
        raise NanoVDBError(
            f"grid {header['name']!r} at byte {base} has value type {name} (byte {base + fmt.GRID_OFF_TYPE}), "
            f"which vdbflow does not read "
            f"(supported: Float, Double, Int32, Int64, UInt32, Vec3f, Vec3d, Vec4f, Vec4d, Half, Fp4, Fp8, Fp16, "
            f"FpN, Index, OnIndex, Mask, Boolean)"
        )
    return layout


def _node_rows(buf: np.ndarray, start: int, count: int, size: int, what: str) -> np.ndarray:
    """(count, size) uint8 view of a contiguous node array."""
    _need(buf, start, count * size, f"{what} array")
    return buf[start : start + count * size].reshape(count, size)


def _node_index(
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


def _fpn_leaf_size(buf: np.ndarray, addr: int) -> int:
    """Bytes of the FpN leaf at ``addr``: the fixed part, then 64 bytes of codes per bit of its width."""
    return fmt.FPN_LEAF_FIXED_SIZE + fmt.FPN_CODE_BYTES_PER_BIT * (1 << _fpn_log2_bits(buf, addr))


def _fpn_leaf_addresses(buf: np.ndarray, start: int, count: int, end: int, count_at: int) -> np.ndarray:
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
        pos += _fpn_leaf_size(buf, pos)
    if pos > end:
        raise NanoVDBError(
            f"the codes of FpN leaf {count - 1} at byte {addrs[-1]} run to byte {pos}, past the grid's end (byte {end})"
        )
    return addrs


def _node_index_among(
    parents: np.ndarray,
    offsets: np.ndarray,
    fields: np.ndarray,
    addrs: np.ndarray,
    what: str,
    parent: str,
    count_at: int,
) -> np.ndarray:
    """Like :func:`_node_index` for nodes of different sizes at the known byte addresses ``addrs``."""
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


def _leaf_floats(buf: np.ndarray, addrs: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
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


def _values(raw: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
    """(n, value_size) uint8 -> (n, C) values."""
    return np.ascontiguousarray(raw).view(layout.dtype).reshape(len(raw), layout.components)


def _child_positions(bits: np.ndarray, log2: int) -> np.ndarray:
    """Child index n -> (i, j, k) offsets in child units, for an internal node with 2**log2 per axis."""
    n = np.asarray(bits, dtype=np.int64)
    m = (1 << log2) - 1
    return np.stack([(n >> (2 * log2)) & m, (n >> log2) & m, n & m], axis=1)


def _key_to_origin(keys: np.ndarray) -> np.ndarray:
    """Root keys (k | j << 21 | i << 42 of coordinates >> 12 as unsigned) -> (n, 3) int32 origins."""
    keys = keys.astype(np.uint64)
    bits = fmt.ROOT_KEY_BITS
    mask = np.uint64((1 << bits) - 1)
    parts = [(keys >> np.uint64(s)) & mask for s in (2 * bits, bits, 0)]
    return (np.stack(parts, axis=1).astype(np.uint32) << np.uint32(fmt.UPPER_LOG2)).view(np.int32)


def _overlaps(origins: np.ndarray, size: int, bbox: np.ndarray | None) -> np.ndarray:
    """Which cubes [origin, origin + size) meet the inclusive index box ``bbox`` (2, 3)."""
    if bbox is None:
        return np.ones(len(origins), bool)
    o = np.asarray(origins, np.int64).reshape(-1, 3)
    return np.all((o <= bbox[1]) & (o + size - 1 >= bbox[0]), axis=1)


def _read_blind_data(buf: np.ndarray, base: int, h: dict[str, Any]) -> tuple[BlindData, ...]:
    count, offset = h["blind_count"], h["blind_offset"]
    if count == 0:
        return ()
    end = base + h["grid_size"]
    if count > MAX_BLIND_COUNT:
        raise NanoVDBError(f"blind data count {count} at byte {base + fmt.GRID_OFF_BLIND_COUNT} is absurd")
    records = []
    for b in range(count):
        at = base + offset + b * fmt.BLIND_META_SIZE
        if at < base or at + fmt.BLIND_META_SIZE > end:
            raise NanoVDBError(
                f"blind metadata {b} at offset {offset} + {b} x {fmt.BLIND_META_SIZE} (offset read at "
                f"byte {base + fmt.GRID_OFF_BLIND_OFFSET}) lies outside the grid, bytes [{base}, {end})"
            )
        data_offset, value_count, value_size, semantic, data_class, data_type = _unpack(
            buf, at, fmt.BLIND_META_FORMAT, "blind metadata"
        )
        start, nbytes = at + data_offset, value_count * value_size
        if value_size == 0 or nbytes > MAX_GRID_BYTES or start < base or start + nbytes > end:
            raise NanoVDBError(
                f"blind data {b} (metadata at byte {at}) of {value_count} x {value_size} bytes "
                f"at offset {data_offset} from there lies outside the grid, bytes [{base}, {end})"
            )
        name_at = at + fmt.BLIND_META_OFF_NAME
        raw_name = bytes(buf[name_at : name_at + fmt.BLIND_NAME_SIZE]).split(b"\0", 1)[0].decode("utf-8", "replace")
        records.append(
            BlindData(raw_name, semantic, data_class, data_type, value_size, bytes(buf[start : start + nbytes]))
        )
    return tuple(records)


# vdbflow's own blind data: units and component names as UTF-8 JSON, plain bytes to other tools
# (semantic, class and type Unknown, value size 1: NanoVDB's encoding of a char array)
METADATA_NAME = "vdbflow.metadata"


def _metadata_record(obj: Volume | Topology) -> BlindData | None:
    """The ``vdbflow.metadata`` record of ``obj``: its units, length units and (when not the default
    x, y, z, w) component names; None when there is nothing to store."""
    import json

    meta: dict[str, Any] = {}
    for key in ("units", "length_units"):
        if getattr(obj, key, None):
            meta[key] = str(getattr(obj, key))
    names = getattr(obj, "component_names", None)
    if names is not None and tuple(names) != (
        ("x", "y", "z", "w")[: len(names)] if len(names) <= 4 else tuple(f"c{c}" for c in range(len(names)))
    ):
        meta["component_names"] = [str(n) for n in names]
    if not meta:
        return None
    data = json.dumps({"format": 1, **meta}, ensure_ascii=False).encode("utf-8")
    return BlindData(METADATA_NAME, 0, 0, 0, 1, data)


def _apply_metadata(obj: Volume | Topology, records: tuple[BlindData, ...], base: int) -> tuple[BlindData, ...]:
    """Set ``obj``'s units and component names from its ``vdbflow.metadata`` record; the other records.
    A record that does not parse is left out with a warning (the grid itself is fine)."""
    import warnings

    from vdbflow.io import bounded_json

    rest = tuple(r for r in records if r.name != METADATA_NAME)
    for r in records:
        if r.name != METADATA_NAME:
            continue
        try:
            meta = bounded_json.loads(bytes(r.data))
            if not isinstance(meta, dict):
                raise ValueError(f"a JSON {type(meta).__name__}, not an object")
            names = meta.get("component_names")
            if names is not None:
                components = getattr(obj, "components", None)
                if (
                    components is None
                    or not isinstance(names, list)
                    or len(names) != components
                    or len(set(map(str, names))) != len(names)
                ):
                    raise ValueError(f"component names {names!r} for {components} component(s)")
                obj.component_names = tuple(str(n) for n in names)
            for key in ("units", "length_units"):
                if meta.get(key) is not None:
                    setattr(obj, key, str(meta[key]))
        except (UnicodeDecodeError, ValueError) as err:
            warnings.warn(
                f"expected {METADATA_NAME} blind data of the grid at byte {base} to hold a UTF-8 JSON "
                f"object of units and component names, got {err}; ignored",
                UserWarning,
                stacklevel=4,
            )
    return rest


def _decode_grid(
    buf: np.ndarray,
    base: int,
    bbox: np.ndarray | None = None,
    leaf_subset: np.ndarray | None = None,
    checksum: bool = True,
    position: tuple[int, int] = (0, 1),
) -> tuple[dict[str, Any], Any]:
    """Decode the grid at ``base`` after checking its checksum (``checksum``; the tail only when the
    whole grid is read, since it covers every node)."""
    if checksum:
        h = _grid_header(buf, base)
        _verify_checksum(buf, base, h, _layout_of(h, base), bbox is None and leaf_subset is None, position)
    try:
        h, obj = _decode_nodes(buf, base, bbox, leaf_subset)
    except VolumeError as err:  # nodes that decode but do not form a valid tree
        raise NanoVDBError(f"the grid at byte {base} does not form a valid volume: {err}") from None
    obj.grid_class = fmt.GRID_CLASSES.get(h["grid_class"], "unknown")
    obj.blind_data = _apply_metadata(obj, _read_blind_data(buf, base, h), base)
    return h, obj


def _column(rows: np.ndarray, offset: int, dtype: str) -> np.ndarray:
    """One little-endian field (at ``offset`` in every row of the (n, size) uint8 ``rows``) as (n,)."""
    width = np.dtype(dtype).itemsize
    return np.ascontiguousarray(rows[:, offset : offset + width]).view(dtype)[:, 0]


def _mask_bits(rows: np.ndarray, offset: int, size: int) -> np.ndarray:
    """The bits of the ``size``-byte mask at ``offset`` of a node (size,) or of rows of nodes (n, size)."""
    return np.unpackbits(rows[..., offset : offset + size], axis=-1, bitorder="little")


def _kept_tiles(values: np.ndarray, active: np.ndarray, layout: fmt.GridLayout, background: np.ndarray) -> np.ndarray:
    """Which tiles (values (n, C), active states (n,)) vdbflow keeps: those with a value index (index
    grids), the active ones (Mask and Boolean grids), those whose value differs from the background."""
    if layout.is_index:
        return values[:, 0] != 0
    if layout.is_topology:
        return active
    with np.errstate(invalid="ignore"):
        return np.any(values != background, axis=1)


@dataclass
class _TileParts:
    """Tiles gathered level by level (root, upper nodes, lower nodes): for each, its origin, size,
    value and the byte address of that value (for messages about it)."""

    origins: list[np.ndarray] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    at: list[np.ndarray] = field(default_factory=list)

    def add(self, origins: np.ndarray, size: int, values: np.ndarray, at: np.ndarray) -> None:
        self.origins.append(origins)
        self.sizes.append(np.full(len(values), size))
        self.values.append(values)
        self.at.append(at)

    def within(self, bbox: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Origins (int32), sizes (int32), values and value addresses of the tiles that meet ``bbox``."""
        origins = np.concatenate(self.origins).astype(np.int32)
        sizes = np.concatenate(self.sizes).astype(np.int32)
        values, at = np.concatenate(self.values), np.concatenate(self.at)
        near = np.ones(len(origins), bool)
        for size in tree.TILE_SIZES:
            of_size = sizes == size
            near[of_size] = _overlaps(origins[of_size], size, bbox)
        return origins[near], sizes[near], values[near], at[near]


@dataclass(frozen=True)
class _Root:
    """A grid's root node: its address, background value and table of entries (a tile or an upper node
    each), with the origin, child offset, value, active state and byte address of every entry."""

    address: int
    background: np.ndarray
    origins: np.ndarray
    child: np.ndarray
    values: np.ndarray
    active: np.ndarray
    entry_at: np.ndarray


@dataclass(frozen=True)
class _ChildRefs:
    """The children one level of internal nodes points to: each child's parent address, the offset read
    from the parent's table, the byte that offset was read at, and the child's origin."""

    parents: np.ndarray
    offsets: np.ndarray
    fields: np.ndarray
    origins: np.ndarray


@dataclass(frozen=True)
class _Leaves:
    """The leaves read, in tree order: their origins, their indices in the grid's leaf array, the byte
    address of every leaf of that array and, when all leaves have one size (not FpN), its (n, size) rows."""

    buf: np.ndarray
    origins: np.ndarray
    index: np.ndarray
    addrs: np.ndarray
    nodes: np.ndarray | None

    def columns(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) of every leaf read, copied once into a contiguous array."""
        if self.nodes is None:
            return self.buf[self.addrs[self.index][:, None] + np.arange(start, stop)]
        cols = self.nodes[:, start:stop]
        n_leaf = len(self.nodes)
        in_place = len(self.index) == n_leaf and np.array_equal(self.index, np.arange(n_leaf))
        return np.ascontiguousarray(cols) if in_place else np.take(cols, self.index, axis=0)


def _grid_end(h: dict[str, Any], base: int) -> int:
    """The byte after the grid at ``base``, once every node array's offset is checked to lie before it."""
    end = base + h["grid_size"]
    t = h["tree"]
    for what, off in zip(("leaf", "lower", "upper", "root"), h["node_offsets"], strict=True):
        if t + off > end:
            raise NanoVDBError(f"the {what} node offset at byte {t} points past the grid's end (byte {end})")
    return end


def _read_root(gbuf: np.ndarray, h: dict[str, Any], layout: fmt.GridLayout) -> _Root:
    """The root node: its background and its table of tiles and upper-node children."""
    root = h["tree"] + h["node_offsets"][3]
    table_size = _unpack(gbuf, root + fmt.ROOT_OFF_TABLE_SIZE, "<I", "root table size")[0]
    entries = _node_rows(gbuf, root + layout.root_size, table_size, layout.root_tile_size, "root tile")
    bg_at = root + layout.root_off_background
    bg_raw = gbuf[bg_at : bg_at + layout.value_size]
    if len(bg_raw) != layout.value_size:
        raise NanoVDBError(f"the root background at byte {bg_at} lies past the grid's end (byte {len(gbuf)})")
    values = entries[:, layout.root_tile_off_value : layout.root_tile_off_value + layout.value_size]
    return _Root(
        address=root,
        background=_values(bg_raw[None], layout)[0],
        origins=_key_to_origin(_column(entries, fmt.ROOT_TILE_OFF_KEY, "<u8")),
        child=_column(entries, fmt.ROOT_TILE_OFF_CHILD, "<i8"),
        values=_values(values, layout),
        active=_column(entries, fmt.ROOT_TILE_OFF_STATE, "<u4") != 0,
        entry_at=root + layout.root_size + np.arange(table_size, dtype=np.int64) * layout.root_tile_size,
    )


def _root_tiles(root: _Root, layout: fmt.GridLayout, tiles: _TileParts) -> None:
    """Adds the root's tiles (the entries without a child) that are kept to ``tiles``."""
    keep = (root.child == 0) & _kept_tiles(root.values, root.active, layout, root.background)
    tiles.add(root.origins[keep], fmt.UPPER_DIM, root.values[keep], root.entry_at[keep] + layout.root_tile_off_value)


def _joined(parts: list[np.ndarray], shape: tuple[int, ...] = (0,)) -> np.ndarray:
    """The parts concatenated; an empty int64 array of ``shape`` when there are none."""
    return np.concatenate(parts) if parts else np.zeros(shape, np.int64)


def _read_upper_nodes(
    gbuf: np.ndarray, h: dict[str, Any], layout: fmt.GridLayout, root: _Root, bbox: np.ndarray | None, tiles: _TileParts
) -> _ChildRefs:
    """The upper nodes the root points to that meet ``bbox``, one by one: their kept tiles go to
    ``tiles``; returns the lower nodes they point to."""
    t, start, count = h["tree"], h["tree"] + h["node_offsets"][2], h["node_counts"][2]
    uppers = _node_rows(gbuf, start, count, layout.upper_size, "upper node")
    linked = root.child != 0
    index = _node_index(
        np.full(int(linked.sum()), root.address),
        root.child[linked],
        root.entry_at[linked] + fmt.ROOT_TILE_OFF_CHILD,
        start,
        count,
        layout.upper_size,
        "upper",
        "root tile",
        t + fmt.TREE_OFF_UPPER_COUNT,
    )
    origins = root.origins[linked]
    near = _overlaps(origins, fmt.UPPER_DIM, bbox)
    parents, offsets, fields, child_origins = [], [], [], []
    stride, table_at = layout.table_stride, layout.upper_off_table
    for ui, origin in zip(index[near], origins[near], strict=True):
        node = uppers[ui]
        addr = start + int(ui) * layout.upper_size
        table = node[table_at : table_at + fmt.UPPER_CHILDREN * stride].reshape(fmt.UPPER_CHILDREN, stride)
        child_mask = _mask_bits(node, fmt.UPPER_OFF_CHILD_MASK, fmt.UPPER_MASK_SIZE)
        kids = np.nonzero(child_mask)[0]
        parents.append(np.full(len(kids), addr, np.int64))
        offsets.append(_column(table[kids], 0, "<i8"))
        fields.append(addr + table_at + kids.astype(np.int64) * stride)
        child_origins.append(origin + (_child_positions(kids, fmt.UPPER_DIM_LOG2) << fmt.LOWER_LOG2))
        non = np.nonzero(child_mask == 0)[0]
        vals = _values(table[non, : layout.value_size], layout)
        value_mask = _mask_bits(node, fmt.UPPER_OFF_VALUE_MASK, fmt.UPPER_MASK_SIZE)
        keep = _kept_tiles(vals, value_mask[non].astype(bool), layout, root.background)
        tiles.add(
            origin + (_child_positions(non[keep], fmt.UPPER_DIM_LOG2) << fmt.LOWER_LOG2),
            fmt.LOWER_DIM,
            vals[keep],
            addr + table_at + non[keep].astype(np.int64) * stride,
        )
    return _ChildRefs(_joined(parents), _joined(offsets), _joined(fields), _joined(child_origins, (0, 3)))


def _read_lower_nodes(
    gbuf: np.ndarray,
    h: dict[str, Any],
    layout: fmt.GridLayout,
    refs: _ChildRefs,
    background: np.ndarray,
    bbox: np.ndarray | None,
    tiles: _TileParts,
) -> _ChildRefs:
    """The lower nodes ``refs`` point to that meet ``bbox``, all at once: their kept tiles go to
    ``tiles``; returns the leaves they point to."""
    t, start, count = h["tree"], h["tree"] + h["node_offsets"][1], h["node_counts"][1]
    lowers = _node_rows(gbuf, start, count, layout.lower_size, "lower node")
    index = _node_index(
        refs.parents,
        refs.offsets,
        refs.fields,
        start,
        count,
        layout.lower_size,
        "lower",
        "upper node",
        t + fmt.TREE_OFF_LOWER_COUNT,
    )
    addrs = start + index * layout.lower_size
    near = _overlaps(refs.origins, fmt.LOWER_DIM, bbox)
    index, addrs, origins = index[near], addrs[near], refs.origins[near]
    rows = lowers[index]
    stride, table_at = layout.table_stride, layout.lower_off_table
    table = rows[:, table_at : table_at + fmt.LOWER_CHILDREN * stride].reshape(len(rows), fmt.LOWER_CHILDREN, stride)
    child_mask = _mask_bits(rows, fmt.LOWER_OFF_CHILD_MASK, fmt.LOWER_MASK_SIZE)
    node, kid = np.nonzero(child_mask)
    leaves = _ChildRefs(
        addrs[node],
        _column(table[node, kid], 0, "<i8"),
        addrs[node] + table_at + kid.astype(np.int64) * stride,
        origins[node] + (_child_positions(kid, fmt.LOWER_DIM_LOG2) << fmt.LEAF_LOG2),
    )
    node, non = np.nonzero(child_mask == 0)
    vals = _values(table[node, non, : layout.value_size], layout)
    value_mask = _mask_bits(rows, fmt.LOWER_OFF_VALUE_MASK, fmt.LOWER_MASK_SIZE)
    keep = _kept_tiles(vals, value_mask[node, non].astype(bool), layout, background)
    tiles.add(
        origins[node[keep]] + (_child_positions(non[keep], fmt.LOWER_DIM_LOG2) << fmt.LEAF_LOG2),
        fmt.LEAF_DIM,
        vals[keep],
        addrs[node[keep]] + table_at + non[keep].astype(np.int64) * stride,
    )
    return leaves


def _read_leaves(
    gbuf: np.ndarray,
    h: dict[str, Any],
    layout: fmt.GridLayout,
    refs: _ChildRefs,
    end: int,
    bbox: np.ndarray | None,
    leaf_subset: np.ndarray | None,
) -> _Leaves:
    """The leaves ``refs`` point to, in tree order, less those outside ``bbox`` or not in ``leaf_subset``
    (FpN leaves differ in size: they are found by walking the packed array)."""
    t, start, count = h["tree"], h["tree"] + h["node_offsets"][0], h["node_counts"][0]
    count_at = t + fmt.TREE_OFF_LEAF_COUNT
    if layout.leaf_kind == "fpn":
        addrs = _fpn_leaf_addresses(gbuf, start, count, end, count_at)
        index = _node_index_among(refs.parents, refs.offsets, refs.fields, addrs, "leaf", "lower node", count_at)
        nodes = None
    else:
        nodes = _node_rows(gbuf, start, count, layout.leaf_size, "leaf")
        index = _node_index(
            refs.parents, refs.offsets, refs.fields, start, count, layout.leaf_size, "leaf", "lower node", count_at
        )
        addrs = start + np.arange(count, dtype=np.int64) * layout.leaf_size
    order = tree.tree_order(refs.origins >> fmt.LEAF_LOG2)
    index, origins = index[order], refs.origins[order]
    keep = _overlaps(origins, fmt.LEAF_DIM, bbox)
    if leaf_subset is not None:
        chosen = np.zeros(len(keep), bool)
        wanted = np.asarray(leaf_subset, dtype=np.int64)
        if np.any((wanted < 0) | (wanted >= len(keep))):
            raise NanoVDBError(f"expected leaf indices in [0, {len(keep)}), got {wanted.min()}..{wanted.max()}")
        chosen[wanted] = True
        keep &= chosen
    return _Leaves(gbuf, origins[keep], index[keep], addrs, nodes)


def _grid_transform(h: dict[str, Any], base: int) -> Transform:
    """The grid's index-to-world map as a Transform (a map that is not one is a NanoVDBError)."""
    try:
        return Transform(h["index_to_world"])
    except VolumeError as err:
        raise NanoVDBError(
            f"the index-to-world map at byte {base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_MATD} of grid "
            f"{h['name']!r} is not usable: {err}"
        ) from None


def _index_topology(
    h: dict[str, Any],
    base: int,
    layout: fmt.GridLayout,
    leaves: _Leaves,
    head: np.ndarray,
    masks: np.ndarray,
    tiles: tuple[np.ndarray, ...],
    transform: Transform,
) -> Topology:
    """An Index / OnIndex grid as an index-layout Topology, once every leaf's value range and every
    tile's value index is checked against the grid's value count."""
    tile_origins, tile_sizes, tile_vals, tile_at = tiles
    first = _column(head, fmt.INDEX_LEAF_OFF_OFFSET, "<u8").astype(np.uint64)  # compared unsigned: no wrap-around
    value_count = int(h["value_count"])
    if value_count > MAX_VALUE_COUNT:
        raise NanoVDBError(
            f"value count {value_count} at byte {base + fmt.GRID_OFF_DATA1} of grid "
            f"{h['name']!r} is not plausible (at most {MAX_VALUE_COUNT})"
        )
    if layout.grid_type == fmt.GRID_TYPE_INDEX:
        # ValueIndex: all 512 voxels of a leaf are indexed, active or not
        masks = np.full_like(masks, np.iinfo(np.uint64).max)
    counts = np.bitwise_count(masks).sum(axis=1).astype(np.uint64)
    vc = np.uint64(value_count)
    # a leaf's values [first, first + count) lie in [1, value_count): index 0 is the background
    bad = (first > vc) | (counts > vc - np.minimum(first, vc)) | ((counts > 0) & (first < 1))
    if np.any(bad):
        k = int(np.argmax(bad))
        leaf_at = h["tree"] + h["node_offsets"][0] + int(leaves.index[k]) * layout.leaf_size
        at = leaf_at + fmt.INDEX_LEAF_OFF_OFFSET
        raise NanoVDBError(
            f"the leaf at byte {leaf_at} of grid {h['name']!r} says its {int(counts[k])} "
            f"values start at index {int(first[k])} (byte {at}); expected them within [1, {value_count}), the "
            f"value count at byte {base + fmt.GRID_OFF_DATA1}"
        )
    if len(tile_vals):
        bad = tile_vals[:, 0] >= np.uint64(max(value_count, 1))
        if np.any(bad):
            k = int(np.argmax(bad))
            raise NanoVDBError(
                f"a tile at byte {int(tile_at[k])} of grid {h['name']!r} holds value index "
                f"{int(tile_vals[k, 0])}; expected one below the value count {value_count} "
                f"(byte {base + fmt.GRID_OFF_DATA1})"
            )
    first = np.where(first > 0, first - np.uint64(1), np.uint64(0)).astype(np.int64)
    return Topology(
        leaves.origins.astype(np.int32),
        masks,
        transform,
        tile_origins,
        tile_sizes,
        leaf_offset=first,
        value_count=max(value_count - 1, 0),
        tile_value_index=tile_vals[:, 0].astype(np.int64) - 1,
    )


def _value_volume(
    gbuf: np.ndarray,
    h: dict[str, Any],
    layout: fmt.GridLayout,
    leaves: _Leaves,
    background: np.ndarray,
    topo: Topology,
    tile_vals: np.ndarray,
) -> Volume:
    """A value grid as a Volume: quantised values decoded to float32 copies, plain values left where
    they are (a flat view of the leaf array and each leaf's element offset into it)."""
    if layout.is_quantised:
        vt = value_type_for(np.dtype(np.float32), 1)
        return Volume(
            topo,
            _leaf_floats(gbuf, leaves.addrs[leaves.index], layout),
            np.asarray(background, np.float32).reshape(1),
            np.ascontiguousarray(tile_vals.reshape(-1, 1), np.float32),
            vt,
            False,
            h["name"] or "value",
        )
    item = layout.dtype.itemsize
    start, count = h["tree"] + h["node_offsets"][0], h["node_counts"][0]
    flat = gbuf[start : start + count * layout.leaf_size].view(layout.dtype)
    values_at = (leaves.index * layout.leaf_size + layout.leaf_off_table) // item
    vt = value_type_for(layout.dtype, layout.components)
    return Volume(
        topo,
        flat,
        np.ascontiguousarray(background, vt.dtype),
        np.ascontiguousarray(tile_vals.reshape(-1, layout.components), vt.dtype),
        vt,
        False,
        h["name"] or "value",
        leaf_values_at=values_at,
    )


def _decode_nodes(
    buf: np.ndarray, base: int, bbox: np.ndarray | None, leaf_subset: np.ndarray | None
) -> tuple[dict[str, Any], Any]:
    """Decode one grid into a Volume (value grids) or a Topology (index grids).  ``bbox`` (inclusive
    index box) or ``leaf_subset`` (indices in tree order) restrict the leaves and tiles read: nodes outside
    are never touched, which for a memory-mapped file means never read from disk.

    Level by level: the root's table, the upper nodes it points to, the lower nodes those point to (their
    tiles gathered on the way), then the leaves, whose masks and values make the result."""
    h = _grid_header(buf, base)
    layout = _layout_of(h, base)
    end = _grid_end(h, base)
    gbuf = buf[:end]
    tiles = _TileParts()
    root = _read_root(gbuf, h, layout)
    _root_tiles(root, layout, tiles)
    lower_refs = _read_upper_nodes(gbuf, h, layout, root, bbox, tiles)
    leaf_refs = _read_lower_nodes(gbuf, h, layout, lower_refs, root.background, bbox, tiles)
    leaves = _read_leaves(gbuf, h, layout, leaf_refs, end, bbox, leaf_subset)
    # the leaves' heads: bbox, flags and value mask (and for index grids the value offset and prefix sums)
    head = leaves.columns(0, layout.leaf_size if layout.is_index else fmt.LEAF_OFF_VALUE_MASK + fmt.LEAF_MASK_SIZE)
    mask_bytes = np.ascontiguousarray(head[:, fmt.LEAF_OFF_VALUE_MASK : fmt.LEAF_OFF_VALUE_MASK + fmt.LEAF_MASK_SIZE])
    masks = mask_bytes.view("<u8").astype(np.uint64).reshape(-1, 8)
    tile_parts = tiles.within(bbox)
    tile_origins, tile_sizes, tile_vals, _ = tile_parts
    transform = _grid_transform(h, base)
    if layout.is_index:
        return h, _index_topology(h, base, layout, leaves, head, masks, tile_parts, transform)
    topo = Topology(leaves.origins.astype(np.int32), masks, transform, tile_origins, tile_sizes)
    if layout.is_topology:
        return h, topo
    return h, _value_volume(gbuf, h, layout, leaves, root.background, topo, tile_vals)


# ------------------------------------------------------------------------------------------------
# files: segments of (header, metadata + names, grid payloads)
ZIP_MAX_RATIO = 1032  # deflate never expands more than 1032:1 (zlib's documented bound)
BLOSC_MAX_CHUNK = 1 << 30  # NanoVDB writes blosc grids in chunks of at most 1 GiB, each with its own size
ZIP_SLACK = 4096  # and a few bytes more (the stream's header and last block)
_INFLATE_STEP = 1 << 24  # zip output produced per step


def _inflate(payload: bytes, out: np.ndarray, where: int) -> None:
    """Inflates one zlib stream into ``out`` in bounded steps; a stream that would produce more or
    fewer bytes than ``len(out)`` stops at the first byte too many and raises."""
    expected = len(out)
    inflater = zlib.decompressobj()
    pos, tail = 0, payload
    try:
        while not inflater.eof:
            step = inflater.decompress(tail, min(_INFLATE_STEP, expected - pos + 1))  # never 0: 0 = unbounded
            if pos + len(step) > expected:
                raise NanoVDBError(f"zip payload at byte {where} inflates to more than the declared {expected} bytes")
            out[pos : pos + len(step)] = np.frombuffer(step, np.uint8)
            pos += len(step)
            tail = inflater.unconsumed_tail
            if not step and not tail:
                break  # input used up before the stream's end
    except zlib.error as err:
        raise NanoVDBError(f"zip payload at byte {where} does not inflate after {pos} bytes: {err}") from None
    if not inflater.eof or pos != expected:
        raise NanoVDBError(
            f"zip payload at byte {where} inflates to {pos} bytes"
            f"{'' if inflater.eof else ' and then ends mid-stream'}, expected {expected}"
        )


def _blosc_frame_size(buf: np.ndarray, at: int, size: int, residual: int) -> int:
    """The uncompressed size a blosc frame's 16-byte header declares, checked before anything is
    decompressed: at most the ``residual`` bytes of the grid still to come, and the frame must fill
    exactly its chunk of ``size`` bytes."""
    if size < fmt.BLOSC_HEADER_SIZE:
        raise NanoVDBError(
            f"blosc chunk at byte {at} has {size} bytes, expected at least a {fmt.BLOSC_HEADER_SIZE}-byte header"
        )
    nbytes, _blocksize, cbytes = _unpack(buf, at + fmt.BLOSC_OFF_NBYTES, "<III", "blosc header")
    if not 0 < nbytes <= residual:
        raise NanoVDBError(
            f"blosc chunk at byte {at} declares {nbytes} uncompressed bytes "
            f"(at byte {at + fmt.BLOSC_OFF_NBYTES}), expected between 1 and the {residual} bytes left "
            f"of the grid"
        )
    if cbytes != size:
        raise NanoVDBError(
            f"blosc chunk at byte {at} declares {cbytes} compressed bytes "
            f"(at byte {at + fmt.BLOSC_OFF_CBYTES}), but its chunk holds {size}"
        )
    return nbytes


def _decompress(src: _GridSource, expected: int) -> np.ndarray:
    """A compressed grid's bytes: its zip stream or blosc chunks decompressed into exactly
    ``expected`` bytes, stopping at the first byte a lying payload would write beyond them."""
    if src.codec == "zip":
        ((at, size, _),) = src.chunks
        if expected > ZIP_MAX_RATIO * size + ZIP_SLACK:
            raise NanoVDBError(
                f"zip payload at byte {at} of {size} bytes cannot inflate to the declared "
                f"{expected} bytes (deflate expands at most {ZIP_MAX_RATIO}:1)"
            )
        out = np.empty(expected, np.uint8)  # pages are only touched as they are written
        _inflate(bytes(src.buffer[at : at + size]), out, at)
        return out
    from numcodecs import Blosc  # c-blosc 1 frames, as NanoVDB writes them (numcodecs comes with zarr)

    out = np.empty(expected, np.uint8)  # the frames' headers add up to exactly this (checked in _chunks)
    frame_codec = Blosc()
    pos = 0
    for at, size, want in src.chunks:
        # straight into the frame's slice of the grid: `want` bytes, what its header declares (_chunks)
        try:
            frame_codec.decode(src.buffer[at : at + size], out=out[pos : pos + want])
        except Exception as err:
            raise NanoVDBError(f"blosc chunk at byte {at} does not decompress: {err}") from None
        pos += want
    return out


def _chunks(buf: np.ndarray, pos: int, codec: str, grid_size: int, name: str) -> list[tuple[int, int, int]]:
    """(offset, size, uncompressed size) of the compressed chunks of one grid starting at ``pos``,
    each after its u64 size: one zlib stream, or blosc frames until their headers account for the
    whole grid (NanoVDB writes one per GiB, Warp one per grid)."""
    chunks = []
    residual = grid_size
    while True:
        size = _unpack(buf, pos, "<Q", "compressed chunk size")[0]
        if size > MAX_GRID_BYTES:
            raise NanoVDBError(f"compressed chunk size {size} at byte {pos} is absurd")
        at = pos + fmt.CHUNK_SIZE_BYTES
        _need(buf, at, size, f"compressed grid {name!r}")
        if codec == "zip":
            return [(at, size, grid_size)]
        nbytes = _blosc_frame_size(buf, at, size, residual)
        chunks.append((at, size, nbytes))
        pos = at + size
        residual -= nbytes
        if residual == 0:
            return chunks


def _segments(buf: np.ndarray, file_name: str | None) -> list[tuple[dict[str, Any], _GridSource]]:
    """(file metadata, source) of every grid in a file buffer, segment after segment."""
    out: list[tuple[dict[str, Any], _GridSource]] = []
    pos = 0
    while pos < len(buf):
        magic, version, count, codec_id = _unpack(buf, pos, fmt.FILE_HEADER_FORMAT, "file header")
        if magic not in fmt.FILE_MAGICS:
            raise NanoVDBError(f"expected a NanoVDB file header at byte {pos}, found magic 0x{magic:016x}")
        major, minor, patch = fmt.version_parts(version)
        if major != fmt.MAJOR_VERSION:
            raise NanoVDBError(
                f"unsupported NanoVDB file version {major}.{minor}.{patch} at byte "
                f"{pos + fmt.FILE_OFF_VERSION} (vdbflow reads major version 32)"
            )
        codec = fmt.CODECS.get(codec_id)
        if codec is None:
            raise NanoVDBError(
                f"unknown codec {codec_id} at byte {pos + fmt.FILE_OFF_CODEC} (expected 0 none, 1 zip, 2 blosc)"
            )
        if count == 0:
            raise NanoVDBError(
                f"file segment at byte {pos} holds no grids (grid count at byte {pos + fmt.FILE_OFF_GRID_COUNT})"
            )
        meta_pos = pos + fmt.FILE_HEADER_SIZE
        metas = []
        for _ in range(count):
            gsize, fsize, _key, voxels, gtype, gclass = _unpack(buf, meta_pos, "<QQQQII", "grid metadata")
            name_size = _unpack(buf, meta_pos + fmt.FILE_META_OFF_NAME_SIZE, "<I", "grid metadata")[0]
            if gsize > MAX_GRID_BYTES or fsize > MAX_GRID_BYTES or name_size > MAX_NAME_BYTES:
                raise NanoVDBError(
                    f"grid metadata at byte {meta_pos} gives absurd sizes "
                    f"(grid {gsize}, file {fsize}, name {name_size} bytes)"
                )
            if gsize < fmt.GRID_SIZE + fmt.TREE_SIZE:
                raise NanoVDBError(
                    f"grid metadata at byte {meta_pos} gives a grid size of {gsize} bytes, expected "
                    f"at least {fmt.GRID_SIZE + fmt.TREE_SIZE}"
                )
            _need(buf, meta_pos + fmt.FILE_METADATA_SIZE, name_size, "grid name")
            name = bytes(buf[meta_pos + fmt.FILE_METADATA_SIZE : meta_pos + fmt.FILE_METADATA_SIZE + name_size])
            metas.append(
                dict(
                    grid_size=gsize,
                    file_size=fsize,
                    name=name.split(b"\0", 1)[0].decode("utf-8", "replace"),
                    codec=codec,
                    version=f"{major}.{minor}.{patch}",
                    meta_offset=meta_pos,
                )
            )
            meta_pos += fmt.FILE_METADATA_SIZE + name_size
        pos = meta_pos
        for meta in metas:
            if codec == "none":
                _need(buf, pos, meta["grid_size"], f"grid {meta['name']!r}")
                out.append((meta, _GridSource(buf, pos, codec, file_name)))
                pos += meta["grid_size"]
            else:
                chunks = _chunks(buf, pos, codec, meta["grid_size"], meta["name"])
                out.append((meta, _GridSource(buf, 0, codec, file_name, tuple(chunks))))
                pos = chunks[-1][0] + chunks[-1][1]
    return out


def _map_file(path: str | os.PathLike) -> np.ndarray:
    """The file memory-mapped read-only: pages are read from disk only when a node is touched."""
    size = os.path.getsize(path)
    if size == 0:
        raise NanoVDBError(f"{os.fspath(path)} is empty: expected a NanoVDB file header at byte 0")
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=np.uint8)


def _sources(data: str | os.PathLike | bytes | np.ndarray) -> list[tuple[dict[str, Any], _GridSource]]:
    if isinstance(data, (str, os.PathLike)):
        buf, name = _map_file(data), os.fspath(data)
    else:
        buf, name = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data, None
    if len(buf) < fmt.MAGIC_SIZE:
        raise NanoVDBError(f"expected a NanoVDB file header or grid at byte 0, but the buffer ends at byte {len(buf)}")
    magic = struct.unpack_from("<Q", buf, fmt.GRID_OFF_MAGIC)[0]  # a grid's and a file's magic alike
    if magic == fmt.MAGIC_GRID or (magic == fmt.MAGIC_NUMBER and _looks_like_grid(buf)):
        return _raw_grids(buf, name)
    return _segments(buf, name)


def _looks_like_grid(buf: np.ndarray) -> bool:
    """A buffer starting with the legacy magic is a raw grid when its version field (at byte 16)
    reads as major 32 and bytes 8..12 do not (a file keeps its version at byte 8)."""
    if len(buf) < fmt.GRID_SIZE:
        return False
    file_version = struct.unpack_from("<I", buf, fmt.FILE_OFF_VERSION)[0]
    grid_version = struct.unpack_from("<I", buf, fmt.GRID_OFF_VERSION)[0]
    return (
        fmt.version_parts(grid_version)[0] == fmt.MAJOR_VERSION
        and fmt.version_parts(file_version)[0] != fmt.MAJOR_VERSION
    )


def _raw_grids(buf: np.ndarray, name: str | None) -> list[tuple[dict[str, Any], _GridSource]]:
    """Grid buffers back to back, without a file header (as NanoVDB keeps them in memory)."""
    out = []
    pos = 0
    while pos < len(buf):
        h = _grid_header(buf, pos)
        major, minor, patch = fmt.version_parts(h["version"])
        out.append(
            (
                dict(grid_size=h["grid_size"], name=h["name"], codec="none", version=f"{major}.{minor}.{patch}"),
                _GridSource(buf, pos, "none", name),
            )
        )
        pos += h["grid_size"]
    return out


def _grid_buffer(meta: dict[str, Any], src: _GridSource) -> tuple[np.ndarray, int]:
    if src.codec == "none":  # the grid may not reach past the bytes its metadata gives it
        return src.buffer[: src.offset + meta["grid_size"]], src.offset
    return _decompress(src, meta["grid_size"]), 0


@dataclass
class _Grid:
    """One grid ready to decode: its file metadata, buffer and offset, and position in its payload."""

    meta: dict[str, Any]
    buffer: np.ndarray
    offset: int
    position: tuple[int, int]


def _payload_grids(meta: dict[str, Any], src: _GridSource) -> list[_Grid]:
    """The grids of one payload: one, or (as NanoVDB wrote a multi-grid buffer before 32.6, under the
    first grid's metadata) several back to back that fill the payload exactly."""
    buf, offset = _grid_buffer(meta, src)
    end = offset + meta["grid_size"]
    where = "" if src.codec == "none" else f" of the {src.codec} payload at byte {src.chunks[0][0]}"
    starts = [offset]
    while True:
        h = _grid_header(buf, starts[-1])
        after = starts[-1] + h["grid_size"]
        if after == end:
            break
        if (
            end - after < fmt.GRID_SIZE + fmt.TREE_SIZE
            or struct.unpack_from("<Q", buf, after)[0] not in fmt.GRID_MAGICS
        ):
            raise NanoVDBError(
                f"the grid at byte {starts[-1]}{where} ends at byte {after}, but its file metadata gives "
                f"{meta['grid_size']} bytes (to byte {end}) and no further grid starts there"
            )
        starts.append(after)
    if len(starts) == 1:
        return [_Grid(meta, buf, offset, (0, 1))]
    out = []
    for n, at in enumerate(starts):
        h = _grid_header(buf, at)
        out.append(_Grid(dict(meta, name=h["name"], grid_size=h["grid_size"]), buf, at, (n, len(starts))))
    return out


def _grids(data: str | os.PathLike | bytes | np.ndarray) -> Iterator[_Grid]:
    """Every grid of a file or buffer, in order; compressed payloads are decompressed as reached."""
    for meta, src in _sources(data):
        yield from _payload_grids(meta, src)


def _select(data: str | os.PathLike | bytes | np.ndarray, grid: int | str | None) -> _Grid:
    seen = []
    for n, g in enumerate(_grids(data)):
        if (
            grid is None
            or (isinstance(grid, str) and g.meta["name"] == grid)
            or (isinstance(grid, (int, np.integer)) and not isinstance(grid, bool) and n == grid)
        ):
            return g
        seen.append(g.meta["name"])
    if isinstance(grid, (int, np.integer)):
        raise NanoVDBError(f"expected a grid index in [0, {len(seen)}), got {grid}")
    raise NanoVDBError(f"expected one of the grid names {seen}, got {grid!r}")


def open_grid(
    data: str | os.PathLike | bytes | np.ndarray,
    grid: int | str | None = None,
    *,
    bbox: Any = None,
    leaves: Any = None,
    checksum: bool = True,
) -> Volume | Topology:
    """A grid of a .nvdb file (path) or of an in-memory buffer: a :class:`Volume` for value grids, an
    index-layout :class:`Topology` for Index / OnIndex grids (attach values with ``with_data``).

    ``grid`` is an index or a name (default the first grid).  ``bbox`` ((i0, j0, k0), (i1, j1, k1)),
    inclusive index coordinates, or ``leaves`` (leaf indices in tree order) load only part of the
    grid; the rest of an uncompressed file is not read.  ``checksum`` verifies the grid's NanoVDB
    checksum where it has one (the tail half, over all nodes, only when the whole grid is read).
    """
    box = None
    if bbox is not None:
        box = np.asarray(bbox, dtype=np.int64)
        if box.shape != (2, 3):
            raise NanoVDBError(f"expected bbox as ((i0, j0, k0), (i1, j1, k1)), got shape {box.shape}")
    g = _select(data, grid)
    _, result = _decode_grid(g.buffer, g.offset, box, leaves, checksum, g.position)
    return result


def list_grids(data: str | os.PathLike | bytes | np.ndarray) -> list[GridInfo]:
    """What each grid of a .nvdb file or buffer is, from the headers alone (nodes are not decoded).

    Parameters
    ----------
    data : str, os.PathLike, bytes or numpy.ndarray
        A .nvdb file path (memory-mapped), or bytes or a uint8 array holding a file or grid
        buffers back to back.  Compressed payloads (zip, blosc) are decompressed to read their
        headers.

    Returns
    -------
    list of GridInfo
        One :class:`GridInfo` per grid, in file order: index, name, grid type and class, node and
        tile counts, active voxel count, the index bounding box (inclusive, voxels) and world
        bounding box (length units), the (4, 4) index-to-world matrix, voxel size, codec, version,
        size in bytes and checksum.

    Raises
    ------
    NanoVDBError
        A malformed, truncated, empty or unsupported file or buffer.
    OSError
        A path that cannot be read (e.g. FileNotFoundError).

    See Also
    --------
    vdbflow.open : read a grid.
    save : write grids.
    """
    infos = []
    for n, g in enumerate(_grids(data)):
        buf, meta = g.buffer, g.meta
        h = _grid_header(buf, g.offset)
        bbox = _unpack(buf, h["tree"] + h["node_offsets"][3] + fmt.ROOT_OFF_BBOX, "<6i", "root bbox")
        wb = h["world_bbox"]
        infos.append(
            GridInfo(
                index=n,
                name=h["name"],
                grid_type=fmt.GRID_TYPE_NAMES.get(h["grid_type"], str(h["grid_type"])),
                grid_class=fmt.GRID_CLASSES.get(h["grid_class"], str(h["grid_class"])),
                leaf_count=h["node_counts"][0],
                lower_count=h["node_counts"][1],
                upper_count=h["node_counts"][2],
                tile_counts=tuple(h["tile_counts"]),
                active_voxel_count=h["voxel_count"],
                index_bbox=(tuple(bbox[:3]), tuple(bbox[3:])),
                world_bbox=(tuple(wb[:3]), tuple(wb[3:])),
                index_to_world=h["index_to_world"],
                voxel_size=tuple(h["voxel_size"]),
                codec=meta["codec"],
                version=meta["version"],
                grid_size=h["grid_size"],
                checksum=h["checksum"],
            )
        )
    return infos


# ------------------------------------------------------------------------------------------------
# writing


def _put(buf: np.ndarray, offset: int, form: str, *values: Any) -> None:
    struct.pack_into(form, buf, offset, *values)


def _value_bytes(values: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
    """(n, C) values -> (n, value_size) uint8 in the file's little-endian dtype."""
    arr = np.ascontiguousarray(np.asarray(values).reshape(-1, layout.components), dtype=layout.dtype)
    return arr.view(np.uint8).reshape(len(arr), layout.value_size)


def _leaf_bboxes(origins: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-leaf active bbox min (L, 3) int32 and extent max - min (L, 3) uint8 (origin and 0 when empty)."""
    bits = tree.bits_from_masks(masks).reshape(-1, 8, 8, 8)
    lo = np.zeros((len(masks), 3), np.int64)
    dif = np.zeros((len(masks), 3), np.int64)
    for axis in range(3):
        occupied = bits.any(axis=tuple(a for a in (1, 2, 3) if a != axis + 1))
        has = occupied.any(axis=1)
        first = np.argmax(occupied, axis=1)
        last = 7 - np.argmax(occupied[:, ::-1], axis=1)
        lo[:, axis] = np.where(has, first, 0)
        dif[:, axis] = np.where(has, last - first, 0)
    return (origins + lo).astype(np.int32), dif.astype(np.uint8)


def _child_index(origins: np.ndarray, parent_log2: int, child_log2: int) -> np.ndarray:
    """Linear child index inside the parent node of children at ``origins`` (n, 3)."""
    m = (1 << parent_log2) - 1
    c = (origins >> child_log2) & m
    return (c[:, 0] << (2 * parent_log2)) | (c[:, 1] << parent_log2) | c[:, 2]


def _aligned(n: int) -> int:
    """``n`` rounded up to NanoVDB's data alignment (32 bytes)."""
    return (n + fmt.DATA_ALIGNMENT - 1) // fmt.DATA_ALIGNMENT * fmt.DATA_ALIGNMENT


@dataclass(frozen=True)
class _GridContents:
    """What a grid being written holds: its topology, node layout, background, per-leaf values (None for
    an index grid), tile values, and the value count of its data1 field (index grids; 0 otherwise)."""

    topo: Topology
    layout: fmt.GridLayout
    background: np.ndarray
    leaf_values: np.ndarray | None
    tile_values: np.ndarray
    value_count: int


def _grid_contents(obj: Volume | Topology) -> _GridContents:
    """A Volume as a value grid (index-layout values spread over whole leaves, the background elsewhere),
    a Topology as an OnIndex grid (value indices shifted by one: index 0 is the background)."""
    if isinstance(obj, Topology):
        tile_values = (
            (obj.tile_value_index + 1 if obj.tile_value_index is not None else np.zeros(obj.tile_count, np.int64))
            .astype(np.uint64)
            .reshape(-1, 1)
        )
        return _GridContents(
            obj, fmt.LAYOUTS[fmt.GRID_TYPE_ON_INDEX], np.zeros((1,), np.uint64), None, tile_values, obj.value_count + 1
        )
    vol = obj
    gtype = fmt.GRID_TYPE_OF_VALUE_TYPE.get(vol.value_type.name)
    if gtype is None:
        raise NanoVDBError(
            f"value type {vol.value_type.name} has no NanoVDB grid type "
            f"(NanoVDB value grids hold scalars, vec3 and vec4)"
        )
    background = vol.background_values
    if vol.index_layout:  # spread the active values over whole leaves, background elsewhere
        leaf_values = np.empty((vol.leaf_count * tree.LEAF_VOXELS, vol.components), vol.dtype)
        leaf_values[:] = background
        bits = tree.bits_from_masks(vol.topology.masks).ravel()
        leaf_values[np.nonzero(bits)[0]] = vol.value_rows()[: vol.active_voxel_count]
    else:
        leaf_values = vol.value_rows()
    return _GridContents(vol.topology, fmt.LAYOUTS[gtype], background, leaf_values, vol.tile_values, 0)


@dataclass(frozen=True)
class _NodePlan:
    """The nodes of a grid being written: the leaves (in the topology's tree order), the lower and upper
    nodes that hold them and the tiles, in tree order (by parent, then child index), each child's parent,
    and which tiles sit where (8^3 in lower nodes, 128^3 in upper nodes, 4096^3 in the root)."""

    leaf_origins: np.ndarray  # (L, 3) int64
    tile_origins: np.ndarray  # (T, 3) int64
    lower_tiles: np.ndarray  # (T,) bool, and the same for the next two
    upper_tiles: np.ndarray
    root_tiles: np.ndarray
    upper_keys: np.ndarray  # (U, 3) origin >> 12
    lower_keys: np.ndarray  # (N, 3) origin >> 7
    lower_parent: np.ndarray  # (N,) upper node of each lower node
    leaf_parent: np.ndarray  # (L,) lower node of each leaf

    @property
    def upper_origins(self) -> np.ndarray:
        return self.upper_keys << fmt.UPPER_LOG2

    @property
    def lower_origins(self) -> np.ndarray:
        return self.lower_keys << fmt.LOWER_LOG2

    @property
    def counts(self) -> tuple[int, int, int]:
        """Nodes per level: leaves, lower and upper nodes."""
        return len(self.leaf_origins), len(self.lower_keys), len(self.upper_keys)


def _plan_nodes(topo: Topology) -> _NodePlan:
    """The internal nodes ``topo`` needs: an upper node per 4096^3 block holding leaves or 8^3 / 128^3
    tiles, a lower node per 128^3 block holding leaves or 8^3 tiles."""
    leaf_origins = topo.leaf_origins.astype(np.int64)
    t_origins = topo.tile_origins.astype(np.int64)
    t_sizes = topo.tile_sizes
    t8, t128, t4096 = (t_sizes == fmt.LEAF_DIM), (t_sizes == fmt.LOWER_DIM), (t_sizes == fmt.UPPER_DIM)
    upper_keys_all = np.concatenate([leaf_origins, t_origins[t8 | t128]]) >> fmt.UPPER_LOG2
    upper_keys = np.unique(upper_keys_all, axis=0) if len(upper_keys_all) else np.zeros((0, 3), np.int64)
    lower_keys_all = np.concatenate([leaf_origins, t_origins[t8]]) >> fmt.LOWER_LOG2
    lower_keys = np.unique(lower_keys_all, axis=0) if len(lower_keys_all) else np.zeros((0, 3), np.int64)
    upper_keys = upper_keys[np.lexsort((upper_keys[:, 2], upper_keys[:, 1], upper_keys[:, 0]))]
    lower_parent = _find_rows(upper_keys, lower_keys >> fmt.UPPER_DIM_LOG2)
    lower_child = _child_index(lower_keys << fmt.LOWER_LOG2, fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
    l_order = np.lexsort((lower_child, lower_parent))
    lower_keys, lower_parent = lower_keys[l_order], lower_parent[l_order]
    # leaves are already in tree order (Topology keeps them so)
    leaf_parent = _find_rows(lower_keys, leaf_origins >> fmt.LOWER_LOG2)
    return _NodePlan(leaf_origins, t_origins, t8, t128, t4096, upper_keys, lower_keys, lower_parent, leaf_parent)


@dataclass(frozen=True)
class _GridOffsets:
    """Byte offsets in a grid being written: root, upper, lower and leaf node arrays, the blind metadata,
    each blind record's data, and the grid's size."""

    root: int
    upper: int
    lower: int
    leaf: int
    blind: int
    blind_data: tuple[int, ...]
    size: int


def _plan_offsets(layout: fmt.GridLayout, plan: _NodePlan, blind: tuple[BlindData, ...]) -> _GridOffsets:
    """Grid and tree headers, the root and its table (an entry per upper node and per root tile), the
    node arrays upper to leaf, then the blind metadata and each record's data, 32-byte aligned."""
    n_leaf, n_low, n_up = plan.counts
    n_root = n_up + int(plan.root_tiles.sum())
    off_root = fmt.GRID_SIZE + fmt.TREE_SIZE
    off_upper = off_root + layout.root_size + n_root * layout.root_tile_size
    off_lower = off_upper + n_up * layout.upper_size
    off_leaf = off_lower + n_low * layout.lower_size
    off_blind = off_leaf + n_leaf * layout.leaf_size
    blind_at, pos = [], off_blind + len(blind) * fmt.BLIND_META_SIZE
    for record in blind:
        pos = _aligned(pos)
        blind_at.append(pos)
        pos += len(record.data)
    return _GridOffsets(off_root, off_upper, off_lower, off_leaf, off_blind, tuple(blind_at), _aligned(pos))


def _blind_records(obj: Volume | Topology) -> tuple[BlindData, ...]:
    """The blind data to write: ``obj``'s records, then its ``vdbflow.metadata`` record made afresh."""
    blind = tuple(r for r in getattr(obj, "blind_data", ()) or () if r.name != METADATA_NAME)
    return blind + tuple(r for r in (_metadata_record(obj),) if r is not None)


def _write_blind_data(buf: np.ndarray, off: _GridOffsets, blind: tuple[BlindData, ...]) -> None:
    """A metadata record per blind record (its data offset relative to the record), then the data."""
    for b, record in enumerate(blind):
        at = off.blind + b * fmt.BLIND_META_SIZE
        _put(
            buf,
            at,
            fmt.BLIND_META_FORMAT,
            off.blind_data[b] - at,
            record.value_count,
            record.value_size,
            record.semantic,
            record.data_class,
            record.data_type,
        )
        name_bytes = record.name.encode("utf-8")[: fmt.BLIND_NAME_SIZE - 1]
        buf[at + fmt.BLIND_META_OFF_NAME : at + fmt.BLIND_META_OFF_NAME + len(name_bytes)] = np.frombuffer(
            name_bytes, np.uint8
        )
        buf[off.blind_data[b] : off.blind_data[b] + len(record.data)] = np.frombuffer(record.data, np.uint8)


def _write_leaves(buf: np.ndarray, off: _GridOffsets, plan: _NodePlan, contents: _GridContents) -> None:
    """Each leaf: its active bbox, flags (0) and value mask, then its 512 values, or (index grids) its
    first value index and the prefix sums of its mask words."""
    layout, topo = contents.layout, contents.topo
    n_leaf = plan.counts[0]
    leaves = buf[off.leaf : off.blind].reshape(n_leaf, layout.leaf_size)
    bb_min, bb_dif = _leaf_bboxes(plan.leaf_origins, topo.masks)
    at = fmt.LEAF_OFF_BBOX_MIN
    leaves[:, at : at + 12] = bb_min.astype("<i4").view(np.uint8).reshape(n_leaf, 12)
    leaves[:, fmt.LEAF_OFF_BBOX_DIF : fmt.LEAF_OFF_BBOX_DIF + 3] = bb_dif
    leaves[:, fmt.LEAF_OFF_FLAGS] = 0
    at = fmt.LEAF_OFF_VALUE_MASK
    leaves[:, at : at + fmt.LEAF_MASK_SIZE] = (
        np.ascontiguousarray(topo.masks.astype("<u8")).view(np.uint8).reshape(n_leaf, fmt.LEAF_MASK_SIZE)
    )
    if layout.is_index:
        at = fmt.INDEX_LEAF_OFF_OFFSET
        leaves[:, at : at + 8] = (topo.leaf_offset + 1).astype("<u8").view(np.uint8).reshape(n_leaf, 8)
        prefix = topo.prefix.astype(np.uint64)
        packed = np.zeros(n_leaf, np.uint64)
        for w in range(1, 8):
            packed |= prefix[:, w] << np.uint64(fmt.INDEX_PREFIX_BITS * (w - 1))
        at = fmt.INDEX_LEAF_OFF_PREFIX
        leaves[:, at : at + 8] = packed.astype("<u8").view(np.uint8).reshape(n_leaf, 8)
    else:
        width = tree.LEAF_VOXELS * layout.value_size
        table = _value_bytes(contents.leaf_values, layout).reshape(n_leaf, width)
        leaves[:, layout.leaf_off_table : layout.leaf_off_table + width] = table


def _write_lower_nodes(
    buf: np.ndarray,
    off: _GridOffsets,
    layout: fmt.GridLayout,
    plan: _NodePlan,
    bg_bytes: np.ndarray,
    tile_bytes: np.ndarray,
) -> None:
    """Each lower node: its bbox, a table entry per child (the offset of a leaf, an 8^3 tile's value or
    the background), and the masks of which entries are leaves (child) and tiles (value)."""
    n_leaf, n_low, _ = plan.counts
    lowers = buf[off.lower : off.leaf].reshape(n_low, layout.lower_size)
    stride = layout.table_stride
    ltable = lowers[:, layout.lower_off_table : layout.lower_off_table + fmt.LOWER_CHILDREN * stride]
    ltable = ltable.reshape(n_low, fmt.LOWER_CHILDREN, stride)
    ltable[:, :, : layout.value_size] = bg_bytes
    lower_origin = plan.lower_origins
    lowers[:, fmt.NODE_OFF_BBOX_MIN : fmt.NODE_OFF_BBOX_MIN + 12] = (
        lower_origin.astype("<i4").view(np.uint8).reshape(n_low, 12)
    )
    lowers[:, fmt.NODE_OFF_BBOX_MAX : fmt.NODE_OFF_BBOX_MAX + 12] = (
        (lower_origin + fmt.LOWER_DIM - 1).astype("<i4").view(np.uint8).reshape(n_low, 12)
    )
    child = _child_index(plan.leaf_origins, fmt.LOWER_DIM_LOG2, fmt.LEAF_LOG2)
    leaf_addr = off.leaf + np.arange(n_leaf, dtype=np.int64) * layout.leaf_size
    lower_addr = off.lower + np.arange(n_low, dtype=np.int64) * layout.lower_size
    rel = (leaf_addr - lower_addr[plan.leaf_parent]).astype("<i8")
    ltable[plan.leaf_parent, child, : fmt.TABLE_CHILD_SIZE] = rel.view(np.uint8).reshape(-1, fmt.TABLE_CHILD_SIZE)
    cmask = np.zeros((n_low, fmt.LOWER_CHILDREN), bool)
    cmask[plan.leaf_parent, child] = True
    sel = np.nonzero(plan.lower_tiles)[0]
    tparent = _find_rows(plan.lower_keys, plan.tile_origins[sel] >> fmt.LOWER_LOG2)
    tchild = _child_index(plan.tile_origins[sel], fmt.LOWER_DIM_LOG2, fmt.LEAF_LOG2)
    ltable[tparent, tchild, : layout.value_size] = tile_bytes[sel]
    vmask = np.zeros((n_low, fmt.LOWER_CHILDREN), bool)
    vmask[tparent, tchild] = True
    at = fmt.LOWER_OFF_VALUE_MASK
    lowers[:, at : at + fmt.LOWER_MASK_SIZE] = np.packbits(vmask, axis=1, bitorder="little")
    at = fmt.LOWER_OFF_CHILD_MASK
    lowers[:, at : at + fmt.LOWER_MASK_SIZE] = np.packbits(cmask, axis=1, bitorder="little")


def _write_upper_nodes(
    buf: np.ndarray,
    off: _GridOffsets,
    layout: fmt.GridLayout,
    plan: _NodePlan,
    bg_bytes: np.ndarray,
    tile_bytes: np.ndarray,
) -> None:
    """Each upper node, one by one: its bbox, a table entry per child (the offset of a lower node, a
    128^3 tile's value or the background), and its child and value masks."""
    _, n_low, n_up = plan.counts
    upper_origin, lower_origin = plan.upper_origins, plan.lower_origins
    upper_addr = off.upper + np.arange(n_up, dtype=np.int64) * layout.upper_size
    lower_addr = off.lower + np.arange(n_low, dtype=np.int64) * layout.lower_size
    sel128 = np.nonzero(plan.upper_tiles)[0]
    t128_parent = _find_rows(plan.upper_keys, plan.tile_origins[sel128] >> fmt.UPPER_LOG2)
    stride = layout.table_stride
    for u in range(n_up):
        node = buf[upper_addr[u] : upper_addr[u] + layout.upper_size]
        node[fmt.NODE_OFF_BBOX_MIN : fmt.NODE_OFF_BBOX_MIN + 12] = upper_origin[u].astype("<i4").view(np.uint8)
        node[fmt.NODE_OFF_BBOX_MAX : fmt.NODE_OFF_BBOX_MAX + 12] = (
            (upper_origin[u] + fmt.UPPER_DIM - 1).astype("<i4").view(np.uint8)
        )
        table = node[layout.upper_off_table : layout.upper_off_table + fmt.UPPER_CHILDREN * stride]
        table = table.reshape(fmt.UPPER_CHILDREN, stride)
        table[:, : layout.value_size] = bg_bytes
        kids = np.nonzero(plan.lower_parent == u)[0]
        kid_index = _child_index(lower_origin[kids], fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
        table[kid_index, : fmt.TABLE_CHILD_SIZE] = (
            (lower_addr[kids] - upper_addr[u]).astype("<i8").view(np.uint8).reshape(-1, fmt.TABLE_CHILD_SIZE)
        )
        mine = sel128[t128_parent == u]
        tile_index = _child_index(plan.tile_origins[mine], fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
        table[tile_index, : layout.value_size] = tile_bytes[mine]
        cm = np.zeros(fmt.UPPER_CHILDREN, bool)
        cm[kid_index] = True
        vm = np.zeros(fmt.UPPER_CHILDREN, bool)
        vm[tile_index] = True
        at = fmt.UPPER_OFF_VALUE_MASK
        node[at : at + fmt.UPPER_MASK_SIZE] = np.packbits(vm, bitorder="little")
        at = fmt.UPPER_OFF_CHILD_MASK
        node[at : at + fmt.UPPER_MASK_SIZE] = np.packbits(cm, bitorder="little")


def _root_key(origin: np.ndarray) -> int:
    """A root table key: the origin's coordinates >> 12 as unsigned, k | j << 21 | i << 42."""
    u = np.asarray(origin, np.int64).astype(np.int32).view(np.uint32).astype(np.uint64) >> np.uint64(fmt.UPPER_LOG2)
    return int(u[2]) | (int(u[1]) << fmt.ROOT_KEY_BITS) | (int(u[0]) << 2 * fmt.ROOT_KEY_BITS)


def _write_root(
    buf: np.ndarray,
    off: _GridOffsets,
    layout: fmt.GridLayout,
    plan: _NodePlan,
    topo: Topology,
    bg_bytes: np.ndarray,
    tile_bytes: np.ndarray,
) -> None:
    """The root: the index bbox, table size and background, then its table: the upper nodes (in key
    order of their origins), then the 4096^3 tiles (active)."""
    n_up = plan.counts[2]
    upper_addr = off.upper + np.arange(n_up, dtype=np.int64) * layout.upper_size
    sel4096 = np.nonzero(plan.root_tiles)[0]
    box = topo.index_bbox
    lo, hi = (box[0], box[1]) if box is not None else (np.zeros(3, np.int64), np.full(3, -1, np.int64))
    _put(buf, off.root + fmt.ROOT_OFF_BBOX, "<6iI", *[int(x) for x in lo], *[int(x) for x in hi], n_up + len(sel4096))
    at = off.root + layout.root_off_background
    buf[at : at + layout.value_size] = bg_bytes
    entries = [(o, upper_addr[u] - off.root, 0, bg_bytes) for u, o in enumerate(plan.upper_origins)]
    entries += [(plan.tile_origins[t], 0, 1, tile_bytes[t]) for t in sel4096]
    for e, (origin, child_off, state, value) in enumerate(entries):
        at = off.root + layout.root_size + e * layout.root_tile_size
        _put(buf, at + fmt.ROOT_TILE_OFF_KEY, "<QqI", _root_key(origin), int(child_off), state)
        buf[at + layout.root_tile_off_value : at + layout.root_tile_off_value + layout.value_size] = value


def _write_headers(
    buf: np.ndarray,
    off: _GridOffsets,
    plan: _NodePlan,
    contents: _GridContents,
    raw_name: bytes,
    grid_class: str | None,
    n_blind: int,
    grid_index: int,
    grid_count: int,
) -> None:
    """The tree header (node offsets from it, node and tile counts, active voxels) and the grid header
    (magic, version, flags, position, size, name, map, bboxes, voxel size, class, type, blind data,
    value count); the checksum is written last, by :func:`_write_checksum`."""
    layout, topo = contents.layout, contents.topo
    t = fmt.GRID_SIZE
    _put(
        buf,
        t,
        fmt.TREE_FORMAT,
        off.leaf - t,
        off.lower - t,
        off.upper - t,
        off.root - t,
        *plan.counts,
        int(plan.lower_tiles.sum()),
        int(plan.upper_tiles.sum()),
        int(plan.root_tiles.sum()),
        topo.active_voxel_count,
    )
    M = topo.transform.index_to_world
    Minv = topo.transform.world_to_index
    _put(
        buf,
        fmt.GRID_OFF_MAGIC,
        fmt.GRID_HEAD_FORMAT,
        fmt.MAGIC_GRID,
        _EMPTY_CHECKSUM,
        fmt.WRITE_VERSION,
        fmt.GRID_FLAG_HAS_BBOX | fmt.GRID_FLAG_BREADTH_FIRST,
        grid_index,
        grid_count,
        off.size,
    )
    buf[fmt.GRID_OFF_NAME : fmt.GRID_OFF_NAME + len(raw_name)] = np.frombuffer(raw_name, np.uint8)
    m = fmt.GRID_OFF_MAP
    _put(buf, m + fmt.MAP_OFF_MATF, "<9f", *M[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_INVMATF, "<9f", *Minv[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_VECF, "<3f", *M[:3, 3])
    _put(buf, m + fmt.MAP_OFF_TAPERF, "<f", 1.0)
    _put(buf, m + fmt.MAP_OFF_MATD, "<9d", *M[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_INVMATD, "<9d", *Minv[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_VECD, "<3d", *M[:3, 3])
    _put(buf, m + fmt.MAP_OFF_TAPERD, "<d", 1.0)
    wb = topo.world_bbox if topo.index_bbox is not None else np.zeros((2, 3))
    _put(buf, fmt.GRID_OFF_WORLD_BBOX, "<6d", *wb.ravel())
    _put(buf, fmt.GRID_OFF_VOXEL_SIZE, "<3d", *topo.voxel_size)
    class_code = {name: code for code, name in fmt.GRID_CLASSES.items()}.get(grid_class)
    if class_code is None or class_code == fmt.GRID_CLASS_UNKNOWN:
        class_code = fmt.GRID_CLASS_INDEX if layout.is_index else fmt.GRID_CLASS_UNKNOWN
    _put(buf, fmt.GRID_OFF_CLASS, "<II", class_code, layout.grid_type)
    _put(buf, fmt.GRID_OFF_BLIND_OFFSET, "<qI", off.blind if n_blind else 0, n_blind)
    _put(buf, fmt.GRID_OFF_DATA0, "<IQQ", 0, contents.value_count, 0)


def _write_checksum(buf: np.ndarray, off: _GridOffsets, layout: fmt.GridLayout, plan: _NodePlan) -> None:
    """The full checksum by the 32.6.0 rules: head over the grid, tree, root and root tiles, tail over
    the CRC32s (u32) of every node; a grid without nodes has no tail."""
    n_leaf, n_low, n_up = plan.counts
    head = _crc(buf, fmt.CHECKSUM_HEAD_START, off.upper)
    arrays = [
        (off.upper, n_up, layout.upper_size),
        (off.lower, n_low, layout.lower_size),
        (off.leaf, n_leaf, layout.leaf_size),
    ]
    tail = zlib.crc32(_node_crcs(buf, arrays).astype("<u4").tobytes()) & 0xFFFFFFFF if n_up else fmt.EMPTY_CRC32
    _put(buf, fmt.GRID_OFF_CHECKSUM, "<II", head, tail)


def _encode_grid(obj: Volume | Topology, name: str, grid_index: int, grid_count: int) -> bytes:
    """One NanoVDB grid buffer (value grid for a Volume, OnIndex grid for a Topology): the nodes are
    planned, the bytes laid out, then written leaves first and the headers and checksum last."""
    contents = _grid_contents(obj)
    raw_name = name.encode("utf-8")
    if len(raw_name) >= fmt.GRID_NAME_SIZE:
        raise NanoVDBError(f"grid name of {len(raw_name)} bytes is too long (at most {fmt.GRID_NAME_SIZE - 1})")
    layout = contents.layout
    plan = _plan_nodes(contents.topo)
    blind = _blind_records(obj)
    off = _plan_offsets(layout, plan, blind)
    buf = np.zeros(off.size, np.uint8)
    _write_blind_data(buf, off, blind)
    bg_bytes = _value_bytes(contents.background, layout)[0]
    tile_values = contents.tile_values
    tile_bytes = _value_bytes(tile_values, layout) if len(tile_values) else np.zeros((0, layout.value_size), np.uint8)
    _write_leaves(buf, off, plan, contents)
    _write_lower_nodes(buf, off, layout, plan, bg_bytes, tile_bytes)
    _write_upper_nodes(buf, off, layout, plan, bg_bytes, tile_bytes)
    _write_root(buf, off, layout, plan, contents.topo, bg_bytes, tile_bytes)
    _write_headers(
        buf, off, plan, contents, raw_name, getattr(obj, "grid_class", None), len(blind), grid_index, grid_count
    )
    _write_checksum(buf, off, layout, plan)
    return buf.tobytes()


def _find_rows(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Position in ``table`` (n, 3) of each row of ``query`` (m, 3); every query row must be there."""
    if len(query) == 0:
        return np.zeros(0, np.int64)
    rows = np.concatenate([table, query]).astype(np.int64)
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    position = np.full(int(inverse.max()) + 1, -1, np.int64)
    position[inverse[: len(table)]] = np.arange(len(table))
    found = position[inverse[len(table) :]]
    assert np.all(found >= 0), "a node's parent is missing"
    return found


def save(path: str | os.PathLike, grids: dict[str, Volume | Topology], codec: str = "none") -> None:
    """Write grids to one .nvdb file: value grids for Volumes, OnIndex grids for Topologies.

    Volumes in the index layout are written with their values spread over whole leaves
    (background elsewhere).  Units, length units and component names travel in a
    ``vdbflow.metadata`` blind data record (plain bytes to other NanoVDB tools), beside the
    blind data records a volume read from a file brought along.  The file is written in a private
    directory beside ``path`` (``.NAME.tmp-TAG``, made with ``mkdir`` and ``O_EXCL | O_NOFOLLOW``)
    and then renamed onto it, so a reader never sees it half written, a link planted nearby is
    never written through, and a failed write (a full disk) leaves nothing behind.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced if it exists).
    grids : dict of str to Volume or Topology
        Grid name (under 256 bytes of UTF-8) -> what to write, in file order.  Volumes must have a
        value type NanoVDB can hold (the nine of ``vdbflow.VALUE_TYPES``): float32, float64,
        int32, int64 or uint32 scalars, or vec3 or vec4 of float32 or float64.
    codec : {"none", "zip", "blosc"}, default ``"none"``
        Compression of each grid's payload (``"blosc"`` needs numcodecs).  Uncompressed files can
        be read in part (``vdbflow.open(..., bbox=...)``) without reading the rest.

    Returns
    -------
    None

    Raises
    ------
    NanoVDBError
        An unknown codec, no grids, a value type with no NanoVDB grid type (e.g. 9 components), or
        a grid name that is too long.
    WriteError
        The file could not be written (a full disk, no permission); ``path`` is as it was.

    See Also
    --------
    vdbflow.open : read a grid back.
    list_grids : the grids of a file, from the headers.
    Volume.to_nvdb : write one volume.

    Examples
    --------
    A round trip through a temporary directory; the units come back with the values:

    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> import vdbflow
    >>> ijk = np.array([[i, j, k] for i in range(4) for j in range(4) for k in range(4)])
    >>> vol = vdbflow.Volume.from_voxels(ijk, (2 * ijk[:, 0] + 3 * ijk[:, 1]).astype(np.float32), voxel_size=0.5)
    >>> vol.units, vol.length_units = "K", "m"
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "ramp.nvdb")
    ...     vdbflow.save(path, {"temperature": vol}, codec="zip")
    ...     info = vdbflow.list_grids(path)
    ...     back = vdbflow.open(path, "temperature")
    ...     value = back.sample([[0.75, 0.625, 1.0]])["temperature"].values.tolist()
    ...     units = back.units, back.length_units
    ...     del back
    >>> [(g.name, g.grid_type, g.active_voxel_count, g.codec) for g in info]
    [('temperature', 'Float', 64, 'zip')]
    >>> value, units
    ([6.75], ('K', 'm'))
    """
    if codec not in fmt.CODEC_IDS:
        raise NanoVDBError(f"expected codec 'none', 'zip' or 'blosc', got {codec!r}")
    if isinstance(grids, (Volume, Topology)):
        raise NanoVDBError(
            f"expected grids as a dict of name -> Volume or Topology, got a {type(grids).__name__}: "
            f"save(path, {{{grids.name if isinstance(grids, Volume) else 'name'!r}: volume}}), or volume.to_nvdb(path)"
        )
    if not isinstance(grids, Mapping):
        raise NanoVDBError(f"expected grids as a dict of name -> Volume or Topology, got {type(grids).__name__}")
    if not grids:
        raise NanoVDBError("expected at least one grid to save, got none")
    payloads, metas = [], []
    for n, (name, obj) in enumerate(grids.items()):
        grid = _encode_grid(obj, name, n, len(grids))
        if codec == "zip":
            payload = struct.pack("<Q", len(packed := zlib.compress(grid))) + packed
        elif codec == "blosc":  # chunks of at most 1 GiB, each after its u64 size, as NanoVDB writes them
            from numcodecs import Blosc

            frame_codec = Blosc(cname="lz4", clevel=9, shuffle=Blosc.SHUFFLE)
            words = np.frombuffer(grid, np.uint32 if len(grid) % 4 == 0 else np.uint8)  # typesize 4: 32-bit values
            step = BLOSC_MAX_CHUNK // words.itemsize
            frames = [bytes(frame_codec.encode(words[at : at + step])) for at in range(0, len(words), step)]
            payload = b"".join(struct.pack("<Q", len(f)) + f for f in frames)
        else:
            payload = grid
        h = _grid_header(np.frombuffer(grid, np.uint8), 0)
        raw_name = name.encode("utf-8") + b"\0"
        topo = obj if isinstance(obj, Topology) else obj.topology
        box = topo.index_bbox if topo.index_bbox is not None else np.zeros((2, 3), np.int64)
        meta = struct.pack(
            fmt.FILE_METADATA_FORMAT,
            len(grid),
            len(payload),
            0,
            h["voxel_count"],
            h["grid_type"],
            h["grid_class"],
            *h["world_bbox"],
            *[int(x) for x in box.ravel()],
            *h["voxel_size"],
            len(raw_name),
            *h["node_counts"],
            1,
            *h["tile_counts"],
            fmt.CODEC_IDS[codec],
            0,
            fmt.WRITE_VERSION,
        )
        metas.append(meta + raw_name)
        payloads.append(payload)
    header = struct.pack(fmt.FILE_HEADER_FORMAT, fmt.MAGIC_FILE, fmt.WRITE_VERSION, len(grids), fmt.CODEC_IDS[codec])
    with atomic_file(path) as fh:  # a private directory beside `path`, never a predictable name
        fh.write(header)
        for meta in metas:
            fh.write(meta)
        for payload in payloads:
            fh.write(payload)
