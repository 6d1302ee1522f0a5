"""Encoding a grid's parts into its buffer: blind data, leaves, lower and upper nodes and the root, at
the offsets :mod:`~vdbflow.io.nanovdb.plan` gave them (the headers and checksum are
:mod:`~vdbflow.io.nanovdb.write`'s)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.volume import Topology, Volume
from vdbflow.io.mapped import release, release_rows, rows_per_span
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.metadata import METADATA_NAME, metadata_record
from vdbflow.io.nanovdb.plan import (
    GridContents,
    GridOffsets,
    NodeBoxes,
    NodePlan,
    child_index,
    find_rows,
    leaf_boxes,
)
from vdbflow.io.nanovdb.records import BlindData


def put(buf: np.ndarray, offset: int, form: str, *values: Any) -> None:
    struct.pack_into(form, buf, offset, *values)


def value_bytes(values: np.ndarray, layout: fmt.GridLayout) -> np.ndarray:
    """(n, C) values -> (n, value_size) uint8 in the file's little-endian dtype."""
    arr = np.ascontiguousarray(np.asarray(values).reshape(-1, layout.components), dtype=layout.dtype)
    return arr.view(np.uint8).reshape(len(arr), layout.value_size)


def blind_records(obj: Volume | Topology) -> tuple[BlindData, ...]:
    """The blind data to write: ``obj``'s records, then its ``vdbflow.metadata`` record made afresh."""
    blind = tuple(r for r in getattr(obj, "blind_data", ()) or () if r.name != METADATA_NAME)
    return blind + tuple(r for r in (metadata_record(obj),) if r is not None)


