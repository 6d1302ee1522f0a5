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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.transform import Transform
from vdbflow.core.value_types import value_type_for
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError, VolumeError
from vdbflow.io import nanovdb_format as fmt

MAX_GRID_BYTES = 1 << 40  # refuse absurd sizes before allocating anything
MAX_VALUE_COUNT = 1 << 48  # index grids: values an external array may hold (keeps index sums far from 2**63)
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
    magic, checksum, version, flags, gindex, gcount, gsize = _unpack(buf, base, "<QQIIIIQ", "grid header")
    if magic not in fmt.GRID_MAGICS:
        raise NanoVDBError(f"expected a NanoVDB grid magic at byte {base}, found 0x{magic:016x}")
    major, minor, patch = fmt.version_parts(version)
    if major != fmt.MAJOR_VERSION:
        raise NanoVDBError(f"expected NanoVDB major version 32 at byte {base + 16}, found {major}.{minor}.{patch}")
    if gsize < fmt.GRID_SIZE + fmt.TREE_SIZE or gsize > MAX_GRID_BYTES:
        raise NanoVDBError(f"grid size {gsize} at byte {base + 32} is not a plausible grid size")
    _need(buf, base, gsize, "grid")
    raw_name = bytes(buf[base + fmt.GRID_OFF_NAME: base + fmt.GRID_OFF_NAME + fmt.GRID_NAME_SIZE])
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", "replace")
    mat = np.array(_unpack(buf, base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_MATD, "<9d", "map"))
    vec = np.array(_unpack(buf, base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_VECD, "<3d", "map"))
    world_bbox = _unpack(buf, base + fmt.GRID_OFF_WORLD_BBOX, "<6d", "world bbox")
    voxel_size = _unpack(buf, base + fmt.GRID_OFF_VOXEL_SIZE, "<3d", "voxel size")
    gclass, gtype = _unpack(buf, base + fmt.GRID_OFF_CLASS, "<II", "grid class and type")
    blind_offset, blind_count = _unpack(buf, base + fmt.GRID_OFF_BLIND_OFFSET, "<qI", "blind metadata")
    data1 = _unpack(buf, base + fmt.GRID_OFF_DATA1, "<Q", "grid data1")[0]
    t = base + fmt.GRID_SIZE
    node_offsets = _unpack(buf, t, "<4Q", "tree node offsets")
    node_counts = _unpack(buf, t + 32, "<3I", "tree node counts")
    tile_counts = _unpack(buf, t + 44, "<3I", "tree tile counts")
    voxel_count = _unpack(buf, t + 56, "<Q", "tree voxel count")[0]
    index_to_world = np.eye(4)
    index_to_world[:3, :3] = mat.reshape(3, 3)
    index_to_world[:3, 3] = vec
    return dict(magic=magic, checksum=checksum, version=version, flags=flags, grid_index=gindex, grid_count=gcount,
                grid_size=gsize, name=name, index_to_world=index_to_world, world_bbox=world_bbox,
                voxel_size=voxel_size, grid_class=gclass, grid_type=gtype, blind_offset=blind_offset,
                blind_count=blind_count, value_count=data1, tree=t, node_offsets=node_offsets,
                node_counts=node_counts, tile_counts=tile_counts, voxel_count=voxel_count)


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
    return np.array([_crc(buf, start + k * size, start + (k + 1) * size)
                     for start, count, size in arrays for k in range(count)], np.uint64)


@dataclass(frozen=True)
class _Checksums:
    """The head spans and tail CRC32s a grid may carry under its version's rules (old rules have variants)."""

    head_spans: tuple[tuple[int, int], ...]
    tails: tuple[tuple[str, Any], ...]  # (what is covered, a callable giving the CRC32 or None)


def _checksum_rules(buf: np.ndarray, base: int, h: dict[str, Any], layout: fmt.GridLayout) -> _Checksums:
    end = base + h["grid_size"]
    head_end = base + fmt.GRID_SIZE + fmt.TREE_SIZE
    if h["version"] > fmt.CHECKSUM_OLD_RULES_LAST:
        return _Checksums(((base + 16, head_end),),
                          ((f"bytes [{head_end}, {end}) in 4 KiB blocks", lambda: _blocked_crc(buf, head_end, end)),))
    t = h["tree"]
    offs, counts = h["node_offsets"], h["node_counts"]
    upper = t + offs[2]
    if counts[2] == 0:  # no nodes: versions differ on where the head stops, and there is no tail
        spans = {(base + 16, end)}
        if h["blind_count"]:
            spans.add((base + 16, min(end, base + max(h["blind_offset"], 16))))
        root = t + offs[3]
        if root + fmt.ROOT_OFF_TABLE_SIZE + 4 <= end:
            table = int(struct.unpack_from("<I", buf, root + fmt.ROOT_OFF_TABLE_SIZE)[0])
            spans.add((base + 16, min(end, root + layout.root_size + table * layout.root_tile_size)))
        return _Checksums(tuple(sorted(spans)), ())
    inner = [(t + offs[2], counts[2], layout.upper_size), (t + offs[1], counts[1], layout.lower_size)]
    nodes = f"the {counts[2]} upper, {counts[1]} lower and {counts[0]} leaf nodes, one CRC32 each,"
    cache: dict[bool, np.ndarray] = {}

    def leaves(whole: bool) -> list[tuple[int, int, int]]:
        if layout.leaf_kind != "fpn":
            return [(t + offs[0], counts[0], layout.leaf_size)]
        addrs = _fpn_leaf_addresses(buf, t + offs[0], counts[0], end, t + 32)  # FpN: sizes differ
        return [(int(a), 1, 96 + 64 * (1 << (int(buf[a + 15]) >> 5)) if whole else 96) for a in addrs]

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
    return _Checksums(((base + 16, min(max(upper, base + 16), end)),), tuple(tails))


def _head_as_if(buf: np.ndarray, base: int, start: int, stop: int, index_count: tuple[int, int]) -> int:
    """The head CRC32 over [start, stop) with the grid index and count (bytes 24-32) replaced."""
    if stop < base + 32:
        return _crc(buf, start, stop)
    crc = zlib.crc32(struct.pack("<II", *index_count), _crc(buf, start, base + 24))
    return _crc(buf, base + 32, stop, crc)


def _verify_checksum(buf: np.ndarray, base: int, h: dict[str, Any], layout: fmt.GridLayout, tail: bool,
                     position: tuple[int, int]) -> None:
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
                    _head_as_if(buf, base, start, stop, alt) == want_head for alt in alternatives):
                break
        else:
            start, stop = rules.head_spans[0]
            raise NanoVDBError(
                f"checksum mismatch in grid {h['name']!r} (NanoVDB {version}): bytes [{start}, {stop}) have CRC32 "
                f"0x{_crc(buf, start, stop):08x}, the head half of the checksum at byte {base + 8} records "
                f"0x{want_head:08x} (open with checksum=False to read a grid whose writer left a stale checksum)")
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
            f"{base + 12} records 0x{want_tail:08x} (open with checksum=False to read it anyway)")


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
    return buf[start:start + count * size].reshape(count, size)


