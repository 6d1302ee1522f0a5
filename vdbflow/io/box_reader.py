"""Dense boxes of a grid read leaf by leaf: what the xarray backend (:mod:`~vdbflow.io.xarray_backend`) reads
for each chunk.

A :class:`GridSource` names a grid of a file or store (its :class:`~vdbflow.io.grid_ref.GridRef`).
:meth:`GridSource.read` gives the part of the grid a box needs: for an uncompressed .nvdb file and a .vdb
file, ``vdbflow.open(path, grid, bbox=box)`` (only the leaves and tiles that meet the box; the rest of the
file is not read); for a zip or blosc .nvdb file and a volume store, which vdbflow reads whole, the whole
grid; either read once by each process and kept (:meth:`GridRef.open <vdbflow.io.grid_ref.GridRef.open>`).
:func:`dense_box` turns what was read into the dense values and activity mask of the box.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.volume import Topology, Volume
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import filesystem, is_url, stat_url
from vdbflow.io.openvdb import is_openvdb


class DatasetFile(FileIdentity):
    """What the file or store of a Dataset was when the Dataset was opened: each chunk's read checks it."""

    seen = "the Dataset was opened"


@dataclass(frozen=True)
class GridSource:
    """A grid of a file or store, as the chunks of a Dataset read it (small, picklable: sent to workers):
    its :class:`~vdbflow.io.grid_ref.GridRef`, and whether it is read ``whole`` once per process (zip or
    blosc .nvdb files, volume stores) rather than by the leaves of each box, and whether it is a ``store``."""

    ref: GridRef
    whole: bool
    store: bool = False

    def read(self, lo: np.ndarray, hi: np.ndarray) -> Volume | Topology:
        """The part of the grid the inclusive index box ``[lo, hi]`` (3,) needs: its leaves and tiles (a
        box read) or the whole grid (a source read whole)."""
        return self.ref.open() if self.whole else self.ref.box(lo, hi).open()

    def head(self) -> Volume | Topology:
        """The grid without its leaves (its transform, background, tiles, names and units), or the whole
        grid for a source read whole."""
        return self.ref.open() if self.whole else self.ref.head()

    def declared(self) -> tuple[str, np.ndarray | None]:
        """The grid's name and (2, 3) int64 index box of its data as its file's header gives it (a .vdb
        file's: from its topology; None for an empty grid).  A source read whole: its volume's."""
        if self.store:
            vol = self.ref.open()
            return str(getattr(vol, "name", "")), vol.index_bbox
        info = self.ref.grid_info()
        box = np.asarray(info.index_bbox, np.int64)
        return info.name, None if np.any(box[0] > box[1]) else box


def source_for(path: str, grid: int | str | None, storage_options: dict[str, Any] | None) -> GridSource:
    """How the grid ``grid`` of the file or store ``path`` is read (:class:`GridSource`).

    Parameters
    ----------
    path : str
        A .nvdb or .vdb file, or a volume store (a directory, or a ``.zarr`` path), local or a URL.
    grid : int or str or None
        The grid, as ``vdbflow.open`` takes it.
    storage_options : dict, optional
        Passed on to ``vdbflow.open`` and ``vdbflow.list_grids`` (URLs).

    Returns
    -------
    GridSource
        Read by boxes (uncompressed .nvdb, .vdb) or whole (zip or blosc .nvdb, volume stores).
    """
    ref = GridRef.to(path, grid, storage_options=storage_options, identity=DatasetFile)
    url = is_url(path)
    if path.rstrip("/").lower().endswith(".zarr") or (
        stat_url(*filesystem(ref.path), ref.path).get("type") == "directory" if url else os.path.isdir(ref.path)
    ):
        return GridSource(ref, True, True)
    if not url and is_openvdb(ref.path):
        return GridSource(ref, False)  # leaves decompressed by the box
    info = ref.grid_info()
    # read whole: compressed .nvdb grids (decompressed whole) and .vdb objects (vdbflow reads them whole)
    return GridSource(ref, info.codec != "none" or (url and str(info.grid_type).startswith("Tree_")))  # OpenVDB's