def write_blind_data(buf: np.ndarray, off: GridOffsets, blind: tuple[BlindData, ...]) -> None:
    """A metadata record per blind record (its data offset relative to the record), then the data."""
    for b, record in enumerate(blind):
        at = off.blind + b * fmt.BLIND_META_SIZE
        put(
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


def write_leaves(buf: np.ndarray, off: GridOffsets, plan: NodePlan, contents: GridContents) -> None:
    """Each leaf: its active bbox, flags (has a bbox) and value mask, then its 512 values, or (index grids) its
    first value index and the prefix sums of its mask words.  Written span by span of leaves: the pages of a
    file mapped for writing (and of a mapped source's values) are given back after each span, so that a
    file larger than memory is written with a few spans resident."""
    layout, topo = contents.layout, contents.topo
    n_leaf = plan.counts[0]
    leaves = buf[off.leaf : off.blind].reshape(n_leaf, layout.leaf_size)
    has, bb_min, bb_dif = leaf_boxes(plan.leaf_origins, topo.masks)
    masks = np.ascontiguousarray(topo.masks.astype("<u8")).view(np.uint8).reshape(n_leaf, fmt.LEAF_MASK_SIZE)
    if layout.is_index:
        prefix = topo.prefix.astype(np.uint64)
        packed = np.zeros(n_leaf, np.uint64)
        for w in range(1, 8):
            packed |= prefix[:, w] << np.uint64(fmt.INDEX_PREFIX_BITS * (w - 1))
    width = tree.LEAF_VOXELS * layout.value_size
    step = rows_per_span(layout.leaf_size)
    for a in range(0, n_leaf, step):
        b = min(n_leaf, a + step)
        span = leaves[a:b]
        at = fmt.LEAF_OFF_BBOX_MIN
        span[:, at : at + 12] = bb_min[a:b].astype("<i4").view(np.uint8).reshape(b - a, 12)
        span[:, fmt.LEAF_OFF_BBOX_DIF : fmt.LEAF_OFF_BBOX_DIF + 3] = bb_dif[a:b].astype(np.uint8)
        span[:, fmt.LEAF_OFF_FLAGS] = np.where(has[a:b], fmt.LEAF_FLAG_HAS_BBOX, 0)
        span[:, fmt.LEAF_OFF_VALUE_MASK : fmt.LEAF_OFF_VALUE_MASK + fmt.LEAF_MASK_SIZE] = masks[a:b]
        if layout.is_index:
            at = fmt.INDEX_LEAF_OFF_OFFSET
            span[:, at : at + 8] = (topo.leaf_offset[a:b] + 1).astype("<u8").view(np.uint8).reshape(b - a, 8)
            at = fmt.INDEX_LEAF_OFF_PREFIX
            span[:, at : at + 8] = packed[a:b].astype("<u8").view(np.uint8).reshape(b - a, 8)
        else:
            table = value_bytes(contents.leaf_values[a:b], layout).reshape(b - a, width)
            span[:, layout.leaf_off_table : layout.leaf_off_table + width] = table
            release_rows(contents.leaf_values, a, b)
        release(buf, off.leaf + a * layout.leaf_size, off.leaf + b * layout.leaf_size)


def node_head_bytes(boxes: np.ndarray) -> np.ndarray:
    """(n, 32) uint8: an internal node's bbox (min, max as int32; an empty one as NanoVDB's empty box,
    INT32_MAX then INT32_MIN) and flags (has a bbox, or empty)."""
    i32 = np.iinfo(np.int32)
    filled = boxes[:, 0, 0] <= boxes[:, 1, 0]
    clipped = np.clip(boxes, i32.min, i32.max).astype("<i4").reshape(len(boxes), 6)
    flags = np.where(filled, fmt.NODE_FLAG_HAS_BBOX, fmt.NODE_FLAG_EMPTY).astype("<u8")
    out = np.zeros((len(boxes), fmt.NODE_OFF_FLAGS + 8), np.uint8)
    out[:, : fmt.NODE_OFF_FLAGS] = clipped.view(np.uint8).reshape(len(boxes), fmt.NODE_OFF_FLAGS)
    out[:, fmt.NODE_OFF_FLAGS :] = flags.view(np.uint8).reshape(len(boxes), 8)
    return out


def write_lower_nodes(
    buf: np.ndarray,
    off: GridOffsets,
    layout: fmt.GridLayout,
    plan: NodePlan,
    boxes: NodeBoxes,
    bg_bytes: np.ndarray,
    tile_bytes: np.ndarray,
) -> None:
    """Each lower node: the bbox of its active values and its flags, a table entry per child (the offset
    of a leaf, an 8^3 tile's value or the background), and the masks of which entries are leaves (child)
    and tiles (value)."""
    n_leaf, n_low, _ = plan.counts
    lowers = buf[off.lower : off.leaf].reshape(n_low, layout.lower_size)
    stride = layout.table_stride
    ltable = lowers[:, layout.lower_off_table : layout.lower_off_table + fmt.LOWER_CHILDREN * stride]
    ltable = ltable.reshape(n_low, fmt.LOWER_CHILDREN, stride)
    ltable[:, :, : layout.value_size] = bg_bytes
    lowers[:, : fmt.NODE_OFF_FLAGS + 8] = node_head_bytes(boxes.lower)
    child = child_index(plan.leaf_origins, fmt.LOWER_DIM_LOG2, fmt.LEAF_LOG2)
    leaf_addr = off.leaf + np.arange(n_leaf, dtype=np.int64) * layout.leaf_size
    lower_addr = off.lower + np.arange(n_low, dtype=np.int64) * layout.lower_size
    rel = (leaf_addr - lower_addr[plan.leaf_parent]).astype("<i8")
    ltable[plan.leaf_parent, child] = 0  # a child's entry: its offset, the rest of the entry zero
    ltable[plan.leaf_parent, child, : fmt.TABLE_CHILD_SIZE] = rel.view(np.uint8).reshape(-1, fmt.TABLE_CHILD_SIZE)
    cmask = np.zeros((n_low, fmt.LOWER_CHILDREN), bool)
    cmask[plan.leaf_parent, child] = True
    sel = np.nonzero(plan.lower_tiles)[0]
    tparent = find_rows(plan.lower_keys, plan.tile_origins[sel] >> fmt.LOWER_LOG2)
    tchild = child_index(plan.tile_origins[sel], fmt.LOWER_DIM_LOG2, fmt.LEAF_LOG2)
    ltable[tparent, tchild, : layout.value_size] = tile_bytes[sel]
    vmask = np.zeros((n_low, fmt.LOWER_CHILDREN), bool)
    vmask[tparent, tchild] = plan.tile_active[sel]  # an inactive tile keeps its value, its bit stays off
    at = fmt.LOWER_OFF_VALUE_MASK
    lowers[:, at : at + fmt.LOWER_MASK_SIZE] = np.packbits(vmask, axis=1, bitorder="little")
    at = fmt.LOWER_OFF_CHILD_MASK
    lowers[:, at : at + fmt.LOWER_MASK_SIZE] = np.packbits(cmask, axis=1, bitorder="little")


def write_upper_nodes(
    buf: np.ndarray,
    off: GridOffsets,
    layout: fmt.GridLayout,
    plan: NodePlan,
    boxes: NodeBoxes,
    bg_bytes: np.ndarray,
    tile_bytes: np.ndarray,
) -> None:
    """Each upper node, one by one: the bbox of its active values and its flags, a table entry per child
    (the offset of a lower node, a 128^3 tile's value or the background), and its child and value masks."""
    _, n_low, n_up = plan.counts
    lower_origin = plan.lower_origins
    upper_addr = off.upper + np.arange(n_up, dtype=np.int64) * layout.upper_size
    lower_addr = off.lower + np.arange(n_low, dtype=np.int64) * layout.lower_size
    heads = node_head_bytes(boxes.upper)
    sel128 = np.nonzero(plan.upper_tiles)[0]
    t128_parent = find_rows(plan.upper_keys, plan.tile_origins[sel128] >> fmt.UPPER_LOG2)
    stride = layout.table_stride
    for u in range(n_up):
        node = buf[upper_addr[u] : upper_addr[u] + layout.upper_size]
        node[: fmt.NODE_OFF_FLAGS + 8] = heads[u]
        table = node[layout.upper_off_table : layout.upper_off_table + fmt.UPPER_CHILDREN * stride]
        table = table.reshape(fmt.UPPER_CHILDREN, stride)
        table[:, : layout.value_size] = bg_bytes
        kids = np.nonzero(plan.lower_parent == u)[0]
        kid_index = child_index(lower_origin[kids], fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
        table[kid_index] = 0
        table[kid_index, : fmt.TABLE_CHILD_SIZE] = (
            (lower_addr[kids] - upper_addr[u]).astype("<i8").view(np.uint8).reshape(-1, fmt.TABLE_CHILD_SIZE)
        )
        mine = sel128[t128_parent == u]
        tile_index = child_index(plan.tile_origins[mine], fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
        table[tile_index, : layout.value_size] = tile_bytes[mine]
        cm = np.zeros(fmt.UPPER_CHILDREN, bool)
        cm[kid_index] = True
        vm = np.zeros(fmt.UPPER_CHILDREN, bool)
        vm[tile_index] = plan.tile_active[mine]
        at = fmt.UPPER_OFF_VALUE_MASK
        node[at : at + fmt.UPPER_MASK_SIZE] = np.packbits(vm, bitorder="little")
        at = fmt.UPPER_OFF_CHILD_MASK
        node[at : at + fmt.UPPER_MASK_SIZE] = np.packbits(cm, bitorder="little")


def root_key(origin: np.ndarray) -> int:
    """A root table key: the origin's coordinates >> 12 as unsigned, k | j << 21 | i << 42."""
    u = np.asarray(origin, np.int64).astype(np.int32).view(np.uint32).astype(np.uint64) >> np.uint64(fmt.UPPER_LOG2)
    return int(u[2]) | (int(u[1]) << fmt.ROOT_KEY_BITS) | (int(u[0]) << 2 * fmt.ROOT_KEY_BITS)


def write_root(
    buf: np.ndarray,
    off: GridOffsets,
    layout: fmt.GridLayout,
    plan: NodePlan,
    topo: Topology,
    bg_bytes: np.ndarray,
    tile_bytes: np.ndarray,
) -> None:
    """The root: the index bbox, table size and background (a value grid's minimum and maximum equal to
    it, as NanoVDB's builder leaves them without statistics), then its table: the upper nodes (value
    zero) and the 4096^3 tiles (their active state), in the order of their origins (i, then j, then k), as NanoVDB
    lays out OpenVDB's root."""
    n_up = plan.counts[2]
    upper_addr = off.upper + np.arange(n_up, dtype=np.int64) * layout.upper_size
    sel4096 = np.nonzero(plan.root_tiles)[0]
    box = topo.active_bbox
    lo, hi = (box[0], box[1]) if box is not None else fmt.EMPTY_INDEX_BBOX
    put(buf, off.root + fmt.ROOT_OFF_BBOX, "<6iI", *[int(x) for x in lo], *[int(x) for x in hi], n_up + len(sel4096))
    at = off.root + layout.root_off_background
    for k in range(1 if layout.is_index else 3):  # background, minimum, maximum
        buf[at + k * layout.value_size : at + (k + 1) * layout.value_size] = bg_bytes
    no_value = np.zeros(layout.value_size, np.uint8)
    entries = [(o, upper_addr[u] - off.root, 0, no_value) for u, o in enumerate(plan.upper_origins)]
    entries += [(plan.tile_origins[t], 0, int(plan.tile_active[t]), tile_bytes[t]) for t in sel4096]
    entries.sort(key=lambda entry: tuple(int(x) for x in entry[0]))
    for e, (origin, child_off, state, value) in enumerate(entries):
        at = off.root + layout.root_size + e * layout.root_tile_size
        put(buf, at + fmt.ROOT_TILE_OFF_KEY, "<QqI", root_key(origin), int(child_off), state)
        buf[at + layout.root_tile_off_value : at + layout.root_tile_off_value + layout.value_size] = value
