"""One grid's bytes decoded into a :class:`Volume` (value grids) or a :class:`Topology` (index,
Mask and Boolean grids), level by level: the root's table, the upper nodes, the lower nodes (their
tiles gathered on the way), then the leaves; with its checksum verified, its blind data read and
its ``vdbflow.metadata`` record applied."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.transform import Transform
from vdbflow.core.value_types import value_type_for
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import ChecksumWarning, NanoVDBError, VolumeError
from vdbflow.io.mapped import release, rows_per_span
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.checksum import checksum_mismatch, checksum_mode
from vdbflow.io.nanovdb.header import MAX_BLIND_COUNT, MAX_GRID_BYTES, MAX_VALUE_COUNT, grid_header, layout_of, unpack
from vdbflow.io.nanovdb.metadata import apply_metadata
from vdbflow.io.nanovdb.nodes import (
    child_positions,
    column,
    fpn_leaf_addresses,
    kept_tiles,
    key_to_origin,
    leaf_floats,
    mask_bits,
    node_index,
    node_index_among,
    node_rows,
    overlaps,
    values_of,
)
from vdbflow.io.nanovdb.records import BlindData
from vdbflow.io.selection import leaf_indices


def read_blind_data(buf: np.ndarray, base: int, h: dict[str, Any]) -> tuple[BlindData, ...]:
    """The blind data records of the grid at byte ``base`` of ``buf`` (header ``h``), each checked."""
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
        data_offset, value_count, value_size, semantic, data_class, data_type = unpack(
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


def decode_grid(
    buf: np.ndarray,
    base: int,
    bbox: np.ndarray | None = None,
    leaf_subset: np.ndarray | None = None,
    checksum: bool | str = True,
    position: tuple[int, int] = (0, 1),
) -> tuple[dict[str, Any], Any]:
    """Decode the grid at ``base``.  Its checksum is checked first (the tail only when the whole grid
    is read, since it covers every node): with ``checksum="strict"`` a mismatch raises, with True it
    is a :class:`ChecksumWarning` once the grid has passed the structural checks, False skips it,
    ``"head"`` checks the head half only (no value byte read for it)."""
    mode = checksum_mode(checksum)
    problem = None
    if mode != "off":
        h = grid_header(buf, base)
        whole = bbox is None and leaf_subset is None and mode != "head"
        problem = checksum_mismatch(buf, base, h, layout_of(h, base), whole, position)
        if problem and mode == "strict":
            raise NanoVDBError(f"{problem} (checksum=True reads it with a ChecksumWarning, checksum=False unchecked)")
    try:
        h, obj = _decode_nodes(buf, base, bbox, leaf_subset)
    except VolumeError as err:  # nodes that decode but do not form a valid tree
        raise NanoVDBError(f"the grid at byte {base} does not form a valid volume: {err}") from None
    obj.grid_class = fmt.GRID_CLASSES.get(h["grid_class"], "unknown")
    obj.blind_data = apply_metadata(obj, read_blind_data(buf, base, h), base)
    if problem:
        warnings.warn(
            f"{problem}; the grid was read after its structural checks (checksum='strict' refuses it)",
            ChecksumWarning,
            stacklevel=4,
        )
    return h, obj


@dataclass
class _TileParts:
    """Tiles gathered level by level (root, upper nodes, lower nodes): for each, its origin, size,
    value, the byte address of that value (for messages about it) and whether it is active."""

    origins: list[np.ndarray] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    at: list[np.ndarray] = field(default_factory=list)
    active: list[np.ndarray] = field(default_factory=list)

    def add(self, origins: np.ndarray, size: int, values: np.ndarray, at: np.ndarray, active: np.ndarray) -> None:
        self.origins.append(origins)
        self.sizes.append(np.full(len(values), size))
        self.values.append(values)
        self.at.append(at)
        self.active.append(np.asarray(active, bool))

    def within(self, bbox: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """Origins (int32), sizes (int32), values, value addresses and active states of the tiles that meet
        ``bbox``."""
        origins = np.concatenate(self.origins).astype(np.int32)
        sizes = np.concatenate(self.sizes).astype(np.int32)
        values, at, active = np.concatenate(self.values), np.concatenate(self.at), np.concatenate(self.active)
        near = np.ones(len(origins), bool)
        for size in tree.TILE_SIZES:
            of_size = sizes == size
            near[of_size] = overlaps(origins[of_size], size, bbox)
        return origins[near], sizes[near], values[near], at[near], active[near]


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
        """Bytes [start, stop) of every leaf read, copied into one contiguous array: only the rows of the
        leaves read are touched, span by span, and a mapped file's pages are given back after each span."""
        out = np.empty((len(self.index), stop - start), np.uint8)
        step = rows_per_span(int(self.addrs[1] - self.addrs[0]) if len(self.addrs) > 1 else 1)
        for first in range(0, len(self.index), step):
            at = self.addrs[self.index[first : first + step]]
            if self.nodes is None:
                out[first : first + len(at)] = self.buf[at[:, None] + np.arange(start, stop)]
            else:
                out[first : first + len(at)] = self.nodes[self.index[first : first + step], start:stop]
            release(self.buf, int(at.min()), int(at.max()) + stop)
        return out

    def values(self, layout: fmt.GridLayout) -> np.ndarray:
        """(leaves * 512, C) copy of the values of the leaves read (fixed-size leaves only), gathered span
        by span, a mapped file's pages given back after each."""
        C, item = layout.components, layout.dtype.itemsize
        table = layout.leaf_off_table
        out = np.empty((len(self.index) * tree.LEAF_VOXELS, C), layout.dtype)
        assert self.nodes is not None
        step = rows_per_span(layout.leaf_size)
        width = tree.LEAF_VOXELS * C * item
        for first in range(0, len(self.index), step):
            rows = self.index[first : first + step]
            raw = self.nodes[rows, table : table + width]
            out[first * tree.LEAF_VOXELS : (first + len(rows)) * tree.LEAF_VOXELS] = (
                np.ascontiguousarray(raw).view(layout.dtype).reshape(-1, C)
            )
            at = self.addrs[rows]
            release(self.buf, int(at.min()), int(at.max()) + layout.leaf_size)
        out.setflags(write=False)
        return out


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
    table_size = unpack(gbuf, root + fmt.ROOT_OFF_TABLE_SIZE, "<I", "root table size")[0]
    entries = node_rows(gbuf, root + layout.root_size, table_size, layout.root_tile_size, "root tile")
    bg_at = root + layout.root_off_background
    bg_raw = gbuf[bg_at : bg_at + layout.value_size]
    if len(bg_raw) != layout.value_size:
        raise NanoVDBError(f"the root background at byte {bg_at} lies past the grid's end (byte {len(gbuf)})")
    values = entries[:, layout.root_tile_off_value : layout.root_tile_off_value + layout.value_size]
    return _Root(
        address=root,
        background=values_of(bg_raw[None], layout)[0],
        origins=key_to_origin(column(entries, fmt.ROOT_TILE_OFF_KEY, "<u8")),
        child=column(entries, fmt.ROOT_TILE_OFF_CHILD, "<i8"),
        values=values_of(values, layout),
        active=column(entries, fmt.ROOT_TILE_OFF_STATE, "<u4") != 0,
        entry_at=root + layout.root_size + np.arange(table_size, dtype=np.int64) * layout.root_tile_size,
    )