def dense_box(vol: Volume | Topology, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The values and activity mask of the inclusive index box ``[lo, hi]`` of a volume (or topology).

    Parameters
    ----------
    vol : Volume or Topology
        What was read of the grid: at least the leaves and tiles that meet the box.
    lo, hi : array_like of int, shape (3,)
        The box's first and last voxel (index coordinates).

    Returns
    -------
    values : numpy.ndarray or None
        (X, Y, Z) or (X, Y, Z, C) of the volume's dtype, indexed ``[i - lo[0], j - lo[1], k - lo[2]]``:
        the values of the active voxels of the leaves, the tiles' values over the tiles, the background
        elsewhere (inactive voxels of a leaf too).  None for a topology.
    mask : numpy.ndarray
        (X, Y, Z) bool: True at the leaves' active voxels and over the tiles (vdbflow keeps the tiles whose
        value is not the background; its sampler reads them as data).
    """
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    shape = tuple(int(n) for n in hi - lo + 1)
    topo = vol.topology if isinstance(vol, Volume) else vol
    mask = np.zeros(shape, bool)
    values = None
    if isinstance(vol, Volume):
        values = np.empty((*shape, vol.components), vol.dtype)
        values[...] = vol.background_values
    t_lo = topo.tile_origins.astype(np.int64)
    t_hi = t_lo + topo.tile_sizes.astype(np.int64)[:, None] - 1
    for t in np.flatnonzero(np.all((t_lo <= hi) & (t_hi >= lo), axis=1)):
        a, b = np.maximum(t_lo[t], lo) - lo, np.minimum(t_hi[t], hi) - lo + 1
        cells = tuple(slice(int(a[d]), int(b[d])) for d in range(3))
        mask[cells] = True
        if values is not None and isinstance(vol, Volume):
            values[cells] = vol.tile_values[t]
    origins = topo.leaf_origins.astype(np.int64)
    meet = np.flatnonzero(np.all((origins <= hi) & (origins + tree.LEAF_DIM - 1 >= lo), axis=1))
    if len(meet):
        leaf, offset = np.nonzero(tree.bits_from_masks(topo.masks[meet]))
        ijk = origins[meet][leaf] + tree.LOCAL_COORDINATES[offset]
        inside = np.all((ijk >= lo) & (ijk <= hi), axis=1)
        at = tuple((ijk[inside] - lo).T)
        mask[at] = True
        if values is not None and isinstance(vol, Volume):
            if vol.index_layout:  # the leaves' active voxels, leaf by leaf, by mask bit: np.nonzero's order
                values[at] = vol.value_rows()[topo.leaf_rows(meet, True)[inside]]
            else:  # only these leaves' values (a view into a mapped file until indexed)
                values[at] = vol.leaf_values[meet][leaf[inside], offset[inside]]
    if values is not None and values.shape[-1] == 1:
        values = values[..., 0]
    return values, mask


LEAF_BATCH = 4096  # leaves whose 512 bits are unpacked at once by picked_box


def picked_box(vol: Volume | Topology, picks: tuple[np.ndarray, ...]) -> tuple[np.ndarray | None, np.ndarray]:
    """The values and activity mask at the outer product of index lists: what :func:`dense_box` gives, at
    ``picks[0] x picks[1] x picks[2]`` only (a strided selection), without the dense box they span.

    Parameters
    ----------
    vol : Volume or Topology
        What was read of the grid: at least the leaves and tiles that hold a picked voxel.
    picks : tuple of 3 numpy.ndarray of int
        The i, j and k indices picked, each sorted ascending without repeats.

    Returns
    -------
    values : numpy.ndarray or None
        (len(picks[0]), len(picks[1]), len(picks[2])[, C]), as :func:`dense_box`'s; None for a topology.
    mask : numpy.ndarray
        Bool of that shape: True at active voxels and over tiles.
    """
    p = [np.asarray(a, np.int64) for a in picks]
    shape = tuple(len(a) for a in p)
    topo = vol.topology if isinstance(vol, Volume) else vol
    mask = np.zeros(shape, bool)
    values = None
    if isinstance(vol, Volume):
        values = np.empty((*shape, vol.components), vol.dtype)
        values[...] = vol.background_values
    t_lo = topo.tile_origins.astype(np.int64)
    t_hi = t_lo + topo.tile_sizes.astype(np.int64)[:, None] - 1
    first, last = _pick_spans(p, t_lo, t_hi)
    for t in np.flatnonzero(np.all(last > first, axis=1)):
        cells = tuple(slice(int(first[t, d]), int(last[t, d])) for d in range(3))
        mask[cells] = True
        if values is not None and isinstance(vol, Volume):
            values[cells] = vol.tile_values[t]
    origins = topo.leaf_origins.astype(np.int64)
    first, last = _pick_spans(p, origins, origins + tree.LEAF_DIM - 1)
    meet = np.flatnonzero(np.all(last > first, axis=1))
    for start in range(0, len(meet), LEAF_BATCH):
        _fill_leaves(vol, topo, meet[start : start + LEAF_BATCH], p, values, mask)
    if values is not None and values.shape[-1] == 1:
        values = values[..., 0]
    return values, mask


def _pick_spans(p: list[np.ndarray], lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For boxes ``[lo, hi]`` (n, 3): the first and one-past-last position in each axis' picks inside them."""
    first = np.stack([np.searchsorted(p[d], lo[:, d], "left") for d in range(3)], axis=1).reshape(-1, 3)
    last = np.stack([np.searchsorted(p[d], hi[:, d], "right") for d in range(3)], axis=1).reshape(-1, 3)
    return first, last


