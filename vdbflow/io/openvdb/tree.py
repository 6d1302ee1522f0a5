"""A grid's tree as OpenVDB stores it: the topology (buffer count, background, root tiles and
children; each 4096^3 node's child and value masks and values, then its 128^3 children likewise,
then the value masks of their 8^3 leaves) and, after it, the leaf buffers.

Nodes come in OpenVDB's order (root children sorted by origin, children by index), which is
vdbflow's tree order.  Tiles of every level stay tiles: those that are active or whose value is
not the background."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.stream import Cursor
from vdbflow.io.openvdb.values import Storage, read_node_values

# the smallest a 4096^3 node and a 128^3 node can be: two masks and a mask code
_MIN_UPPER = 2 * fmt.UPPER_MASK_BYTES + 1
_MIN_LOWER = 2 * fmt.LOWER_MASK_BYTES + 1


@dataclass
class TreeParts:
    """What the topology holds: leaf origins (L, 3) int32 and masks (L, 8) uint64 in tree order;
    tiles' origins (T, 3), sizes (T,), values (T, C) and active states (T,); node counts."""

    leaf_origins: np.ndarray
    masks: np.ndarray
    tile_origins: np.ndarray
    tile_sizes: np.ndarray
    tile_values: np.ndarray
    tile_active: np.ndarray
    lower_count: int
    upper_count: int
    buffers_at: int  # byte offset where the leaf buffers start
    tile_counts: tuple[int, int, int] = field(default=(0, 0, 0))  # lower, upper, root

    @property
    def active_voxel_count(self) -> int:
        tiles = self.tile_sizes[self.tile_active].astype(np.int64) ** 3
        return int(np.bitwise_count(self.masks).sum()) + int(tiles.sum())


def _local(index: np.ndarray, log2: int) -> np.ndarray:
    """(n, 3) child coordinates inside a node of 2^log2 children per side, from child indices."""
    index = index.astype(np.int64)
    side = (1 << log2) - 1
    return np.stack([index >> (2 * log2), (index >> log2) & side, index & side], axis=1)