def _root_tiles(root: _Root, layout: fmt.GridLayout, tiles: _TileParts) -> None:
    """Adds the root's tiles (the entries without a child) that are kept to ``tiles``."""
    keep = (root.child == 0) & kept_tiles(root.values, root.active, layout, root.background)
    at = root.entry_at[keep] + layout.root_tile_off_value
    tiles.add(root.origins[keep], fmt.UPPER_DIM, root.values[keep], at, root.active[keep])


def _joined(parts: list[np.ndarray], shape: tuple[int, ...] = (0,)) -> np.ndarray:
    """The parts concatenated; an empty int64 array of ``shape`` when there are none."""
    return np.concatenate(parts) if parts else np.zeros(shape, np.int64)


def _upper_index(h: dict[str, Any], layout: Any, root: Any) -> np.ndarray:
    """The upper-node index of each root tile with a child (checked against the upper node array)."""
    t, start, count = h["tree"], h["tree"] + h["node_offsets"][2], h["node_counts"][2]
    linked = root.child != 0
    return node_index(
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


def _read_upper_nodes(
    gbuf: np.ndarray, h: dict[str, Any], layout: fmt.GridLayout, root: _Root, bbox: np.ndarray | None, tiles: _TileParts
) -> _ChildRefs:
    """The upper nodes the root points to that meet ``bbox``, one by one: their kept tiles go to
    ``tiles``; returns the lower nodes they point to."""
    start, count = h["tree"] + h["node_offsets"][2], h["node_counts"][2]
    uppers = node_rows(gbuf, start, count, layout.upper_size, "upper node")
    linked = root.child != 0
    index = _upper_index(h, layout, root)
    origins = root.origins[linked]
    near = overlaps(origins, fmt.UPPER_DIM, bbox)
    parents, offsets, fields, child_origins = [], [], [], []
    stride, table_at = layout.table_stride, layout.upper_off_table
    for ui, origin in zip(index[near], origins[near], strict=True):
        node = uppers[ui]
        addr = start + int(ui) * layout.upper_size
        table = node[table_at : table_at + fmt.UPPER_CHILDREN * stride].reshape(fmt.UPPER_CHILDREN, stride)
        child_mask = mask_bits(node, fmt.UPPER_OFF_CHILD_MASK, fmt.UPPER_MASK_SIZE)
        kids = np.nonzero(child_mask)[0]
        parents.append(np.full(len(kids), addr, np.int64))
        offsets.append(column(table[kids], 0, "<i8"))
        fields.append(addr + table_at + kids.astype(np.int64) * stride)
        child_origins.append(origin + (child_positions(kids, fmt.UPPER_DIM_LOG2) << fmt.LOWER_LOG2))
        non = np.nonzero(child_mask == 0)[0]
        vals = values_of(table[non, : layout.value_size], layout)
        value_mask = mask_bits(node, fmt.UPPER_OFF_VALUE_MASK, fmt.UPPER_MASK_SIZE)
        active = value_mask[non].astype(bool)
        keep = kept_tiles(vals, active, layout, root.background)
        tiles.add(
            origin + (child_positions(non[keep], fmt.UPPER_DIM_LOG2) << fmt.LOWER_LOG2),
            fmt.LOWER_DIM,
            vals[keep],
            addr + table_at + non[keep].astype(np.int64) * stride,
            active[keep],
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
    lowers = node_rows(gbuf, start, count, layout.lower_size, "lower node")
    index = node_index(
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
    near = overlaps(refs.origins, fmt.LOWER_DIM, bbox)
    index, addrs, origins = index[near], addrs[near], refs.origins[near]
    rows = lowers[index]
    stride, table_at = layout.table_stride, layout.lower_off_table
    table = rows[:, table_at : table_at + fmt.LOWER_CHILDREN * stride].reshape(len(rows), fmt.LOWER_CHILDREN, stride)
    child_mask = mask_bits(rows, fmt.LOWER_OFF_CHILD_MASK, fmt.LOWER_MASK_SIZE)
    node, kid = np.nonzero(child_mask)
    leaves = _ChildRefs(
        addrs[node],
        column(table[node, kid], 0, "<i8"),
        addrs[node] + table_at + kid.astype(np.int64) * stride,
        origins[node] + (child_positions(kid, fmt.LOWER_DIM_LOG2) << fmt.LEAF_LOG2),
    )
    node, non = np.nonzero(child_mask == 0)
    vals = values_of(table[node, non, : layout.value_size], layout)
    value_mask = mask_bits(rows, fmt.LOWER_OFF_VALUE_MASK, fmt.LOWER_MASK_SIZE)
    active = value_mask[node, non].astype(bool)
    keep = kept_tiles(vals, active, layout, background)
    tiles.add(
        origins[node[keep]] + (child_positions(non[keep], fmt.LOWER_DIM_LOG2) << fmt.LEAF_LOG2),
        fmt.LEAF_DIM,
        vals[keep],
        addrs[node[keep]] + table_at + non[keep].astype(np.int64) * stride,
        active[keep],
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
        addrs = fpn_leaf_addresses(gbuf, start, count, end, count_at)
        index = node_index_among(refs.parents, refs.offsets, refs.fields, addrs, "leaf", "lower node", count_at)
        nodes = None
    else:
        nodes = node_rows(gbuf, start, count, layout.leaf_size, "leaf")
        index = node_index(
            refs.parents, refs.offsets, refs.fields, start, count, layout.leaf_size, "leaf", "lower node", count_at
        )
        addrs = start + np.arange(count, dtype=np.int64) * layout.leaf_size
    order = tree.tree_order(refs.origins >> fmt.LEAF_LOG2)
    index, origins = index[order], refs.origins[order]
    keep = overlaps(origins, fmt.LEAF_DIM, bbox)
    wanted = leaf_indices(leaf_subset, len(keep), NanoVDBError, "the grid")
    if wanted is not None:
        chosen = np.zeros(len(keep), bool)
        chosen[wanted] = True
        keep &= chosen
    return _Leaves(gbuf, origins[keep], index[keep], addrs, nodes)


Fetch = Callable[[list[tuple[int, int]]], None]


def selected_leaf_rows(
    buf: np.ndarray, base: int, bbox: np.ndarray | None, leaf_subset: np.ndarray | None, fetch: Fetch
) -> np.ndarray | None:
    """Positions in the grid's leaf array of the leaves :func:`decode_grid` reads for ``bbox`` /
    ``leaf_subset``, walking the tree as it does and calling ``fetch`` with the byte ranges of each
    level's nodes it is about to touch (the root's table, then the upper and lower nodes that meet
    ``bbox``, each found through offsets already checked); no leaf byte is touched.  A reader by byte
    ranges then fetches those leaves only.  None for FpN grids, whose leaves differ in size."""
    h = grid_header(buf, base)
    layout = layout_of(h, base)
    if layout.leaf_kind == "fpn":
        return None
    end = _grid_end(h, base)
    gbuf, t = buf[:end], h["tree"]
    root_at = t + h["node_offsets"][3]
    fetch([(root_at, min(end, root_at + layout.root_size))])
    table_size = unpack(gbuf, root_at + fmt.ROOT_OFF_TABLE_SIZE, "<I", "root table size")[0]
    fetch([(root_at, min(end, root_at + layout.root_size + table_size * layout.root_tile_size))])
    root = _read_root(gbuf, h, layout)
    linked = root.child != 0
    start, count = t + h["node_offsets"][2], h["node_counts"][2]
    upper = _upper_index(h, layout, root)
    near = overlaps(root.origins[linked], fmt.UPPER_DIM, bbox)
    fetch([(start + int(u) * layout.upper_size, start + (int(u) + 1) * layout.upper_size) for u in upper[near]])
    refs = _read_upper_nodes(gbuf, h, layout, root, bbox, _TileParts())
    start, count = t + h["node_offsets"][1], h["node_counts"][1]
    args = (start, count, layout.lower_size, "lower", "upper node", t + fmt.TREE_OFF_LOWER_COUNT)
    lower = node_index(refs.parents, refs.offsets, refs.fields, *args)
    near = overlaps(refs.origins, fmt.LOWER_DIM, bbox)
    fetch([(start + int(n) * layout.lower_size, start + (int(n) + 1) * layout.lower_size) for n in lower[near]])
    leaf_refs = _read_lower_nodes(gbuf, h, layout, refs, root.background, bbox, _TileParts())
    return _read_leaves(gbuf, h, layout, leaf_refs, end, bbox, leaf_subset).index


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
    tile_origins, tile_sizes, tile_vals, tile_at, tile_active = tiles
    first = column(head, fmt.INDEX_LEAF_OFF_OFFSET, "<u8").astype(np.uint64)  # compared unsigned: no wrap-around
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
        tile_active=tile_active,
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
    selected: bool,
) -> Volume:
    """A value grid as a Volume: quantised values decoded to float32 copies; plain values of a whole grid
    left where they are (a flat view of the leaf array and each leaf's element offset into it), those of
    ``selected`` leaves copied (so that the file's mapping, and its pages, go with the call)."""
    if layout.is_quantised:
        vt = value_type_for(np.dtype(np.float32), 1)
        return Volume(
            topo,
            leaf_floats(gbuf, leaves.addrs[leaves.index], layout),
            np.asarray(background, np.float32).reshape(1),
            np.ascontiguousarray(tile_vals.reshape(-1, 1), np.float32),
            vt,
            False,
            h["name"] or "value",
        )
    vt = value_type_for(layout.dtype, layout.components)
    background = np.ascontiguousarray(background, vt.dtype)
    tile_values = np.ascontiguousarray(tile_vals.reshape(-1, layout.components), vt.dtype)
    if selected:
        return Volume(topo, leaves.values(layout), background, tile_values, vt, False, h["name"] or "value")
    item = layout.dtype.itemsize
    start, count = h["tree"] + h["node_offsets"][0], h["node_counts"][0]
    flat = gbuf[start : start + count * layout.leaf_size].view(layout.dtype)
    values_at = (leaves.index * layout.leaf_size + layout.leaf_off_table) // item
    return Volume(
        topo,
        flat,
        background,
        tile_values,
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
    h = grid_header(buf, base)
    layout = layout_of(h, base)
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
    tile_origins, tile_sizes, tile_vals, _, tile_active = tile_parts
    transform = _grid_transform(h, base)
    if layout.is_index:
        return h, _index_topology(h, base, layout, leaves, head, masks, tile_parts, transform)
    topo = Topology(
        leaves.origins.astype(np.int32), masks, transform, tile_origins, tile_sizes, tile_active=tile_active
    )
    if layout.is_topology:
        return h, topo
    selected = bbox is not None or leaf_subset is not None
    return h, _value_volume(gbuf, h, layout, leaves, root.background, topo, tile_vals, selected)