def _node_index(parents: np.ndarray, offsets: np.ndarray, fields: np.ndarray, start: int, count: int, size: int,
                what: str, parent: str, count_at: int) -> np.ndarray:
    """Index of each child (parent address + offset read from the file at byte ``fields``) in its node
    array; a child that points anywhere else (outside the array, between nodes, or into another level -
    which is how an offset could loop) is an error.  Offsets are range-checked before they are added,
    so no sum can wrap around."""
    if len(offsets) > count:
        raise NanoVDBError(f"{len(offsets)} {what} nodes are referenced by {parent}s, but the node count at "
                           f"byte {count_at} says the grid has {count}")
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


def _fpn_leaf_addresses(buf: np.ndarray, start: int, count: int, end: int, count_at: int) -> np.ndarray:
    """Byte addresses of ``count`` FpN leaves packed from ``start``: each is 96 bytes followed by
    64 x its bit width (1, 2, 4, 8 or 16; log2 in bits 5-7 of the flags byte at 15) of codes."""
    addrs = np.empty(count, np.int64)
    pos = start
    for k in range(count):
        if pos + 96 > end:
            raise NanoVDBError(f"FpN leaf {k} of the {count} the node count at byte {count_at} gives starts at byte "
                               f"{pos}, but the grid ends at byte {end}")
        log2 = int(buf[pos + 15]) >> 5
        if log2 > fmt.FPN_MAX_LOG2_BITS:
            raise NanoVDBError(f"FpN leaf {k} at byte {pos} gives a bit width of 2^{log2} (flags at byte {pos + 15}); "
                               f"expected 1, 2, 4, 8 or 16 bits")
        addrs[k] = pos
        pos += 96 + 64 * (1 << log2)
    if pos > end:
        raise NanoVDBError(f"the codes of FpN leaf {count - 1} at byte {addrs[-1]} run to byte {pos}, past the "
                           f"grid's end (byte {end})")
    return addrs


def _node_index_among(parents: np.ndarray, offsets: np.ndarray, fields: np.ndarray, addrs: np.ndarray, what: str,
                      parent: str, count_at: int) -> np.ndarray:
    """Like :func:`_node_index` for nodes of different sizes at the known byte addresses ``addrs``."""
    if len(offsets) > len(addrs):
        raise NanoVDBError(f"{len(offsets)} {what} nodes are referenced by {parent}s, but the node count at "
                           f"byte {count_at} says the grid has {len(addrs)}")
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
            f"{int(fields[k])}), which is not the start of one of the {len(addrs)} {what} nodes")
    if len(np.unique(index)) != len(index):
        raise NanoVDBError(f"a {what} node at bytes [{lo}, {hi}) has more than one parent")
    return index


