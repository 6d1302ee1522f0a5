"""The records the reader hands out and keeps: :class:`GridInfo` (what a grid is, from its headers),
:class:`BlindData` (a grid's blind data record, kept as bytes) and :class:`GridSource` (where a grid's
bytes are in a file or buffer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core.transform import box_to_world
from vdbflow.core.value_types import ValueType


@dataclass(frozen=True)
class GridInfo:
    """What a grid is, without decoding its nodes."""

    index: int
    name: str
    grid_type: str
    # what open_grid reads the values as (Half and Fp4/8/16/N: float32); None for a grid without values
    # of its own (Index, OnIndex: values are external; Mask, Boolean: a topology) or of a type not read
    value_type: ValueType | None
    grid_class: str
    leaf_count: int
    lower_count: int
    upper_count: int
    tile_counts: tuple[int, int, int]  # lower, upper, root
    active_voxel_count: int
    index_bbox: tuple[tuple[int, int, int], tuple[int, int, int]]
    # NanoVDB's header box, the index box taken as [min, max + 1] and mapped (computed so for a .vdb); not
    # vdbflow's box of the data, which is :attr:`centre_bbox` (docs/design.md, "Boxes")
    world_bbox: tuple[tuple[float, float, float], tuple[float, float, float]]
    index_to_world: np.ndarray = field(repr=False)
    voxel_size: tuple[float, float, float]
    codec: str
    version: str
    grid_size: int
    checksum: int
    units: str | None = None  # from vdbflow's metadata record, where the grid has one
    length_units: str | None = None
    component_names: tuple[str, ...] | None = None  # None: not stored (x, y, z, w)
    periodic: Any = None  # a vdbflow.core.periodic.Periodicity, from vdbflow's metadata record; None: not periodic

    @property
    def centre_bbox(self) -> np.ndarray | None:
        """(2, 3) world box of the voxel centres: the box of the data (where the values lie, ``data_bounds``
        of the opened volume; docs/design.md, "Boxes"), None for an empty grid."""
        lo, hi = np.asarray(self.index_bbox, np.float64)
        return None if (lo > hi).any() else box_to_world(self.index_to_world, lo, hi)


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
class GridSource:
    """Where a grid's bytes are: a buffer and the offset of its GridData."""

    buffer: np.ndarray
    offset: int
    codec: str
    file_name: str | None
    chunks: tuple[tuple[int, int, int], ...] = ()  # compressed: (byte offset, size, uncompressed size)