def _fill_leaves(
    vol: Volume | Topology,
    topo: Topology,
    leaves: np.ndarray,
    p: list[np.ndarray],
    values: np.ndarray | None,
    mask: np.ndarray,
) -> None:
    """Write the active, picked voxels of ``leaves`` into ``values`` and ``mask`` (:func:`picked_box`)."""
    origins = topo.leaf_origins[leaves].astype(np.int64)
    local = np.arange(tree.LEAF_DIM)
    where, hit = [], []
    for d in range(3):  # per leaf and local coordinate: whether picked, and where among the picks
        index = origins[:, d, None] + local
        pos = np.searchsorted(p[d], index)
        where.append(np.minimum(pos, len(p[d]) - 1))
        hit.append((pos < len(p[d])) & (p[d][where[d]] == index))
    lc = tree.LOCAL_COORDINATES
    bits = tree.bits_from_masks(topo.masks[leaves])
    leaf, offset = np.nonzero(bits)
    keep = hit[0][leaf, lc[offset, 0]] & hit[1][leaf, lc[offset, 1]] & hit[2][leaf, lc[offset, 2]]
    leaf_k, offset_k = leaf[keep], offset[keep]
    at = tuple(where[d][leaf_k, lc[offset_k, d]] for d in range(3))
    mask[at] = True
    if values is None or not isinstance(vol, Volume):
        return
    if vol.index_layout:  # rows of the leaves' active voxels in np.nonzero's order, those kept
        values[at] = vol.value_rows()[topo.leaf_rows(leaves, True)[keep]]
    else:
        values[at] = vol.leaf_values[leaves[leaf_k], offset_k]


MAX_PICKED_BOXES = 4096  # boxes one strided selection is read in (runs of leaves picked, merged past this)
RUN_LEAVES = 32  # leaves a side of one such box at most (a longer run of picked leaves is cut)


def read_picked(source: GridSource, picks: list[np.ndarray]) -> tuple[np.ndarray | None, np.ndarray]:
    """:func:`picked_box` of a grid at the sorted i, j, k index lists ``picks``, the grid read box by box:
    one box per run of consecutive leaves holding picked voxels (so ``[::512]`` of a 2048^3 box reads 64
    leaves, not the box; at most :data:`MAX_PICKED_BOXES` boxes, of :data:`RUN_LEAVES` leaves a side
    unless merged).  A source read whole is read once."""
    runs = [_runs(p) for p in picks]
    if source.whole:
        runs = [[(0, len(p))] for p in picks]
    while np.prod([len(r) for r in runs], dtype=np.float64) > MAX_PICKED_BOXES:
        a = int(np.argmax([len(r) for r in runs]))
        runs[a] = [(runs[a][i][0], runs[a][min(i + 1, len(runs[a]) - 1)][1]) for i in range(0, len(runs[a]), 2)]
    shape = tuple(len(p) for p in picks)
    values: np.ndarray | None = None
    mask = np.zeros(shape, bool)
    for box in itertools.product(*runs):
        part = [p[a:b] for p, (a, b) in zip(picks, box, strict=True)]
        lo, hi = np.array([q[0] for q in part]), np.array([q[-1] for q in part])
        got, got_mask = picked_box(source.read(lo, hi), tuple(part))
        cells = tuple(slice(a, b) for a, b in box)
        mask[cells] = got_mask
        if got is not None:
            if values is None:
                values = np.empty(shape + got.shape[3:], got.dtype)
            values[cells] = got
    return values, mask


def _runs(picked: np.ndarray) -> list[tuple[int, int]]:
    """``[start, stop)`` positions in the sorted ``picked`` of runs whose leaves (index // 8) follow one
    another without a gap, cut where they cross a block of :data:`RUN_LEAVES` leaves."""
    leaf = np.floor_divide(picked, tree.LEAF_DIM)
    cut = (np.diff(leaf) > 1) | (np.diff(np.floor_divide(leaf, RUN_LEAVES)) != 0)
    edges = [0, *(np.flatnonzero(cut) + 1).tolist(), len(picked)]
    return list(itertools.pairwise(edges))
