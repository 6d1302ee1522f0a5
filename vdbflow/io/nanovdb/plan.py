"""Planning a grid to write: what it holds (a Volume as a value grid, a Topology as an OnIndex grid),
the internal nodes its topology needs, and the byte offset of every part of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vdbflow.core import tree
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.records import BlindData


def child_index(origins: np.ndarray, parent_log2: int, child_log2: int) -> np.ndarray:
    """Linear child index inside the parent node of children at ``origins`` (n, 3)."""
    m = (1 << parent_log2) - 1
    c = (origins >> child_log2) & m
    return (c[:, 0] << (2 * parent_log2)) | (c[:, 1] << parent_log2) | c[:, 2]


def _aligned(n: int) -> int:
    """``n`` rounded up to NanoVDB's data alignment (32 bytes)."""
    return (n + fmt.DATA_ALIGNMENT - 1) // fmt.DATA_ALIGNMENT * fmt.DATA_ALIGNMENT


@dataclass(frozen=True)
class GridContents:
    """What a grid being written holds: its topology, node layout, background, per-leaf values ((L, 512, C),
    None for an index grid), tile values, and the value count of its data1 field (index grids; 0 otherwise)."""

    topo: Topology
    layout: fmt.GridLayout
    background: np.ndarray
    leaf_values: np.ndarray | None
    tile_values: np.ndarray
    value_count: int


def grid_contents(obj: Volume | Topology) -> GridContents:
    """A Volume as a value grid (index-layout values spread over whole leaves, the background elsewhere),
    a Topology as an OnIndex grid (value indices shifted by one: index 0 is the background)."""
    if isinstance(obj, Topology):
        tile_values = (
            (obj.tile_value_index + 1 if obj.tile_value_index is not None else np.zeros(obj.tile_count, np.int64))
            .astype(np.uint64)
            .reshape(-1, 1)
        )
        return GridContents(
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
        leaf_values = leaf_values.reshape(vol.leaf_count, tree.LEAF_VOXELS, vol.components)
    else:  # a view where it can be (values in memory, a memory map, or left in a mapped .nvdb file): never a copy
        leaf_values = vol.leaf_values
    return GridContents(vol.topology, fmt.LAYOUTS[gtype], background, leaf_values, vol.tile_values, 0)


@dataclass(frozen=True)
class NodePlan:
    """The nodes of a grid being written: the leaves (in the topology's tree order), the lower and upper
    nodes that hold them and the tiles, in tree order (by parent, then child index), each child's parent,
    and which tiles sit where (8^3 in lower nodes, 128^3 in upper nodes, 4096^3 in the root)."""

    leaf_origins: np.ndarray  # (L, 3) int64
    tile_origins: np.ndarray  # (T, 3) int64
    tile_active: np.ndarray  # (T,) bool: the tile's bit in its node's value mask (a root tile's state)
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


def plan_nodes(topo: Topology) -> NodePlan:
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
    lower_parent = find_rows(upper_keys, lower_keys >> fmt.UPPER_DIM_LOG2)
    lower_child = child_index(lower_keys << fmt.LOWER_LOG2, fmt.UPPER_DIM_LOG2, fmt.LOWER_LOG2)
    l_order = np.lexsort((lower_child, lower_parent))
    lower_keys, lower_parent = lower_keys[l_order], lower_parent[l_order]
    # leaves are already in tree order (Topology keeps them so)
    leaf_parent = find_rows(lower_keys, leaf_origins >> fmt.LOWER_LOG2)
    return NodePlan(
        leaf_origins, t_origins, topo.tile_active, t8, t128, t4096, upper_keys, lower_keys, lower_parent, leaf_parent
    )


@dataclass(frozen=True)
class GridOffsets:
    """Byte offsets in a grid being written: root, upper, lower and leaf node arrays, the blind metadata,
    each blind record's data, and the grid's size."""

    root: int
    upper: int
    lower: int
    leaf: int
    blind: int
    blind_data: tuple[int, ...]
    size: int


def plan_offsets(layout: fmt.GridLayout, plan: NodePlan, blind: tuple[BlindData, ...]) -> GridOffsets:
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
    return GridOffsets(off_root, off_upper, off_lower, off_leaf, off_blind, tuple(blind_at), _aligned(pos))


def find_rows(table: np.ndarray, query: np.ndarray) -> np.ndarray:
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


@dataclass(frozen=True)
class NodeBoxes:
    """The bounding boxes NanoVDB's statistics give a grid's nodes: each node's box over its active voxels
    and active tiles (inclusive; a node without any has min > max), and the tile voxels the tree counts."""

    lower: np.ndarray  # (N, 2, 3) int64
    upper: np.ndarray  # (U, 2, 3) int64
    tile_voxels: int  # active voxels of the tiles: 8^3, 128^3 and 4096^3 each


def leaf_boxes(origins: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per leaf: whether it has active voxels (L,) bool, the min (L, 3) int64 of their box and its extent
    max - min (L, 3) int64 (the leaf's origin and 0 when it has none)."""
    bits = tree.bits_from_masks(masks).reshape(-1, 8, 8, 8)
    lo = np.zeros((len(masks), 3), np.int64)
    dif = np.zeros((len(masks), 3), np.int64)
    has = np.zeros(len(masks), bool)
    for axis in range(3):
        occupied = bits.any(axis=tuple(a for a in (1, 2, 3) if a != axis + 1))
        has = occupied.any(axis=1)
        first = np.argmax(occupied, axis=1)
        last = fmt.LEAF_DIM - 1 - np.argmax(occupied[:, ::-1], axis=1)
        lo[:, axis] = np.where(has, first, 0)
        dif[:, axis] = np.where(has, last - first, 0)
    return has, origins.astype(np.int64) + lo, dif


def _union_into(boxes: np.ndarray, parent: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    np.minimum.at(boxes[:, 0], parent, lo)
    np.maximum.at(boxes[:, 1], parent, hi)


def node_boxes(plan: NodePlan, topo: Topology) -> NodeBoxes:
    """Each internal node's box: the union of its children's boxes (leaves: their active voxels) and of
    the extents of its active tiles, as NanoVDB's GridStats computes them."""
    n_leaf, n_low, n_up = plan.counts
    empty = np.array([[np.iinfo(np.int64).max] * 3, [np.iinfo(np.int64).min] * 3], np.int64)
    lower = np.repeat(empty[None], n_low, axis=0)
    upper = np.repeat(empty[None], n_up, axis=0)
    if n_leaf:
        has, lo, dif = leaf_boxes(plan.leaf_origins, topo.masks)
        _union_into(lower, plan.leaf_parent[has], lo[has], lo[has] + dif[has])
    tiles8 = plan.tile_origins[plan.lower_tiles & plan.tile_active]
    if len(tiles8):
        _union_into(lower, find_rows(plan.lower_keys, tiles8 >> fmt.LOWER_LOG2), tiles8, tiles8 + fmt.LEAF_DIM - 1)
    filled = lower[:, 0, 0] <= lower[:, 1, 0]
    _union_into(upper, plan.lower_parent[filled], lower[filled, 0], lower[filled, 1])
    tiles128 = plan.tile_origins[plan.upper_tiles & plan.tile_active]
    if len(tiles128):
        parent = find_rows(plan.upper_keys, tiles128 >> fmt.UPPER_LOG2)
        _union_into(upper, parent, tiles128, tiles128 + fmt.LOWER_DIM - 1)
    sizes = topo.tile_sizes[plan.tile_active].astype(np.int64)
    return NodeBoxes(lower, upper, int((sizes**3).sum()))
