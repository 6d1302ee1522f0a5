"""The leaf topology of a sparse volume: 8^3 leaves at origins that are multiples of 8, their
active masks, tiles of 8^3, 128^3 and 4096^3 voxels, the index-to-world transform, and the kernels'
hash tables over them.  ``Topology.with_data`` gives a :class:`~vdbflow.Volume` on it."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vdbflow.core import kernel, tree
from vdbflow.core.periodic import Periodicity, resolve_periodic
from vdbflow.core.transform import Transform
from vdbflow.errors import NoValuesError, VolumeError

if TYPE_CHECKING:
    from vdbflow.core.volume import Volume

INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max

TransformLike = Transform | np.ndarray | Sequence | None


def as_coordinates(ijk: Any, what: str = "ijk") -> np.ndarray:
    """(n, 3) int32 voxel coordinates, checked."""
    arr = np.asarray(ijk)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise VolumeError(f"expected {what} of shape (n, 3), got {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        elif arr.size:
            raise VolumeError(f"expected integer {what} coordinates, got dtype {arr.dtype}")
        else:
            arr = arr.astype(np.int64)
    if arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        raise VolumeError(f"expected {what} inside the int32 index range, got values in [{arr.min()}, {arr.max()}]")
    return np.ascontiguousarray(arr, dtype=np.int32)


def unique_table(keys: np.ndarray, slots: np.ndarray, what: str) -> np.ndarray:
    table, repeated = kernel.build_table(keys, slots)
    if repeated >= 0:
        raise VolumeError(f"expected one {what} per key, got a second one at key {keys[repeated].tolist()}")
    return table


class Topology:
    """Which voxels exist: 8^3 leaves in NanoVDB tree order, their active masks, constant tiles
    coarser than a leaf, and the index-to-world transform.

    Attributes
    ----------
    leaf_origins : (L, 3) int32, multiples of 8, tree order
    masks : (L, 8) uint64 active bits
    tile_origins : (T, 3) int32, multiples of the tile size
    tile_sizes : (T,) int32, each 8, 128 or 4096
    tile_active : (T,) bool, whether each tile is active (a level set's interior tiles are kept for their
        value, inactive; they are sampled the same and written back inactive)
    transform : Transform
    """

    def __init__(
        self,
        leaf_origins: np.ndarray,
        masks: np.ndarray,
        transform: Transform | None = None,
        tile_origins: np.ndarray | None = None,
        tile_sizes: np.ndarray | None = None,
        *,
        leaf_offset: np.ndarray | None = None,
        value_count: int | None = None,
        tile_value_index: np.ndarray | None = None,
        tile_active: np.ndarray | None = None,
    ):
        """``leaf_offset``, ``value_count`` and ``tile_value_index`` describe index grids read from
        files, whose value rows may not follow the active voxels one to one: the first row of each
        leaf, the number of rows, and the row of each tile (-1: the background)."""
        origins = as_coordinates(leaf_origins, "leaf origins")
        masks = np.ascontiguousarray(masks, dtype=np.uint64)
        if masks.shape != (len(origins), 8):
            raise VolumeError(f"expected masks of shape ({len(origins)}, 8), got {masks.shape}")
        if np.any(origins & 7):
            raise VolumeError("expected leaf origins that are multiples of 8")
        if not tree.in_tree_order(origins >> 3):
            raise VolumeError("expected leaf origins in NanoVDB tree order")
        self.leaf_origins = origins
        self.masks = masks
        self.transform = transform if transform is not None else Transform.identity()
        self.tile_origins = as_coordinates(np.zeros((0, 3)) if tile_origins is None else tile_origins, "tile origins")
        self.tile_sizes = np.ascontiguousarray(np.zeros(0) if tile_sizes is None else tile_sizes, dtype=np.int32)
        self.tile_active = np.ascontiguousarray(
            np.ones(len(self.tile_sizes), bool) if tile_active is None else tile_active, dtype=bool
        )
        if self.tile_active.shape != self.tile_sizes.shape:
            raise VolumeError(
                f"expected one active state per tile ({len(self.tile_sizes)}), got shape {self.tile_active.shape}"
            )
        self.grid_class = "unknown"  # NanoVDB grid class, kept for .nvdb round trips
        self.blind_data: tuple = ()  # NanoVDB blind data records, kept for .nvdb round trips
        self.units: str | None = None  # units of the values, e.g. "m/s" (for Dataset attrs)
        self.length_units: str | None = None  # units of world space, e.g. "m"
        self.periodic: Periodicity | None = None  # periodic axes (with_periodic), None: none
        self.tables = self._build_tables()
        self.prefix, self.leaf_offset = tree.word_prefix(masks)
        # the active voxel count, from the prefix sums: the last leaf's first index, its last word's
        # prefix and that word's own bits
        self.value_count = (
            int(self.leaf_offset[-1]) + int(self.prefix[-1, -1]) + int(np.bitwise_count(masks[-1, -1]))
            if len(masks)
            else 0
        )
        self.tile_value_index = None
        if leaf_offset is not None:
            self.leaf_offset = np.ascontiguousarray(leaf_offset, dtype=np.int64)
            if self.leaf_offset.shape != (len(origins),):
                raise VolumeError(f"expected one leaf offset per leaf ({len(origins)}), got {self.leaf_offset.shape}")
            self.value_count = self._checked_count(value_count)
            self._check_leaf_offsets()
        if tile_value_index is not None:
            self.tile_value_index = np.ascontiguousarray(tile_value_index, dtype=np.int64)
            if self.tile_value_index.shape != (len(self.tile_sizes),):
                raise VolumeError(
                    f"expected one tile value index per tile ({len(self.tile_sizes)}), "
                    f"got shape {self.tile_value_index.shape}"
                )
            if len(self.tile_value_index) and (
                self.tile_value_index.min() < -1 or self.tile_value_index.max() >= self.value_count
            ):
                raise VolumeError(
                    f"expected tile value indices in [-1, {self.value_count}) (-1: the background), "
                    f"got [{self.tile_value_index.min()}, {self.tile_value_index.max()}]"
                )
            self.tile_value_index.setflags(write=False)
        self._freeze()

    def _checked_count(self, value_count: Any) -> int:
        if value_count is None:
            return self.active_voxel_count
        try:
            count = operator.index(value_count)
        except TypeError:
            raise VolumeError(f"expected an integer value_count, got {value_count!r}") from None
        if not 0 <= count < 2**62:
            raise VolumeError(f"expected a value_count in [0, 2^62), got {count}")
        return count

    def _check_leaf_offsets(self) -> None:
        """Each leaf's rows ``[offset, offset + active voxels)`` lie inside ``[0, value_count)``: the
        kernels index the value array with them unchecked.  Compared without overflow."""
        if not len(self.leaf_offset):
            return
        counts = np.bitwise_count(self.masks).sum(axis=1).astype(np.int64)
        bad = (self.leaf_offset < 0) | (self.leaf_offset > self.value_count - counts)
        if np.any(bad):
            leaf = int(np.argmax(bad))
            raise VolumeError(
                f"expected each leaf's value rows inside [0, {self.value_count}), got leaf {leaf} at rows "
                f"[{int(self.leaf_offset[leaf])}, +{int(counts[leaf])}) ({int(bad.sum())} leaves out of range)"
            )

    def _freeze(self) -> None:
        for arr in (
            self.leaf_origins,
            self.masks,
            self.tile_origins,
            self.tile_sizes,
            self.tile_active,
            self.prefix,
            self.leaf_offset,
            *self.tables,
        ):
            arr.setflags(write=False)

    def _build_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sizes, origins = self.tile_sizes, self.tile_origins
        if sizes.shape != (len(origins),):
            raise VolumeError(f"expected one tile size per tile origin ({len(origins)}), got shape {sizes.shape}")
        bad = ~np.isin(sizes, tree.TILE_SIZES)
        if bad.any():
            raise VolumeError(f"expected tile sizes of 8, 128 or 4096 voxels, got {int(sizes[bad][0])}")
        misaligned = np.any(origins % sizes[:, None] != 0, axis=1)
        if misaligned.any():
            t = int(np.argmax(misaligned))
            raise VolumeError(
                f"expected tile origins that are multiples of the tile size, got {origins[t].tolist()} "
                f"for a tile of {sizes[t]}"
            )
        leaf_keys = self.leaf_origins >> kernel.LEAF_SHIFT
        tiles = np.arange(len(origins), dtype=np.int32)
        tile_codes = kernel.encode_tiles(tiles)
        tables = []
        level_keys = []
        for level, (size, shift) in enumerate(zip(tree.TILE_SIZES, tree.LEVEL_SHIFTS, strict=True)):
            sel = sizes == size
            keys = origins[sel] >> shift
            slots = tile_codes[sel]
            if level == 0:
                keys = np.concatenate([leaf_keys, keys])
                slots = np.concatenate([np.arange(len(leaf_keys), dtype=np.int32), slots])
            if len(keys) == 0:
                tables.append(np.zeros((0, 4), np.int32))
            else:
                tables.append(unique_table(keys, slots, "leaf or tile"))
            level_keys.append(keys)
        # A coarser tile may not cover finer nodes (a NanoVDB node holds a tile or a child, not both).
        for level in (1, 2):
            if len(tables[level]) == 0:
                continue
            for finer in range(level):
                shift = tree.LEVEL_SHIFTS[level] - tree.LEVEL_SHIFTS[finer]
                covered = kernel.table_lookup(tables[level], level_keys[finer] >> shift)
                if np.any(covered != -1):
                    k = level_keys[finer][np.argmax(covered != -1)] << tree.LEVEL_SHIFTS[finer]
                    raise VolumeError(
                        f"expected tiles that do not overlap leaves or other tiles, got a {tree.TILE_SIZES[level]}^3 "
                        f"tile over the node at {k.tolist()}"
                    )
        return tables[0], tables[1], tables[2]

    # -- sizes and bounds ---------------------------------------------------------------------
    def kernel_arrays(self) -> kernel.KernelArrays:
        """What the kernels read of the topology alone - tables, masks, transform - for coverage; a
        one-component float32 background stands in for values, which are never read.  Made once."""
        k = self.__dict__.get("_kernel_arrays")
        if k is None:
            none = np.zeros(0, np.float32)
            k = self._kernel_arrays = kernel.KernelArrays(
                self.tables,
                self.masks,
                self.prefix,
                self.leaf_offset,
                none,
                none,
                np.zeros(1, np.float32),
                1,
                True,
                None,
                self.transform.kernel_parameters(),
                None if self.periodic is None else self.periodic.kernel_parameters(),
            )
        return k

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_kernel_arrays", None)  # rebuilt where it is needed
        state.pop("_without_tiles", None)
        return state

    def with_periodic(self, periodic: Any) -> Topology:
        """This topology with the periods ``periodic`` asks for (:func:`vdbflow.core.periodic.resolve_periodic`:
        True, axis names such as ``"xz"``, 3 bools or periods in voxels, or None for none), a shallow copy
        sharing its arrays (itself when they are the same)."""
        p = resolve_periodic(periodic, self.index_bbox)
        if p == self.periodic:
            return self
        copy = object.__new__(Topology)
        copy.__dict__.update(self.__getstate__())
        copy.periodic = p
        return copy

    def with_leaves(self, leaf_origins: np.ndarray, masks: np.ndarray) -> Topology:
        """A topology of other leaves (L, 3) and masks (L, 8) in tree order, with this one's transform, tiles
        (and their states) and periods."""
        t = self
        topo = Topology(leaf_origins, masks, t.transform, t.tile_origins, t.tile_sizes, tile_active=t.tile_active)
        topo.periodic = t.periodic
        return topo

    def without_tiles(self) -> Topology:
        """This topology's leaves alone, no tiles (itself when it has none): what a level set's stencil
        checks take as data (:func:`vdbflow.ops.coverage.counts_tiles`).  Made once."""
        if not self.tile_count:
            return self
        leaves: Topology | None = self.__dict__.get("_without_tiles")
        if leaves is None:
            leaves = self._without_tiles = Topology(self.leaf_origins, self.masks, self.transform)
            leaves.periodic = self.periodic
        return leaves

    @property
    def leaf_count(self) -> int:
        return len(self.leaf_origins)

    @property
    def tile_count(self) -> int:
        return len(self.tile_origins)

    @property
    def active_tile_count(self) -> int:
        """Tiles whose voxels are active (the rest keep a value, as a level set's interior does)."""
        return int(self.tile_active.sum())

    @property
    def tiles_described(self) -> str:
        """``"12 tiles"``, or ``"329 tiles (0 active)"`` where some are inactive."""
        n, active = self.tile_count, self.active_tile_count
        return f"{n} tiles" if active == n else f"{n} tiles ({active} active)"

    @property
    def active_voxel_count(self) -> int:
        """Active voxels in leaves (tiles not counted)."""
        return int(np.bitwise_count(self.masks).sum()) if self.leaf_count else 0

    @property
    def index_to_world(self) -> np.ndarray:
        return self.transform.index_to_world

    @property
    def voxel_size(self) -> np.ndarray:
        return self.transform.voxel_size

    @property
    def index_bbox(self) -> np.ndarray | None:
        """(2, 3) int64 [min, max] over active voxels and tiles (inclusive), None when empty."""
        return self.bbox_of_tiles(slice(None))

    @property
    def active_bbox(self) -> np.ndarray | None:
        """(2, 3) int64 [min, max] over active voxels and active tiles (inclusive; what a NanoVDB file
        states), None when empty."""
        return self.bbox_of_tiles(self.tile_active)

    def bbox_of_tiles(self, tiles: Any) -> np.ndarray | None:
        """(2, 3) int64 [min, max] over the active voxels and the tiles ``tiles`` selects, None when empty."""
        boxes = []
        leaves = tree.active_bbox(self.leaf_origins, self.masks)
        if leaves is not None:
            boxes.append(leaves)
        lo = self.tile_origins[tiles].astype(np.int64)
        if len(lo):
            boxes.append(np.stack([lo.min(axis=0), (lo + self.tile_sizes[tiles][:, None] - 1).max(axis=0)]))
        if not boxes:
            return None
        return np.stack([np.min([b[0] for b in boxes], axis=0), np.max([b[1] for b in boxes], axis=0)])

    @property
    def world_bbox(self) -> np.ndarray | None:
        """(2, 3) float64 world box of the index box taken as voxel cells [min, max + 1] (as NanoVDB)."""
        box = self.index_bbox
        if box is None:
            return None
        return self.transform.apply_box(box[0], box[1] + 1.0)

    def data_bounds(self, space: str = "world", inner: bool = False) -> np.ndarray | None:
        """(2, 3) float64 box of the voxel centres (and tile voxels) that hold data: ``index_bbox`` itself in
        index space, its eight corners mapped and boxed in world space.  Unlike :attr:`world_bbox` (the
        voxel cells, ``[min, max + 1]``, as NanoVDB records it) this is the span where values were given:
        a point beyond it interpolates towards the background.  ``inner``: the upper faces moved inwards by
        1e-9 of the span, so that a point on them interpolates in the last cell of data (at a centre the
        sampler takes the cell on the positive side, whose far corners are beyond the data).  None when
        empty."""
        box = self.index_bbox
        if box is None:
            return None
        box = box.astype(np.float64)
        if inner:
            box[1] -= 1e-9 * np.maximum(box[1] - box[0], 1.0)
        return box if space == "index" else self.transform.apply_box(box[0], box[1])

    def active_voxels(self) -> np.ndarray:
        """(n, 3) int32 active voxel coordinates in index-layout (OnIndex) order."""
        return tree.active_coordinates(self.leaf_origins, self.masks)

    def leaf_rows(self, leaves: np.ndarray, index_layout: bool) -> np.ndarray:
        """Value rows of ``leaves`` (indices), leaf after leaf: 512 per leaf in the per-leaf layout,
        the leaf's active voxels (from ``leaf_offset``) in the index layout."""
        leaves = np.asarray(leaves, dtype=np.int64)
        if not index_layout:
            return (leaves[:, None] * tree.LEAF_VOXELS + np.arange(tree.LEAF_VOXELS)).ravel()
        counts = np.bitwise_count(self.masks[leaves]).sum(axis=1).astype(np.int64)
        first_in_block = np.cumsum(counts) - counts
        return np.repeat(self.leaf_offset[leaves] - first_in_block, counts) + np.arange(int(counts.sum()))

    def with_data(
        self,
        voxel_data: Any,
        background: Any = 0,
        tile_values: Any = None,
        *,
        name: str = "value",
        component_names: Sequence[str] | None = None,
    ) -> Volume:
        """A Volume in the index layout sharing this topology.

        ``voxel_data`` is (n_active,) or (n_active, C), in ``active_voxels()`` order; inactive
        voxels read ``background``.  ``tile_values`` (T,) or (T, C) gives the tiles' values
        (default: tiles read the background).
        """
        data = np.asarray(voxel_data)
        rows = self.value_count
        if data.ndim not in (1, 2) or data.shape[0] != rows:
            raise VolumeError(
                f"expected voxel_data of shape ({rows},) or ({rows}, C) (one row per indexed value), got {data.shape}"
            )
        if tile_values is None and self.tile_value_index is not None and self.tile_count:
            index = self.tile_value_index
            if np.any(index >= rows):
                raise VolumeError(f"expected tile value rows below {rows}, got {int(index.max())}")
            bg = np.broadcast_to(np.asarray(background, dtype=data.dtype), data.shape[1:])
            tile_values = np.where((index >= 0).reshape((-1,) + (1,) * (data.ndim - 1)), data[np.maximum(index, 0)], bg)
        from vdbflow.core.volume import Volume

        return Volume.from_parts(
            self, data, background, tile_values, index_layout=True, name=name, component_names=component_names
        )

    def to_nvdb(self, path: str, name: str = "index", codec: str = "none", version: str | None = None) -> None:
        """Write this topology as a NanoVDB OnIndex grid (see :func:`vdbflow.save`; NanoVDB 32.6 or later)."""
        from vdbflow.io.nanovdb import save

        save(path, {name: self}, codec=codec, version=version)

    def __getattr__(self, name: str) -> Any:
        """A clear error for what only a Volume does (sampling, statistics, ...), asked of a Topology."""
        if not name.startswith("_"):
            from vdbflow.core.volume import Volume  # a facade import (Topology.with_data)

            if callable(getattr(Volume, name, None)):
                raise NoValuesError(
                    f"expected a Volume for {name}(), got a Topology (an index or mask grid: which voxels exist, "
                    "no values); attach values with topology.with_data(values) first"
                )
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __repr__(self) -> str:
        return (
            f"<vdbflow.Topology: {self.leaf_count} leaves, {self.active_voxel_count} active voxels, "
            f"{self.tiles_described}>"
        )


def leaves_of(ijk: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leaf origins (L, 3) in tree order, leaf slot (n,) and in-leaf offset (n,) of voxels (n, 3)."""
    if len(ijk) == 0:
        return np.zeros((0, 3), np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys, inverse = np.unique(ijk >> kernel.LEAF_SHIFT, axis=0, return_inverse=True)
    order = tree.tree_order(keys)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return (keys[order] << kernel.LEAF_SHIFT).astype(np.int32), rank[inverse.ravel()], tree.voxel_offsets(ijk)


def split_tiles(tiles: Any, with_values: bool) -> tuple[np.ndarray | None, np.ndarray | None, Any]:
    if tiles is None:
        return None, None, None
    parts = tuple(tiles)
    expected = 3 if with_values else 2
    if len(parts) != expected:
        what = "(origins, sizes, values)" if with_values else "(origins, sizes)"
        raise VolumeError(f"expected tiles as {what}, got {len(parts)} items")
    return parts[0], parts[1], (parts[2] if with_values else None)


def voxel_leaves(coords: np.ndarray, values: np.ndarray, bg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The leaves of voxels ``coords`` (n, 3) holding ``values`` (n, C): origins (L, 3) in tree order, masks
    (L, 8) and per-leaf values (L * 512, C) of ``bg``'s dtype, ``bg`` (C,) where no voxel was given."""
    leaf_origins, slot, offset = leaves_of(coords)
    flat = slot * tree.LEAF_VOXELS + offset
    counts = np.bincount(flat, minlength=len(leaf_origins) * tree.LEAF_VOXELS) if len(flat) else np.zeros(0)
    if np.any(counts > 1):
        dup = int(np.argmax(counts[flat] > 1))
        raise VolumeError(f"expected each voxel once, got voxel {coords[dup].tolist()} more than once")
    bits = np.zeros(len(leaf_origins) * tree.LEAF_VOXELS, bool)
    bits[flat] = True
    masks = tree.masks_from_bits(bits.reshape(-1, tree.LEAF_VOXELS))
    data = np.empty((len(leaf_origins) * tree.LEAF_VOXELS, len(bg)), bg.dtype)
    data[:] = bg
    data[flat] = values.reshape(len(coords), len(bg))
    return leaf_origins, masks, data


def active_topology(ijk: Any, transform: Transform, tiles: tuple | None = None) -> Topology:
    """An index-layout topology whose active voxels are ``ijk`` (n, 3) (repeats allowed), with tiles
    ``(origins (T, 3), sizes (T,))``."""
    leaf_origins, slot, offset = leaves_of(as_coordinates(ijk))
    bits = np.zeros(len(leaf_origins) * tree.LEAF_VOXELS, bool)
    bits[slot * tree.LEAF_VOXELS + offset] = True
    masks = tree.masks_from_bits(bits.reshape(-1, tree.LEAF_VOXELS))
    t_origins, t_sizes, _ = split_tiles(tiles, with_values=False)
    return Topology(leaf_origins, masks, transform, t_origins, t_sizes)


def dense_leaves(
    arr4: np.ndarray, active: np.ndarray | None, bg: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The leaves of a dense array ``arr4`` (X, Y, Z, C): origins (L, 3) int32 in tree order, masks
    (L, 8) uint64 and values (L * 512, C) of ``bg``'s dtype.  A voxel is active where ``active``
    (X, Y, Z) says, or by default where it differs from the background ``bg`` (C,)."""
    X, Y, Z, C = arr4.shape
    ny, nz = -(-Y // 8), -(-Z // 8)
    origins, masks, blocks = [], [], []
    for x0 in range(0, X, 8):
        slab = np.empty((8, ny * 8, nz * 8, C), bg.dtype)
        slab[:] = bg
        xs = min(8, X - x0)
        slab[:xs, :Y, :Z] = arr4[x0 : x0 + xs]
        on = np.zeros((8, ny * 8, nz * 8), bool)
        if active is None:
            on[:xs, :Y, :Z] = np.any(arr4[x0 : x0 + xs] != bg, axis=3)
        else:
            on[:xs, :Y, :Z] = active[x0 : x0 + xs]
        # (8, ny, 8, nz, 8) -> (ny, nz, 8, 8, 8): one row of 512 per leaf in voxel-offset order
        leaf_bits = on.reshape(8, ny, 8, nz, 8).transpose(1, 3, 0, 2, 4).reshape(ny * nz, tree.LEAF_VOXELS)
        keep = leaf_bits.any(axis=1)
        if not keep.any():
            continue
        leaf_vals = slab.reshape(8, ny, 8, nz, 8, C).transpose(1, 3, 0, 2, 4, 5)
        leaf_vals = leaf_vals.reshape(ny * nz, tree.LEAF_VOXELS, C)
        jy, jz = np.divmod(np.nonzero(keep)[0], nz)
        origins.append(np.stack([np.full(len(jy), x0), jy * 8, jz * 8], axis=1))
        masks.append(tree.masks_from_bits(leaf_bits[keep]))
        blocks.append(leaf_vals[keep])
    if origins:
        leaf_origins = np.concatenate(origins).astype(np.int32)
        order = tree.tree_order(leaf_origins >> 3)
        leaf_origins = leaf_origins[order]
        mask_arr = np.concatenate(masks)[order]
        data = np.concatenate(blocks)[order].reshape(-1, C)
    else:
        leaf_origins, mask_arr, data = (
            np.zeros((0, 3), np.int32),
            np.zeros((0, 8), np.uint64),
            np.zeros((0, C), bg.dtype),
        )
    return leaf_origins, mask_arr, data


def same_topology(a: Any, b: Any) -> bool:
    """Whether two topologies have the same leaves, masks and tiles (the same active voxels)."""
    return a is b or (
        np.array_equal(a.leaf_origins, b.leaf_origins)
        and np.array_equal(a.masks, b.masks)
        and np.array_equal(a.tile_origins, b.tile_origins)
        and np.array_equal(a.tile_sizes, b.tile_sizes)
    )
