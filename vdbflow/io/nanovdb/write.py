"""Writing NanoVDB (.nvdb) files: the encoders of a grid's parts (leaves, lower and upper nodes, root,
headers, blind data, checksum), one grid buffer from them, and the public :func:`save`."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError
from vdbflow.io.atomic import atomic_file
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.checksum import node_crcs, span_crc
from vdbflow.io.nanovdb.codec import BLOSC_MAX_CHUNK
from vdbflow.io.nanovdb.header import EMPTY_CHECKSUM, grid_header
from vdbflow.io.nanovdb.metadata import METADATA_NAME, metadata_record
from vdbflow.io.nanovdb.plan import (
    GridContents,
    GridOffsets,
    NodePlan,
    child_index,
    find_rows,
    grid_contents,
    plan_nodes,
    plan_offsets,
)
from vdbflow.io.nanovdb.records import BlindData


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


def _blind_records(obj: Volume | Topology) -> tuple[BlindData, ...]:
    """The blind data to write: ``obj``'s records, then its ``vdbflow.metadata`` record made afresh."""
    blind = tuple(r for r in getattr(obj, "blind_data", ()) or () if r.name != METADATA_NAME)
    return blind + tuple(r for r in (metadata_record(obj),) if r is not None)


def _write_blind_data(buf: np.ndarray, off: GridOffsets, blind: tuple[BlindData, ...]) -> None:
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


def _write_leaves(buf: np.ndarray, off: GridOffsets, plan: NodePlan, contents: GridContents) -> None:
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
    off: GridOffsets,
    layout: fmt.GridLayout,
    plan: NodePlan,
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
    child = child_index(plan.leaf_origins, fmt.LOWER_DIM_LOG2, fmt.LEAF_LOG2)
    leaf_addr = off.leaf + np.arange(n_leaf, dtype=np.int64) * layout.leaf_size
    lower_addr = off.lower + np.arange(n_low, dtype=np.int64) * layout.lower_size
    rel = (leaf_addr - lower_addr[plan.leaf_parent]).astype("<i8")
    ltable[plan.leaf_parent, child, : fmt.TABLE_CHILD_SIZE] = rel.view(np.uint8).reshape(-1, fmt.TABLE_CHILD_SIZE)
    cmask = np.zeros((n_low, fmt.LOWER_CHILDREN), bool)
    cmask[plan.leaf_parent, child] = True
    sel = np.nonzero(plan.lower_tiles)[0]
    tparent = find_rows(plan.lower_keys, plan.tile_origins[sel] >> fmt.LOWER_LOG2)
    tchild = child_index(plan.tile_origins[sel], fmt.LOWER_DIM_LOG2, fmt.LEAF_LOG2)
    ltable[tparent, tchild, : layout.value_size] = tile_bytes[sel]
    vmask = np.zeros((n_low, fmt.LOWER_CHILDREN), bool)
    vmask[tparent, tchild] = True
    at = fmt.LOWER_OFF_VALUE_MASK
    lowers[:, at : at + fmt.LOWER_MASK_SIZE] = np.packbits(vmask, axis=1, bitorder="little")
    at = fmt.LOWER_OFF_CHILD_MASK
    lowers[:, at : at + fmt.LOWER_MASK_SIZE] = np.packbits(cmask, axis=1, bitorder="little")


def _write_upper_nodes(
    buf: np.ndarray,
    off: GridOffsets,
    layout: fmt.GridLayout,
    plan: NodePlan,
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
    t128_parent = find_rows(plan.upper_keys, plan.tile_origins[sel128] >> fmt.UPPER_LOG2)
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
        kid_index = child_index(lower_origin[kids], fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
        table[kid_index, : fmt.TABLE_CHILD_SIZE] = (
            (lower_addr[kids] - upper_addr[u]).astype("<i8").view(np.uint8).reshape(-1, fmt.TABLE_CHILD_SIZE)
        )
        mine = sel128[t128_parent == u]
        tile_index = child_index(plan.tile_origins[mine], fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
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
    off: GridOffsets,
    layout: fmt.GridLayout,
    plan: NodePlan,
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
    off: GridOffsets,
    plan: NodePlan,
    contents: GridContents,
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
        EMPTY_CHECKSUM,
        fmt.WRITE_VERSION,
        fmt.GRID_FLAG_HAS_BBOX | fmt.GRID_FLAG_BREADTH_FIRST,
        grid_index,
        grid_count,
        off.size,
    )
    buf[fmt.GRID_OFF_NAME : fmt.GRID_OFF_NAME + len(raw_name)] = np.frombuffer(raw_name, np.uint8)
    big = float(max(np.abs(M).max(), np.abs(Minv).max()))
    if big > float(np.finfo(np.float32).max):  # the float copy of the map could not hold it
        raise NanoVDBError(
            f"expected an index-to-world matrix and inverse within the float32 range of NanoVDB's float map "
            f"(|entries| <= {np.finfo(np.float32).max:.4g}), got an entry of magnitude {big:.4g} for grid {raw_name!r}"
        )
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


def _write_checksum(buf: np.ndarray, off: GridOffsets, layout: fmt.GridLayout, plan: NodePlan) -> None:
    """The full checksum by the 32.6.0 rules: head over the grid, tree, root and root tiles, tail over
    the CRC32s (u32) of every node; a grid without nodes has no tail."""
    n_leaf, n_low, n_up = plan.counts
    head = span_crc(buf, fmt.CHECKSUM_HEAD_START, off.upper)
    arrays = [
        (off.upper, n_up, layout.upper_size),
        (off.lower, n_low, layout.lower_size),
        (off.leaf, n_leaf, layout.leaf_size),
    ]
    tail = zlib.crc32(node_crcs(buf, arrays).astype("<u4").tobytes()) & 0xFFFFFFFF if n_up else fmt.EMPTY_CRC32
    _put(buf, fmt.GRID_OFF_CHECKSUM, "<II", head, tail)


def _encode_grid(obj: Volume | Topology, name: str, grid_index: int, grid_count: int) -> bytes:
    """One NanoVDB grid buffer (value grid for a Volume, OnIndex grid for a Topology): the nodes are
    planned, the bytes laid out, then written leaves first and the headers and checksum last."""
    contents = grid_contents(obj)
    raw_name = name.encode("utf-8")
    if len(raw_name) >= fmt.GRID_NAME_SIZE:
        raise NanoVDBError(f"grid name of {len(raw_name)} bytes is too long (at most {fmt.GRID_NAME_SIZE - 1})")
    layout = contents.layout
    plan = plan_nodes(contents.topo)
    blind = _blind_records(obj)
    off = plan_offsets(layout, plan, blind)
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
        h = grid_header(np.frombuffer(grid, np.uint8), 0)
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