class _Tiles:
    def __init__(self, st: Storage):
        self.st = st
        self.parts: list[tuple[np.ndarray, int, np.ndarray, np.ndarray]] = []

    def kept(self, free: np.ndarray, values: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Which ``free`` entries (not children; any shape S) are tiles to keep: active, or of another
        value than the background (``values`` S + (C,)): the mask, of shape S."""
        with np.errstate(invalid="ignore"):
            return free & (active | np.any(values != self.st.background, axis=-1))

    def add(self, origins: np.ndarray, size: int, values: np.ndarray, active: np.ndarray) -> int:
        keep = self.kept(np.ones(len(active), bool), values, active)
        if np.any(keep):
            self.parts.append((origins[keep], size, values[keep], active[keep]))
        return int(keep.sum())


def _bits(raw: np.ndarray) -> np.ndarray:
    return np.unpackbits(raw, bitorder="little").astype(bool)


def _node(
    cur: Cursor, st: Storage, origin: np.ndarray, log2: int, child_dim: int, tiles: _Tiles, what: str
) -> np.ndarray:
    """One internal node's masks and values at the cursor: its tiles go to ``tiles``; returns the
    origins (n, 3) int64 of its children, in index order."""
    nbytes = (1 << (3 * log2)) // 8
    child = _bits(cur.take(nbytes, f"the child mask of {what}"))
    active = _bits(cur.take(nbytes, f"the value mask of {what}"))
    values = read_node_values(cur, st, active, what)
    free = np.nonzero(tiles.kept(~child, values, active))[0]
    tiles.add(origin + _local(free, log2) * child_dim, child_dim, values[free], active[free])
    return origin + _local(np.nonzero(child)[0], log2) * child_dim


class _Lowers:
    """The 128^3 nodes of one 4096^3 node, read in order: each node's masks and values at the cursor
    (a few small reads, to find where the next node starts), then every ``BATCH`` nodes their
    children's origins, tiles and leaf masks all at once with NumPy.  The leaf origins and masks go to
    ``leaf_origins`` and ``leaf_masks``, the tiles to ``tiles``, in the order :func:`_node` gives."""

    BATCH = 256  # nodes per NumPy pass: at most 256 x 4096 values (32 MB of vec3d) held at once

    def __init__(self, st: Storage, tiles: _Tiles, leaf_origins: list[np.ndarray], leaf_masks: list[np.ndarray]):
        self.st, self.tiles = st, tiles
        self.leaf_origins, self.leaf_masks = leaf_origins, leaf_masks
        self.origins: list[list[int]] = []
        self.child: list[np.ndarray] = []
        self.active: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.masks: list[np.ndarray] = []

    def read(self, cur: Cursor, origin: list[int]) -> None:
        """The node at ``origin`` (3 ints): child and value masks, values, then its leaves' value masks."""
        what = f"the 128^3 node at {origin}"
        nbytes = fmt.LOWER_MASK_BYTES
        child = cur.take(nbytes, f"the child mask of {what}")
        active = _bits(cur.take(nbytes, f"the value mask of {what}"))
        self.values.append(read_node_values(cur, self.st, active, what))
        leaves = int(np.bitwise_count(child).sum())
        self.masks.append(cur.array("<u8", 8 * leaves, f"the leaf value masks of {what}"))
        self.origins.append(origin)
        self.child.append(child)
        self.active.append(active)
        if len(self.origins) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        """Children, tiles and leaf masks of the nodes read since the last flush."""
        if not self.origins:
            return
        origins = np.array(self.origins, np.int64)
        child = np.unpackbits(np.stack(self.child), axis=1, bitorder="little").astype(bool)  # (n, 4096)
        node, index = np.nonzero(child)  # node by node, children by index: tree order
        self.leaf_origins.append(origins[node] + _local(index, fmt.LOWER_LOG2) * fmt.LEAF_DIM)
        self.leaf_masks.append(np.concatenate(self.masks).reshape(-1, 8))
        values, active = np.stack(self.values), np.stack(self.active)
        node, index = np.nonzero(self.tiles.kept(~child, values, active))
        tiles = origins[node] + _local(index, fmt.LOWER_LOG2) * fmt.LEAF_DIM
        self.tiles.add(tiles, fmt.LEAF_DIM, values[node, index], active[node, index])
        for part in (self.origins, self.child, self.active, self.values, self.masks):
            part.clear()


def read_topology(cur: Cursor, st: Storage) -> TreeParts:
    """The tree's topology at the cursor (after the background, which made ``st``); the cursor ends
    where the leaf buffers start."""
    item = st.full_itemsize
    at = cur.pos
    n_tiles, n_children = cur.unpack("<II", "the root's tile and child counts")
    tile_bytes = 12 + item + 1
    if n_tiles > cur.left // tile_bytes or n_children > cur.left // (12 + _MIN_UPPER):
        raise cur.fail(
            f"root tile and child counts that the {cur.left} remaining bytes can hold",
            f"{n_tiles} and {n_children}",
            at,
        )
    tiles = _Tiles(st)
    root_dt = np.dtype([("ijk", "<i4", 3), ("value", st.dtype.newbyteorder("<"), (st.components,)), ("active", "u1")])
    tiles_at = cur.pos
    root_tiles = np.frombuffer(cur.take(n_tiles * tile_bytes, "the root tiles").tobytes(), root_dt)
    root_origins = root_tiles["ijk"].astype(np.int64)
    root_values = root_tiles["value"].astype(st.dtype).reshape(n_tiles, st.components)
    leaf_origins: list[np.ndarray] = []
    leaf_masks: list[np.ndarray] = []
    lower_count = 0
    child_origins = []
    counts = [0, 0, 0]
    for c in range(n_children):
        o_at = cur.pos
        origin = np.array(cur.unpack("<3i", f"the origin of root child {c}"), np.int64)
        if np.any(origin % fmt.UPPER_DIM):
            raise cur.fail(f"a root child origin that is a multiple of {fmt.UPPER_DIM}", f"{origin.tolist()}", o_at)
        if child_origins and tuple(origin) <= tuple(child_origins[-1]):
            raise cur.fail(
                f"root children in increasing origin order (after {child_origins[-1].tolist()})",
                f"{origin.tolist()}",
                o_at,
            )
        child_origins.append(origin)
        what = f"the 4096^3 node at {origin.tolist()}"
        lowers = _node(cur, st, origin, fmt.UPPER_LOG2, fmt.LOWER_DIM, tiles, what)
        if len(lowers) * _MIN_LOWER > cur.left:
            raise cur.fail(f"the {len(lowers)} 128^3 children of {what}", f"{cur.left} bytes left")
        batch = _Lowers(st, tiles, leaf_origins, leaf_masks)
        for lo in lowers.tolist():
            lower_count += 1
            batch.read(cur, lo)
        batch.flush()
    # root tiles: aligned, unique, not where a child is
    if n_tiles:
        bad = np.any(root_origins % fmt.UPPER_DIM, axis=1)
        keys = [tuple(o) for o in root_origins.tolist()] + [tuple(o) for o in np.array(child_origins).tolist()]
        if np.any(bad) or len(set(keys)) != len(keys):
            k = int(np.argmax(bad)) if np.any(bad) else 0
            raise cur.fail(
                f"root tiles at distinct multiples of {fmt.UPPER_DIM}, apart from the children",
                f"a tile at {root_origins[k].tolist()} among {len(keys)} root entries",
                tiles_at + k * tile_bytes,
            )
    for level, part in ((0, fmt.LEAF_DIM), (1, fmt.LOWER_DIM)):
        counts[level] = sum(len(p[0]) for p in tiles.parts if p[1] == part)
    counts[2] = tiles.add(root_origins, fmt.UPPER_DIM, root_values, root_tiles["active"] != 0)
    parts = tiles.parts

    def cat(arrays: list[np.ndarray]) -> np.ndarray:
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

    return TreeParts(
        leaf_origins=cat(leaf_origins).astype(np.int32) if leaf_origins else np.zeros((0, 3), np.int32),
        masks=cat(leaf_masks).astype(np.uint64, copy=False) if leaf_masks else np.zeros((0, 8), np.uint64),
        tile_origins=cat([p[0] for p in parts]).astype(np.int32) if parts else np.zeros((0, 3), np.int32),
        tile_sizes=cat([np.full(len(p[0]), p[1], np.int32) for p in parts]) if parts else np.zeros(0, np.int32),
        tile_values=cat([p[2] for p in parts]) if parts else np.zeros((0, st.components), st.dtype),
        tile_active=cat([p[3] for p in parts]) if parts else np.zeros(0, bool),
        lower_count=lower_count,
        upper_count=n_children,
        buffers_at=cur.pos,
        tile_counts=(counts[0], counts[1], counts[2]),
    )


def read_flag_leaves(cur: Cursor, parts: TreeParts, with_values: bool) -> None:
    """Check the leaf buffers of a bool (``with_values``) or mask grid: each repeats the value mask,
    then the leaf's origin (and for bool grids 64 bytes of value bits, which vdbflow does not keep);
    the origins must be the topology's."""
    L = len(parts.leaf_origins)
    size = fmt.LEAF_MASK_BYTES + 12 + (fmt.LEAF_MASK_BYTES if with_values else 0)
    if L == 0:
        return
    at = cur.pos
    block = cur.array("u1", L * size, "the leaf buffers").reshape(L, size)
    origins = np.ascontiguousarray(block[:, fmt.LEAF_MASK_BYTES : fmt.LEAF_MASK_BYTES + 12]).view("<i4")
    wrong = np.any(origins != parts.leaf_origins, axis=1)
    if np.any(wrong):
        n = int(np.argmax(wrong))
        raise cur.fail(
            f"leaf buffer {n} at origin {parts.leaf_origins[n].tolist()} (from the topology)",
            f"origin {origins[n].tolist()}",
            at + n * size,
        )