def _leaf_floats(buf: np.ndarray, addrs: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
    """(leaves x 512, 1) float32 values of Half or Fp4/8/16/N leaves at ``addrs``: binary16 widened, or
    code * quantum + minimum in float32 (each operation rounded to float32, as NanoVDB's host code)."""
    def at(start: int, stop: int, rows: np.ndarray = addrs) -> np.ndarray:
        return buf[rows[:, None] + np.arange(start, stop)]

    n = len(addrs)
    if layout.leaf_kind == "half":
        return np.ascontiguousarray(at(96, 96 + 1024)).view("<f2").astype(np.float32).reshape(-1, 1)
    codes = np.empty((n, 512), np.float32)
    if layout.leaf_kind == "fp4":
        raw = at(96, 96 + 256)
        codes[:] = np.stack([raw & 15, raw >> 4], axis=2).reshape(n, 512)
    elif layout.leaf_kind == "fp8":
        codes[:] = at(96, 96 + 512)
    elif layout.leaf_kind == "fp16":
        codes[:] = np.ascontiguousarray(at(96, 96 + 1024)).view("<u2")
    else:  # FpN: per leaf bit width, codes packed least significant bit first
        log2 = buf[addrs + 15] >> 5
        for b in np.unique(log2):
            sel = np.nonzero(log2 == b)[0]
            bits = 1 << int(b)
            raw = np.ascontiguousarray(at(96, 96 + 64 * bits, addrs[sel]))
            if bits == 16:
                codes[sel] = raw.view("<u2")
            elif bits == 8:
                codes[sel] = raw
            else:
                unpacked = np.unpackbits(raw, axis=1, bitorder="little").reshape(len(sel), 512, bits)
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
    mask = np.uint64((1 << 21) - 1)
    parts = [(keys >> np.uint64(s)) & mask for s in (42, 21, 0)]
    return (np.stack(parts, axis=1).astype(np.uint32) << np.uint32(12)).view(np.int32)


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
    if count > (1 << 16):
        raise NanoVDBError(f"blind data count {count} at byte {base + fmt.GRID_OFF_BLIND_COUNT} is absurd")
    records = []
    for b in range(count):
        at = base + offset + b * fmt.BLIND_META_SIZE
        if at < base or at + fmt.BLIND_META_SIZE > end:
            raise NanoVDBError(f"blind metadata {b} at offset {offset} + {b} x {fmt.BLIND_META_SIZE} (offset read at "
                               f"byte {base + fmt.GRID_OFF_BLIND_OFFSET}) lies outside the grid, bytes [{base}, {end})")
        data_offset, value_count, value_size, semantic, data_class, data_type = _unpack(
            buf, at, "<qQIIII", "blind metadata")
        start, nbytes = at + data_offset, value_count * value_size
        if value_size == 0 or nbytes > MAX_GRID_BYTES or start < base or start + nbytes > end:
            raise NanoVDBError(f"blind data {b} (metadata at byte {at}) of {value_count} x {value_size} bytes "
                               f"at offset {data_offset} from there lies outside the grid, bytes [{base}, {end})")
        raw_name = bytes(buf[at + 32: at + 32 + 256]).split(b"\0", 1)[0].decode("utf-8", "replace")
        records.append(BlindData(raw_name, semantic, data_class, data_type, value_size,
                                 bytes(buf[start:start + nbytes])))
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
    if names is not None and tuple(names) != (("x", "y", "z", "w")[:len(names)] if len(names) <= 4 else
                                              tuple(f"c{c}" for c in range(len(names)))):
        meta["component_names"] = [str(n) for n in names]
    if not meta:
        return None
    data = json.dumps({"format": 1, **meta}, ensure_ascii=False).encode("utf-8")
    return BlindData(METADATA_NAME, 0, 0, 0, 1, data)


def _apply_metadata(obj: Volume | Topology, records: tuple[BlindData, ...], base: int) -> tuple[BlindData, ...]:
    """Set ``obj``'s units and component names from its ``vdbflow.metadata`` record; the other records.
    A record that does not parse is left out with a warning (the grid itself is fine)."""
    import json
    import warnings

    rest = tuple(r for r in records if r.name != METADATA_NAME)
    for r in records:
        if r.name != METADATA_NAME:
            continue
        try:
            meta = json.loads(r.data.decode("utf-8"))
            if not isinstance(meta, dict):
                raise ValueError(f"a JSON {type(meta).__name__}, not an object")
            names = meta.get("component_names")
            if names is not None:
                components = getattr(obj, "components", None)
                if components is None or not isinstance(names, list) or len(names) != components or \
                        len(set(map(str, names))) != len(names):
                    raise ValueError(f"component names {names!r} for {components} component(s)")
                obj.component_names = tuple(str(n) for n in names)
            for key in ("units", "length_units"):
                if meta.get(key) is not None:
                    setattr(obj, key, str(meta[key]))
        except (UnicodeDecodeError, ValueError) as err:
            warnings.warn(f"expected {METADATA_NAME} blind data of the grid at byte {base} to hold a UTF-8 JSON "
                          f"object of units and component names, got {err}; ignored", UserWarning, stacklevel=4)
    return rest


def _decode_grid(buf: np.ndarray, base: int, bbox: np.ndarray | None = None,
                 leaf_subset: np.ndarray | None = None, checksum: bool = True,
                 position: tuple[int, int] = (0, 1)) -> tuple[dict[str, Any], Any]:
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


def _decode_nodes(buf: np.ndarray, base: int, bbox: np.ndarray | None,
                  leaf_subset: np.ndarray | None) -> tuple[dict[str, Any], Any]:
    """Decode one grid into a Volume (value grids) or a Topology (index grids).  ``bbox`` (inclusive
    index box) or ``leaf_subset`` (indices in tree order) restrict the leaves and tiles read: nodes outside
    are never touched, which for a memory-mapped file means never read from disk."""
    h = _grid_header(buf, base)
    layout = _layout_of(h, base)
    end = base + h["grid_size"]
    t = h["tree"]
    leaf_off, lower_off, upper_off, root_off = h["node_offsets"]
    n_leaf, n_lower, n_upper = h["node_counts"]
    for what, off in (("leaf", leaf_off), ("lower", lower_off), ("upper", upper_off), ("root", root_off)):
        if t + off > end:
            raise NanoVDBError(f"the {what} node offset at byte {t} points past the grid's end (byte {end})")
    gbuf = buf[:end]
    root = t + root_off
    table_size = _unpack(gbuf, root + fmt.ROOT_OFF_TABLE_SIZE, "<I", "root table size")[0]
    tiles = _node_rows(gbuf, root + layout.root_size, table_size, layout.root_tile_size, "root tile")
    bg_raw = gbuf[root + layout.root_off_background: root + layout.root_off_background + layout.value_size]
    if len(bg_raw) != layout.value_size:
        raise NanoVDBError(f"the root background at byte {root + layout.root_off_background} lies past the grid's "
                           f"end (byte {end})")
    background = _values(bg_raw[None], layout)[0]

    keys = np.ascontiguousarray(tiles[:, 0:8]).view("<u8")[:, 0]
    child = np.ascontiguousarray(tiles[:, 8:16]).view("<i8")[:, 0]
    tile_values = _values(tiles[:, layout.root_tile_off_value: layout.root_tile_off_value + layout.value_size],
                          layout)
    root_origins = _key_to_origin(keys)

    def keep_tile(values: np.ndarray, active: np.ndarray) -> np.ndarray:
        if layout.is_index:
            return values[:, 0] != 0
        if layout.is_topology:  # Mask / Boolean: a tile is part of the topology when active
            return active
        with np.errstate(invalid="ignore"):
            return np.any(values != background, axis=1)

    tile_origin_parts, tile_size_parts, tile_value_parts, tile_at_parts = [], [], [], []
    is_tile = child == 0
    root_active = np.ascontiguousarray(tiles[:, fmt.TILE_STATE_ROOT:fmt.TILE_STATE_ROOT + 4]).view("<u4")[:, 0] != 0
    sel = is_tile & keep_tile(tile_values, root_active)
    root_tile_at = root + layout.root_size + np.arange(table_size, dtype=np.int64) * layout.root_tile_size
    tile_origin_parts.append(root_origins[sel])
    tile_size_parts.append(np.full(int(sel.sum()), 4096))
    tile_value_parts.append(tile_values[sel])
    tile_at_parts.append(root_tile_at[sel] + layout.root_tile_off_value)

    # upper nodes
    uppers = _node_rows(gbuf, t + upper_off, n_upper, layout.upper_size, "upper node")
    u_index = _node_index(np.full(int((~is_tile).sum()), root), child[~is_tile],
                          root_tile_at[~is_tile] + fmt.ROOT_TILE_OFF_CHILD, t + upper_off, n_upper,
                          layout.upper_size, "upper", "root tile", t + 40)
    u_origin = root_origins[~is_tile]
    near = _overlaps(u_origin, 4096, bbox)
    u_index, u_origin = u_index[near], u_origin[near]
    lower_parent, lower_offs, lower_fields, lower_origin = [], [], [], []
    for k, ui in enumerate(u_index):
        node = uppers[ui]
        addr = t + upper_off + int(ui) * layout.upper_size
        cmask = np.unpackbits(node[fmt.UPPER_OFF_CHILD_MASK: fmt.UPPER_OFF_CHILD_MASK + 4096], bitorder="little")
        table = node[layout.upper_off_table: layout.upper_off_table + 32768 * layout.table_stride]
        table = table.reshape(32768, layout.table_stride)
        kids = np.nonzero(cmask)[0]
        offs = np.ascontiguousarray(table[kids, :8]).view("<i8")[:, 0]
        lower_parent.append(np.full(len(kids), addr, np.int64))
        lower_offs.append(offs)
        lower_fields.append(addr + layout.upper_off_table + kids.astype(np.int64) * layout.table_stride)
        lower_origin.append(u_origin[k] + (_child_positions(kids, fmt.UPPER_DIM_LOG2) << 7))
        non = np.nonzero(cmask == 0)[0]
        vals = _values(table[non, :layout.value_size], layout)
        vmask = np.unpackbits(node[fmt.UPPER_OFF_VALUE_MASK: fmt.UPPER_OFF_VALUE_MASK + 4096], bitorder="little")
        keep = keep_tile(vals, vmask[non].astype(bool))
        tile_origin_parts.append(u_origin[k] + (_child_positions(non[keep], fmt.UPPER_DIM_LOG2) << 7))
        tile_size_parts.append(np.full(int(keep.sum()), 128))
        tile_value_parts.append(vals[keep])
        tile_at_parts.append(addr + layout.upper_off_table + non[keep].astype(np.int64) * layout.table_stride)

    def joined(parts: list, shape: tuple = (0,)) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(shape, np.int64)

    # lower nodes, all at once
    lowers = _node_rows(gbuf, t + lower_off, n_lower, layout.lower_size, "lower node")
    l_index = _node_index(joined(lower_parent), joined(lower_offs), joined(lower_fields), t + lower_off, n_lower,
                          layout.lower_size, "lower", "upper node", t + 36)
    lower_addr_a = t + lower_off + l_index * layout.lower_size
    lower_origin_a = joined(lower_origin, (0, 3))
    near = _overlaps(lower_origin_a, 128, bbox)
    l_index, lower_addr_a, lower_origin_a = l_index[near], lower_addr_a[near], lower_origin_a[near]
    rows = lowers[l_index]
    cmask = np.unpackbits(rows[:, fmt.LOWER_OFF_CHILD_MASK: fmt.LOWER_OFF_CHILD_MASK + 512], axis=1,
                          bitorder="little")
    table = rows[:, layout.lower_off_table: layout.lower_off_table + 4096 * layout.table_stride]
    table = table.reshape(len(rows), 4096, layout.table_stride)
    node, kid = np.nonzero(cmask)
    offs = np.ascontiguousarray(table[node, kid, :8]).view("<i8")[:, 0]
    leaf_parent = lower_addr_a[node]
    leaf_fields = leaf_parent + layout.lower_off_table + kid.astype(np.int64) * layout.table_stride
    leaf_origin = lower_origin_a[node] + (_child_positions(kid, fmt.LOWER_DIM_LOG2) << 3)
    node, non = np.nonzero(cmask == 0)
    vals = _values(table[node, non, :layout.value_size], layout)
    vmask = np.unpackbits(rows[:, fmt.LOWER_OFF_VALUE_MASK: fmt.LOWER_OFF_VALUE_MASK + 512], axis=1, bitorder="little")
    keep = keep_tile(vals, vmask[node, non].astype(bool))
    tile_origin_parts.append(lower_origin_a[node[keep]] + (_child_positions(non[keep], fmt.LOWER_DIM_LOG2) << 3))
    tile_size_parts.append(np.full(int(keep.sum()), 8))
    tile_value_parts.append(vals[keep])
    tile_at_parts.append(lower_addr_a[node[keep]] + layout.lower_off_table
                         + non[keep].astype(np.int64) * layout.table_stride)

    # leaves (FpN leaves differ in size: they are found by walking the packed array)
    if layout.leaf_kind == "fpn":
        leaf_addrs = _fpn_leaf_addresses(gbuf, t + leaf_off, n_leaf, end, t + 32)
        f_index = _node_index_among(leaf_parent, offs, leaf_fields, leaf_addrs, "leaf", "lower node", t + 32)
        leaf_nodes = None
    else:
        leaf_nodes = _node_rows(gbuf, t + leaf_off, n_leaf, layout.leaf_size, "leaf")
        f_index = _node_index(leaf_parent, offs, leaf_fields, t + leaf_off, n_leaf, layout.leaf_size, "leaf",
                              "lower node", t + 32)
        leaf_addrs = t + leaf_off + np.arange(n_leaf, dtype=np.int64) * layout.leaf_size
    order = tree.tree_order(leaf_origin >> 3)
    f_index, leaf_origin = f_index[order], leaf_origin[order]
    keep = _overlaps(leaf_origin, 8, bbox)
    if leaf_subset is not None:
        chosen = np.zeros(len(keep), bool)
        wanted = np.asarray(leaf_subset, dtype=np.int64)
        if np.any((wanted < 0) | (wanted >= len(keep))):
            raise NanoVDBError(f"expected leaf indices in [0, {len(keep)}), got {wanted.min()}..{wanted.max()}")
        chosen[wanted] = True
        keep &= chosen
    f_index, leaf_origin = f_index[keep], leaf_origin[keep]
    in_place = len(f_index) == n_leaf and np.array_equal(f_index, np.arange(n_leaf))

    def leaf_columns(start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) of every kept leaf, copied once into a contiguous array."""
        if leaf_nodes is None:
            return gbuf[leaf_addrs[f_index][:, None] + np.arange(start, stop)]
        cols = leaf_nodes[:, start:stop]
        return np.ascontiguousarray(cols) if in_place else np.take(cols, f_index, axis=0)

    lrows_head = leaf_columns(0, 96 if layout.is_index else fmt.LEAF_OFF_VALUE_MASK + 64)
    masks = np.ascontiguousarray(lrows_head[:, fmt.LEAF_OFF_VALUE_MASK: fmt.LEAF_OFF_VALUE_MASK + 64]).view("<u8")
    masks = masks.astype(np.uint64).reshape(-1, 8)

    tile_origins = np.concatenate(tile_origin_parts).astype(np.int32)
    tile_sizes = np.concatenate(tile_size_parts).astype(np.int32)
    tile_vals = np.concatenate(tile_value_parts)
    tile_at = np.concatenate(tile_at_parts)
    near = np.ones(len(tile_origins), bool)
    for size in tree.TILE_SIZES:
        of_size = tile_sizes == size
        near[of_size] = _overlaps(tile_origins[of_size], size, bbox)
    tile_origins, tile_sizes, tile_vals, tile_at = tile_origins[near], tile_sizes[near], tile_vals[near], tile_at[near]
    try:
        transform = Transform(h["index_to_world"])
    except VolumeError as err:
        raise NanoVDBError(f"the index-to-world map at byte {base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_MATD} of grid "
                           f"{h['name']!r} is not usable: {err}") from None
    if layout.is_index:
        offsets = np.ascontiguousarray(lrows_head[:, fmt.INDEX_LEAF_OFF_OFFSET: fmt.INDEX_LEAF_OFF_OFFSET + 8])
        first = offsets.view("<u8")[:, 0].astype(np.uint64)  # compared unsigned, without sums: no wrap-around
        value_count = int(h["value_count"])
        if value_count > MAX_VALUE_COUNT:
            raise NanoVDBError(f"value count {value_count} at byte {base + fmt.GRID_OFF_DATA1} of grid "
                               f"{h['name']!r} is not plausible (at most {MAX_VALUE_COUNT})")
        if layout.grid_type == fmt.GRID_TYPE_INDEX:
            # ValueIndex: all 512 voxels of a leaf are indexed, active or not
            masks_for_index = np.full_like(masks, np.iinfo(np.uint64).max)
        else:
            masks_for_index = masks
        counts = np.bitwise_count(masks_for_index).sum(axis=1).astype(np.uint64)
        vc = np.uint64(value_count)
        # a leaf's values [first, first + count) lie in [1, value_count): index 0 is the background
        bad = (first > vc) | (counts > vc - np.minimum(first, vc)) | ((counts > 0) & (first < 1))
        if np.any(bad):
            k = int(np.argmax(bad))
            at = t + leaf_off + int(f_index[k]) * layout.leaf_size + fmt.INDEX_LEAF_OFF_OFFSET
            raise NanoVDBError(
                f"the leaf at byte {at - fmt.INDEX_LEAF_OFF_OFFSET} of grid {h['name']!r} says its {int(counts[k])} "
                f"values start at index {int(first[k])} (byte {at}); expected them within [1, {value_count}), the "
                f"value count at byte {base + fmt.GRID_OFF_DATA1}")
        if len(tile_vals):
            bad = tile_vals[:, 0] >= np.uint64(max(value_count, 1))
            if np.any(bad):
                k = int(np.argmax(bad))
                raise NanoVDBError(
                    f"a tile at byte {int(tile_at[k])} of grid {h['name']!r} holds value index "
                    f"{int(tile_vals[k, 0])}; expected one below the value count {value_count} "
                    f"(byte {base + fmt.GRID_OFF_DATA1})")
        first = np.where(first > 0, first - np.uint64(1), np.uint64(0)).astype(np.int64)
        topo = Topology(leaf_origin.astype(np.int32), masks_for_index, transform, tile_origins, tile_sizes,
                        leaf_offset=first, value_count=max(value_count - 1, 0),
                        tile_value_index=tile_vals[:, 0].astype(np.int64) - 1)
        return h, topo
    if layout.is_topology:
        return h, Topology(leaf_origin.astype(np.int32), masks, transform, tile_origins, tile_sizes)
    if layout.is_quantised:  # decoded to float32 copies
        topo = Topology(leaf_origin.astype(np.int32), masks, transform, tile_origins, tile_sizes)
        vt = value_type_for(np.dtype(np.float32), 1)
        return h, Volume(topo, _leaf_floats(gbuf, leaf_addrs[f_index], layout),
                         np.asarray(background, np.float32).reshape(1),
                         np.ascontiguousarray(tile_vals.reshape(-1, 1), np.float32), vt, False, h["name"] or "value")
    # values stay where they are: a flat view of the leaf array and each leaf's element offset
    item = layout.dtype.itemsize
    start = t + leaf_off
    flat = gbuf[start: start + n_leaf * layout.leaf_size].view(layout.dtype)
    values_at = (f_index * layout.leaf_size + layout.leaf_off_table) // item
    topo = Topology(leaf_origin.astype(np.int32), masks, transform, tile_origins, tile_sizes)
    vt = value_type_for(layout.dtype, layout.components)
    vol = Volume(topo, flat, np.ascontiguousarray(background, vt.dtype),
                 np.ascontiguousarray(tile_vals.reshape(-1, layout.components), vt.dtype), vt, False,
                 h["name"] or "value", leaf_values_at=values_at)
    return h, vol


# ------------------------------------------------------------------------------------------------
# files: segments of (header, metadata + names, grid payloads)
ZIP_MAX_RATIO = 1032  # deflate never expands more than 1032:1 (zlib's documented bound)
BLOSC_MAX_CHUNK = 1 << 30  # NanoVDB writes blosc grids in chunks of at most 1 GiB, each with its own size
BLOSC_HEADER_SIZE = 16  # version, versionlz, flags, typesize (u8 each), nbytes, blocksize, cbytes (u32 each)
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
            out[pos:pos + len(step)] = np.frombuffer(step, np.uint8)
            pos += len(step)
            tail = inflater.unconsumed_tail
            if not step and not tail:
                break  # input used up before the stream's end
    except zlib.error as err:
        raise NanoVDBError(f"zip payload at byte {where} does not inflate after {pos} bytes: {err}") from None
    if not inflater.eof or pos != expected:
        raise NanoVDBError(f"zip payload at byte {where} inflates to {pos} bytes"
                           f"{'' if inflater.eof else ' and then ends mid-stream'}, expected {expected}")


def _blosc_frame_size(buf: np.ndarray, at: int, size: int, residual: int) -> int:
    """The uncompressed size a blosc frame's 16-byte header declares, checked before anything is
    decompressed: at most the ``residual`` bytes of the grid still to come, and the frame must fill
    exactly its chunk of ``size`` bytes."""
    if size < BLOSC_HEADER_SIZE:
        raise NanoVDBError(f"blosc chunk at byte {at} has {size} bytes, expected at least a "
                           f"{BLOSC_HEADER_SIZE}-byte header")
    nbytes, _blocksize, cbytes = _unpack(buf, at + 4, "<III", "blosc header")
    if not 0 < nbytes <= residual:
        raise NanoVDBError(f"blosc chunk at byte {at} declares {nbytes} uncompressed bytes (at byte {at + 4}), "
                           f"expected between 1 and the {residual} bytes left of the grid")
    if cbytes != size:
        raise NanoVDBError(f"blosc chunk at byte {at} declares {cbytes} compressed bytes (at byte {at + 12}), "
                           f"but its chunk holds {size}")
    return nbytes


def _decompress(src: _GridSource, expected: int) -> np.ndarray:
    """A compressed grid's bytes: its zip stream or blosc chunks decompressed into exactly
    ``expected`` bytes, stopping at the first byte a lying payload would write beyond them."""
    if src.codec == "zip":
        (at, size, _), = src.chunks
        if expected > ZIP_MAX_RATIO * size + 4096:
            raise NanoVDBError(f"zip payload at byte {at} of {size} bytes cannot inflate to the declared "
                               f"{expected} bytes (deflate expands at most {ZIP_MAX_RATIO}:1)")
        out = np.empty(expected, np.uint8)  # pages are only touched as they are written
        _inflate(bytes(src.buffer[at:at + size]), out, at)
        return out
    from numcodecs import Blosc  # c-blosc 1 frames, as NanoVDB writes them (numcodecs comes with zarr)

    out = np.empty(expected, np.uint8)  # the frames' headers add up to exactly this (checked in _chunks)
    frame_codec = Blosc()
    pos = 0
    for at, size, want in src.chunks:
        # straight into the frame's slice of the grid: `want` bytes, what its header declares (_chunks)
        try:
            frame_codec.decode(src.buffer[at:at + size], out=out[pos:pos + want])
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
        _need(buf, pos + 8, size, f"compressed grid {name!r}")
        if codec == "zip":
            return [(pos + 8, size, grid_size)]
        nbytes = _blosc_frame_size(buf, pos + 8, size, residual)
        chunks.append((pos + 8, size, nbytes))
        pos += 8 + size
        residual -= nbytes
        if residual == 0:
            return chunks


def _segments(buf: np.ndarray, file_name: str | None) -> list[tuple[dict[str, Any], _GridSource]]:
    """(file metadata, source) of every grid in a file buffer, segment after segment."""
    out: list[tuple[dict[str, Any], _GridSource]] = []
    pos = 0
    while pos < len(buf):
        magic, version, count, codec_id = _unpack(buf, pos, "<QIHH", "file header")
        if magic not in fmt.FILE_MAGICS:
            raise NanoVDBError(f"expected a NanoVDB file header at byte {pos}, found magic 0x{magic:016x}")
        major, minor, patch = fmt.version_parts(version)
        if major != fmt.MAJOR_VERSION:
            raise NanoVDBError(f"unsupported NanoVDB file version {major}.{minor}.{patch} at byte {pos + 8} "
                               f"(vdbflow reads major version 32)")
        codec = fmt.CODECS.get(codec_id)
        if codec is None:
            raise NanoVDBError(f"unknown codec {codec_id} at byte {pos + 14} (expected 0 none, 1 zip, 2 blosc)")
        if count == 0:
            raise NanoVDBError(f"file segment at byte {pos} holds no grids (grid count at byte {pos + 12})")
        meta_pos = pos + fmt.FILE_HEADER_SIZE
        metas = []
        for _ in range(count):
            gsize, fsize, _key, voxels, gtype, gclass = _unpack(buf, meta_pos, "<QQQQII", "grid metadata")
            name_size = _unpack(buf, meta_pos + 136, "<I", "grid metadata")[0]
            if gsize > MAX_GRID_BYTES or fsize > MAX_GRID_BYTES or name_size > 1 << 20:
                raise NanoVDBError(f"grid metadata at byte {meta_pos} gives absurd sizes "
                                   f"(grid {gsize}, file {fsize}, name {name_size} bytes)")
            if gsize < fmt.GRID_SIZE + fmt.TREE_SIZE:
                raise NanoVDBError(f"grid metadata at byte {meta_pos} gives a grid size of {gsize} bytes, expected "
                                   f"at least {fmt.GRID_SIZE + fmt.TREE_SIZE}")
            _need(buf, meta_pos + fmt.FILE_METADATA_SIZE, name_size, "grid name")
            name = bytes(buf[meta_pos + fmt.FILE_METADATA_SIZE: meta_pos + fmt.FILE_METADATA_SIZE + name_size])
            metas.append(dict(grid_size=gsize, file_size=fsize, name=name.split(b"\0", 1)[0].decode("utf-8", "replace"),
                              codec=codec, version=f"{major}.{minor}.{patch}", meta_offset=meta_pos))
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
    if len(buf) < 8:
        raise NanoVDBError(f"expected a NanoVDB file header or grid at byte 0, but the buffer ends at byte {len(buf)}")
    magic = struct.unpack_from("<Q", buf, 0)[0]
    if magic == fmt.MAGIC_GRID or (magic == fmt.MAGIC_NUMBER and _looks_like_grid(buf)):
        return _raw_grids(buf, name)
    return _segments(buf, name)


def _looks_like_grid(buf: np.ndarray) -> bool:
    """A buffer starting with the legacy magic is a raw grid when its version field (at byte 16)
    reads as major 32 and bytes 8..12 do not (a file keeps its version at byte 8)."""
    if len(buf) < fmt.GRID_SIZE:
        return False
    file_version = struct.unpack_from("<I", buf, 8)[0]
    grid_version = struct.unpack_from("<I", buf, 16)[0]
    return fmt.version_parts(grid_version)[0] == fmt.MAJOR_VERSION and \
        fmt.version_parts(file_version)[0] != fmt.MAJOR_VERSION


def _raw_grids(buf: np.ndarray, name: str | None) -> list[tuple[dict[str, Any], _GridSource]]:
    """Grid buffers back to back, without a file header (as NanoVDB keeps them in memory)."""
    out = []
    pos = 0
    while pos < len(buf):
        h = _grid_header(buf, pos)
        major, minor, patch = fmt.version_parts(h["version"])
        out.append((dict(grid_size=h["grid_size"], name=h["name"], codec="none", version=f"{major}.{minor}.{patch}"),
                    _GridSource(buf, pos, "none", name)))
        pos += h["grid_size"]
    return out


def _grid_buffer(meta: dict[str, Any], src: _GridSource) -> tuple[np.ndarray, int]:
    if src.codec == "none":  # the grid may not reach past the bytes its metadata gives it
        return src.buffer[:src.offset + meta["grid_size"]], src.offset
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
        if end - after < fmt.GRID_SIZE + fmt.TREE_SIZE or \
                struct.unpack_from("<Q", buf, after)[0] not in fmt.GRID_MAGICS:
            raise NanoVDBError(
                f"the grid at byte {starts[-1]}{where} ends at byte {after}, but its file metadata gives "
                f"{meta['grid_size']} bytes (to byte {end}) and no further grid starts there")
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
        if grid is None or (isinstance(grid, str) and g.meta["name"] == grid) or \
                (isinstance(grid, (int, np.integer)) and not isinstance(grid, bool) and n == grid):
            return g
        seen.append(g.meta["name"])
    if isinstance(grid, (int, np.integer)):
        raise NanoVDBError(f"expected a grid index in [0, {len(seen)}), got {grid}")
    raise NanoVDBError(f"expected one of the grid names {seen}, got {grid!r}")


def open_grid(data: str | os.PathLike | bytes | np.ndarray, grid: int | str | None = None, *,
              bbox: Any = None, leaves: Any = None, checksum: bool = True) -> Volume | Topology:
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
        bbox = _unpack(buf, h["tree"] + h["node_offsets"][3], "<6i", "root bbox")
        wb = h["world_bbox"]
        infos.append(GridInfo(
            index=n, name=h["name"], grid_type=fmt.GRID_TYPE_NAMES.get(h["grid_type"], str(h["grid_type"])),
            grid_class=fmt.GRID_CLASSES.get(h["grid_class"], str(h["grid_class"])),
            leaf_count=h["node_counts"][0], lower_count=h["node_counts"][1], upper_count=h["node_counts"][2],
            tile_counts=tuple(h["tile_counts"]), active_voxel_count=h["voxel_count"],
            index_bbox=(tuple(bbox[:3]), tuple(bbox[3:])), world_bbox=(tuple(wb[:3]), tuple(wb[3:])),
            index_to_world=h["index_to_world"], voxel_size=tuple(h["voxel_size"]), codec=meta["codec"],
            version=meta["version"], grid_size=h["grid_size"], checksum=h["checksum"],
        ))
    return infos


# ------------------------------------------------------------------------------------------------
# writing
_FLAG_HAS_BBOX, _FLAG_BREADTH_FIRST = 2, 32
_CLASS_UNKNOWN, _CLASS_INDEX = 0, 8


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


def _encode_grid(obj: Volume | Topology, name: str, grid_index: int, grid_count: int) -> bytes:
    """One NanoVDB grid buffer (value grid for a Volume, OnIndex grid for a Topology)."""
    if isinstance(obj, Topology):
        topo, layout = obj, fmt.LAYOUTS[fmt.GRID_TYPE_ON_INDEX]
        background = np.zeros((1,), np.uint64)
        leaf_values = None
        tile_values = (topo.tile_value_index + 1 if topo.tile_value_index is not None
                       else np.zeros(topo.tile_count, np.int64)).astype(np.uint64).reshape(-1, 1)
        value_count = topo.value_count + 1
    else:
        vol = obj
        gtype = fmt.GRID_TYPE_OF_VALUE_TYPE.get(vol.value_type.name)
        if gtype is None:
            raise NanoVDBError(f"value type {vol.value_type.name} has no NanoVDB grid type "
                               f"(NanoVDB value grids hold scalars, vec3 and vec4)")
        topo, layout = vol.topology, fmt.LAYOUTS[gtype]
        background = vol.background_values
        tile_values = vol.tile_values
        if vol.index_layout:  # spread the active values over whole leaves, background elsewhere
            leaf_values = np.empty((vol.leaf_count * 512, vol.components), vol.dtype)
            leaf_values[:] = background
            bits = tree.bits_from_masks(topo.masks).ravel()
            leaf_values[np.nonzero(bits)[0]] = vol.value_rows()[:vol.active_voxel_count]
        else:
            leaf_values = vol.value_rows()
        value_count = 0
    raw_name = name.encode("utf-8")
    if len(raw_name) >= fmt.GRID_NAME_SIZE:
        raise NanoVDBError(f"grid name of {len(raw_name)} bytes is too long (at most {fmt.GRID_NAME_SIZE - 1})")

    leaf_origins = topo.leaf_origins.astype(np.int64)
    t_origins = topo.tile_origins.astype(np.int64)
    t_sizes = topo.tile_sizes
    # upper nodes: the 4096-blocks of leaves, 8^3 and 128^3 tiles; root tiles: the 4096^3 tiles
    t8, t128, t4096 = (t_sizes == 8), (t_sizes == 128), (t_sizes == 4096)
    upper_keys_all = np.concatenate([leaf_origins, t_origins[t8 | t128]]) >> 12
    upper_keys = np.unique(upper_keys_all, axis=0) if len(upper_keys_all) else np.zeros((0, 3), np.int64)
    lower_keys_all = np.concatenate([leaf_origins, t_origins[t8]]) >> 7
    lower_keys = np.unique(lower_keys_all, axis=0) if len(lower_keys_all) else np.zeros((0, 3), np.int64)
    # tree order for internal nodes: by parent, then child index
    u_order = np.lexsort((upper_keys[:, 2], upper_keys[:, 1], upper_keys[:, 0]))
    upper_keys = upper_keys[u_order]
    lower_origin = lower_keys << 7
    lower_parent = _find_rows(upper_keys, lower_keys >> 5)
    l_order = np.lexsort((_child_index(lower_origin, 5, 7), lower_parent))
    lower_keys, lower_origin, lower_parent = lower_keys[l_order], lower_origin[l_order], lower_parent[l_order]
    leaf_parent = _find_rows(lower_keys, leaf_origins >> 7)
    # leaves are already in tree order (Topology keeps them so)

    n_up, n_low, n_leaf = len(upper_keys), len(lower_keys), len(leaf_origins)
    root_tiles = t_origins[t4096]
    n_root = n_up + len(root_tiles)
    off_root = fmt.GRID_SIZE + fmt.TREE_SIZE
    off_upper = off_root + layout.root_size + n_root * layout.root_tile_size
    off_lower = off_upper + n_up * layout.upper_size
    off_leaf = off_lower + n_low * layout.lower_size
    blind = tuple(r for r in getattr(obj, "blind_data", ()) or () if r.name != METADATA_NAME)
    blind += tuple(r for r in (_metadata_record(obj),) if r is not None)
    off_blind = off_leaf + n_leaf * layout.leaf_size
    blind_at, pos = [], off_blind + len(blind) * fmt.BLIND_META_SIZE
    for record in blind:
        pos = (pos + 31) // 32 * 32
        blind_at.append(pos)
        pos += len(record.data)
    size = (pos + 31) // 32 * 32
    buf = np.zeros(size, np.uint8)
    for b, record in enumerate(blind):
        at = off_blind + b * fmt.BLIND_META_SIZE
        _put(buf, at, "<qQIIII", blind_at[b] - at, record.value_count, record.value_size, record.semantic,
             record.data_class, record.data_type)
        name_bytes = record.name.encode("utf-8")[:255]
        buf[at + 32: at + 32 + len(name_bytes)] = np.frombuffer(name_bytes, np.uint8)
        buf[blind_at[b]: blind_at[b] + len(record.data)] = np.frombuffer(record.data, np.uint8)
    bg_bytes = _value_bytes(background, layout)[0]
    tile_bytes = _value_bytes(tile_values, layout) if len(tile_values) else np.zeros((0, layout.value_size), np.uint8)

    # leaves
    leaves = buf[off_leaf:off_blind].reshape(n_leaf, layout.leaf_size)
    bb_min, bb_dif = _leaf_bboxes(leaf_origins, topo.masks)
    leaves[:, 0:12] = bb_min.astype("<i4").view(np.uint8).reshape(n_leaf, 12)
    leaves[:, 12:15] = bb_dif
    leaves[:, 15] = 0  # flags
    m = fmt.LEAF_OFF_VALUE_MASK
    leaves[:, m:m + 64] = np.ascontiguousarray(topo.masks.astype("<u8")).view(np.uint8).reshape(n_leaf, 64)
    if layout.is_index:
        at = fmt.INDEX_LEAF_OFF_OFFSET
        leaves[:, at:at + 8] = (topo.leaf_offset + 1).astype("<u8").view(np.uint8).reshape(n_leaf, 8)
        prefix = topo.prefix.astype(np.uint64)
        packed = np.zeros(n_leaf, np.uint64)
        for w in range(1, 8):
            packed |= prefix[:, w] << np.uint64(9 * (w - 1))
        at = fmt.INDEX_LEAF_OFF_PREFIX
        leaves[:, at:at + 8] = packed.astype("<u8").view(np.uint8).reshape(n_leaf, 8)
    else:
        table = _value_bytes(leaf_values, layout).reshape(n_leaf, 512 * layout.value_size)
        leaves[:, layout.leaf_off_table: layout.leaf_off_table + 512 * layout.value_size] = table

    # lower nodes
    lowers = buf[off_lower:off_leaf].reshape(n_low, layout.lower_size)
    ltable = lowers[:, layout.lower_off_table: layout.lower_off_table + 4096 * layout.table_stride]
    ltable = ltable.reshape(n_low, 4096, layout.table_stride)
    ltable[:, :, :layout.value_size] = bg_bytes
    lowers[:, 0:12] = lower_origin.astype("<i4").view(np.uint8).reshape(n_low, 12)
    lowers[:, 12:24] = (lower_origin + 127).astype("<i4").view(np.uint8).reshape(n_low, 12)
    child = _child_index(leaf_origins, 4, 3)
    leaf_addr = off_leaf + np.arange(n_leaf, dtype=np.int64) * layout.leaf_size
    lower_addr = off_lower + np.arange(n_low, dtype=np.int64) * layout.lower_size
    rel = (leaf_addr - lower_addr[leaf_parent]).astype("<i8")
    ltable[leaf_parent, child, :8] = rel.view(np.uint8).reshape(-1, 8)
    cmask = np.zeros((n_low, 4096), bool)
    cmask[leaf_parent, child] = True
    sel = np.nonzero(t8)[0]
    tparent = _find_rows(lower_keys, t_origins[sel] >> 7)
    tchild = _child_index(t_origins[sel], 4, 3)
    ltable[tparent, tchild, :layout.value_size] = tile_bytes[sel]
    vmask = np.zeros((n_low, 4096), bool)
    vmask[tparent, tchild] = True
    lowers[:, fmt.LOWER_OFF_VALUE_MASK: fmt.LOWER_OFF_VALUE_MASK + 512] = np.packbits(vmask, axis=1, bitorder="little")
    lowers[:, fmt.LOWER_OFF_CHILD_MASK: fmt.LOWER_OFF_CHILD_MASK + 512] = np.packbits(cmask, axis=1, bitorder="little")

    # upper nodes
    upper_origin = upper_keys << 12
    upper_addr = off_upper + np.arange(n_up, dtype=np.int64) * layout.upper_size
    sel128 = np.nonzero(t128)[0]
    t128_parent = _find_rows(upper_keys, t_origins[sel128] >> 12)
    for u in range(n_up):
        node = buf[upper_addr[u]: upper_addr[u] + layout.upper_size]
        node[0:12] = upper_origin[u].astype("<i4").view(np.uint8)
        node[12:24] = (upper_origin[u] + 4095).astype("<i4").view(np.uint8)
        table = node[layout.upper_off_table: layout.upper_off_table + 32768 * layout.table_stride]
        table = table.reshape(32768, layout.table_stride)
        table[:, :layout.value_size] = bg_bytes
        kids = np.nonzero(lower_parent == u)[0]
        kid_index = _child_index(lower_origin[kids], 5, 7)
        table[kid_index, :8] = (lower_addr[kids] - upper_addr[u]).astype("<i8").view(np.uint8).reshape(-1, 8)
        mine = sel128[t128_parent == u]
        tile_index = _child_index(t_origins[mine], 5, 7)
        table[tile_index, :layout.value_size] = tile_bytes[mine]
        cm = np.zeros(32768, bool)
        cm[kid_index] = True
        vm = np.zeros(32768, bool)
        vm[tile_index] = True
        node[fmt.UPPER_OFF_VALUE_MASK: fmt.UPPER_OFF_VALUE_MASK + 4096] = np.packbits(vm, bitorder="little")
        node[fmt.UPPER_OFF_CHILD_MASK: fmt.UPPER_OFF_CHILD_MASK + 4096] = np.packbits(cm, bitorder="little")

    # root: children first (by key order of their origins), then 4096^3 tiles
    box = topo.index_bbox
    lo, hi = (box[0], box[1]) if box is not None else (np.zeros(3, np.int64), np.full(3, -1, np.int64))
    _put(buf, off_root, "<6iI", *[int(x) for x in lo], *[int(x) for x in hi], n_root)
    buf[off_root + layout.root_off_background: off_root + layout.root_off_background + layout.value_size] = bg_bytes
    entries = [(o, upper_addr[u] - off_root, 0, bg_bytes) for u, o in enumerate(upper_origin)]
    sel4096 = np.nonzero(t4096)[0]
    entries += [(t_origins[t], 0, 1, tile_bytes[t]) for t in sel4096]
    for e, (origin, child_off, state, value) in enumerate(entries):
        at = off_root + layout.root_size + e * layout.root_tile_size
        u = np.asarray(origin, np.int64).astype(np.int32).view(np.uint32).astype(np.uint64) >> np.uint64(12)
        key = int(u[2]) | (int(u[1]) << 21) | (int(u[0]) << 42)
        _put(buf, at, "<QqI", key, int(child_off), state)
        buf[at + layout.root_tile_off_value: at + layout.root_tile_off_value + layout.value_size] = value

    # tree and grid headers
    t = fmt.GRID_SIZE
    _put(buf, t, "<4Q3I3IQ", off_leaf - t, off_lower - t, off_upper - t, off_root - t, n_leaf, n_low, n_up,
         int(t8.sum()), int(t128.sum()), int(t4096.sum()), topo.active_voxel_count)
    M = topo.transform.index_to_world
    Minv = topo.transform.world_to_index
    _put(buf, 0, "<QQIIIIQ", fmt.MAGIC_GRID, _EMPTY_CHECKSUM, fmt.WRITE_VERSION, _FLAG_HAS_BBOX | _FLAG_BREADTH_FIRST,
         grid_index, grid_count, size)
    buf[fmt.GRID_OFF_NAME: fmt.GRID_OFF_NAME + len(raw_name)] = np.frombuffer(raw_name, np.uint8)
    m = fmt.GRID_OFF_MAP
    _put(buf, m + fmt.MAP_OFF_MATF, "<9f", *M[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_INVMATF, "<9f", *Minv[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_VECF, "<3f", *M[:3, 3])
    _put(buf, m + fmt.MAP_OFF_TAPERF, "<f", 1.0)
    _put(buf, m + fmt.MAP_OFF_MATD, "<9d", *M[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_INVMATD, "<9d", *Minv[:3, :3].ravel())
    _put(buf, m + fmt.MAP_OFF_VECD, "<3d", *M[:3, 3])
    _put(buf, m + fmt.MAP_OFF_TAPERD, "<d", 1.0)
    wb = topo.world_bbox if box is not None else np.zeros((2, 3))
    _put(buf, fmt.GRID_OFF_WORLD_BBOX, "<6d", *wb.ravel())
    _put(buf, fmt.GRID_OFF_VOXEL_SIZE, "<3d", *topo.voxel_size)
    class_code = {name: code for code, name in fmt.GRID_CLASSES.items()}.get(getattr(obj, "grid_class", None))
    if class_code is None or class_code == _CLASS_UNKNOWN:
        class_code = _CLASS_INDEX if layout.is_index else _CLASS_UNKNOWN
    _put(buf, fmt.GRID_OFF_CLASS, "<II", class_code, layout.grid_type)
    _put(buf, fmt.GRID_OFF_BLIND_OFFSET, "<qI", off_blind if blind else 0, len(blind))
    _put(buf, fmt.GRID_OFF_DATA0, "<IQQ", 0, value_count, 0)
    # the full checksum by the 32.6.0 rules: head over the grid, tree, root and root tiles, tail over
    # the CRC32s (u32) of every node; a grid without nodes has no tail
    head = _crc(buf, 16, off_upper)
    arrays = [(off_upper, n_up, layout.upper_size), (off_lower, n_low, layout.lower_size),
              (off_leaf, n_leaf, layout.leaf_size)]
    tail = zlib.crc32(_node_crcs(buf, arrays).astype("<u4").tobytes()) & 0xFFFFFFFF if n_up else fmt.EMPTY_CRC32
    _put(buf, fmt.GRID_OFF_CHECKSUM, "<II", head, tail)
    return buf.tobytes()


def _find_rows(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Position in ``table`` (n, 3) of each row of ``query`` (m, 3); every query row must be there."""
    if len(query) == 0:
        return np.zeros(0, np.int64)
    rows = np.concatenate([table, query]).astype(np.int64)
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    position = np.full(int(inverse.max()) + 1, -1, np.int64)
    position[inverse[:len(table)]] = np.arange(len(table))
    found = position[inverse[len(table):]]
    assert np.all(found >= 0), "a node's parent is missing"
    return found


def save(path: str | os.PathLike, grids: dict[str, Volume | Topology], codec: str = "none") -> None:
    """Write grids to one .nvdb file: value grids for Volumes, OnIndex grids for Topologies.

    Volumes in the index layout are written with their values spread over whole leaves
    (background elsewhere).  Units, length units and component names travel in a
    ``vdbflow.metadata`` blind data record (plain bytes to other NanoVDB tools), beside the
    blind data records a volume read from a file brought along.  The file is written under a
    temporary name and then renamed, so a reader never sees it half written.

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
            frames = [bytes(frame_codec.encode(words[at:at + step])) for at in range(0, len(words), step)]
            payload = b"".join(struct.pack("<Q", len(f)) + f for f in frames)
        else:
            payload = grid
        h = _grid_header(np.frombuffer(grid, np.uint8), 0)
        raw_name = name.encode("utf-8") + b"\0"
        topo = obj if isinstance(obj, Topology) else obj.topology
        box = topo.index_bbox if topo.index_bbox is not None else np.zeros((2, 3), np.int64)
        meta = struct.pack("<QQQQII6d6i3dI4I3IHHI", len(grid), len(payload), 0, h["voxel_count"], h["grid_type"],
                           h["grid_class"], *h["world_bbox"], *[int(x) for x in box.ravel()], *h["voxel_size"],
                           len(raw_name), *h["node_counts"], 1, *h["tile_counts"],
                           fmt.CODEC_IDS[codec], 0, fmt.WRITE_VERSION)
        metas.append(meta + raw_name)
        payloads.append(payload)
    header = struct.pack("<QIHH", fmt.MAGIC_FILE, fmt.WRITE_VERSION, len(grids), fmt.CODEC_IDS[codec])
    tmp = f"{os.fspath(path)}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(header)
        for meta in metas:
            fh.write(meta)
        for payload in payloads:
            fh.write(payload)
    os.replace(tmp, path)
