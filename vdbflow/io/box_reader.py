"""Dense boxes of a grid read leaf by leaf: what the xarray backend (:mod:`~vdbflow.io.xarray_backend`) reads
for each chunk.

A :class:`GridSource` names a grid of a file or store.  :meth:`GridSource.read` gives the part of the grid a
box needs: for an uncompressed .nvdb file and a .vdb file, ``vdbflow.open(path, grid, bbox=box)`` (only the
leaves and tiles that meet the box; the rest of the file is not read); for a zip or blosc .nvdb file and a
volume store, which vdbflow reads whole, the whole grid, read once by each process and kept.
:func:`dense_box` turns what was read into the dense values and activity mask of the box.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from vdbflow.core import tree
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import VolumeError
from vdbflow.io.location import filesystem, is_url, local_path, object_size, stat_url, version_tag
from vdbflow.io.volumes import list_grids, open_volume

_T = TypeVar("_T")
BOX_CACHE = 32  # boxes each process keeps (a chunk's values and its mask read the same box)
WHOLE_CACHE = 4  # grids read whole that each process keeps


def file_identity(path: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """What tells a file or store apart from one put in its place later: a local one's device, inode, size,
    modification and change times, an object's size and version tag (ETag).  Part of the caches' keys: a replaced
    file is read again."""
    if is_url(path):
        fs, inner = filesystem(path, storage_options)
        info = stat_url(fs, inner, path)
        return str(info.get("type")), object_size(info, path), version_tag(info)
    try:
        st = os.stat(local_path(path))
    except OSError:
        return ()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns  # ctime: a rewrite with mtime put back


def options_key(storage_options: dict[str, Any] | None) -> str | None:
    """``storage_options`` as hashable text (the caches' key), None when not given."""
    if storage_options is None:
        return None
    if not isinstance(storage_options, dict):
        raise VolumeError(f"expected storage_options as a dict, got {type(storage_options).__name__}")
    try:
        return json.dumps(storage_options, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise VolumeError(f"expected storage_options of JSON-like values (a dict of str keys), got: {err}") from None


@dataclass(frozen=True)
class GridSource:
    """A grid of a file or store, as the chunks of a Dataset read it (small, picklable: sent to workers).

    Attributes
    ----------
    path : str
        The file or store (a local path or a URL).
    grid : int or str or None
        The grid (index or name) as ``vdbflow.open`` takes it.
    whole : bool
        Read the whole grid once per process (zip or blosc .nvdb files, volume stores) rather than the
        leaves of each box.
    store : bool
        A volume store (read whole), not a file.
    options : str or None
        ``storage_options`` as JSON text.
    identity : tuple
        The file's identity when the Dataset was opened (:func:`file_identity`).
    """

    path: str
    grid: int | str | None
    whole: bool
    store: bool = False
    options: str | None = None
    identity: tuple[Any, ...] = ()

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """The ``storage_options`` (a dict again), None when not given."""
        return None if self.options is None else json.loads(self.options)

    def read(self, lo: np.ndarray, hi: np.ndarray) -> Volume | Topology:
        """The part of the grid the inclusive index box ``[lo, hi]`` (3,) needs: its leaves and tiles (a
        box read) or the whole grid (a source read whole)."""
        if self.whole:
            return _whole(self)
        return _box(self, tuple(int(v) for v in lo), tuple(int(v) for v in hi))

    def head(self) -> Volume | Topology:
        """The grid without its leaves (its transform, background, tiles, names and units), or the whole
        grid for a source read whole."""
        if self.whole:
            return _whole(self)
        return open_volume(self.path, self.grid, leaves=[], storage_options=self.storage_options)

    def declared(self) -> tuple[str, np.ndarray | None]:
        """The grid's name and (2, 3) int64 index box of its data as its file's header gives it (a .vdb
        file's: from its topology; None for an empty grid).  A source read whole: its volume's."""
        if self.store:
            vol = _whole(self)
            return str(getattr(vol, "name", "")), vol.index_bbox
        infos = list_grids(self.path, storage_options=self.storage_options)
        info = infos[_grid_index(infos, self.grid, self.path, self.storage_options)]
        box = np.asarray(info.index_bbox, np.int64)
        return info.name, None if np.any(box[0] > box[1]) else box


@functools.lru_cache(maxsize=WHOLE_CACHE)
def _whole(source: GridSource) -> Volume | Topology:
    return _same_file(source, lambda: open_volume(source.path, source.grid, storage_options=source.storage_options))


@functools.lru_cache(maxsize=BOX_CACHE)
def _box(source: GridSource, lo: tuple[int, ...], hi: tuple[int, ...]) -> Volume | Topology:
    return _same_file(
        source, lambda: open_volume(source.path, source.grid, bbox=(lo, hi), storage_options=source.storage_options)
    )


def _same_file(source: GridSource, read: Callable[[], _T]) -> _T:
    """``read()``, the file or store checked to be the one the Dataset was opened on before and after it:
    one renamed over it (or rewritten) is a VolumeError naming it, never read as a part of that Dataset."""
    _check_identity(source)
    result = read()
    _check_identity(source)
    return result


def _check_identity(source: GridSource) -> None:
    if not source.identity:
        return
    now = file_identity(source.path, source.storage_options)
    if now != source.identity:
        raise VolumeError(
            f"expected {source.path} to be the file the Dataset was opened on ({_described(source.identity)}), "
            f"found {_described(now)}: it was replaced or rewritten since; open the Dataset again"
        )


def _described(identity: tuple[Any, ...]) -> str:
    if not identity:
        return "nothing there"
    if len(identity) == 3:
        return f"{identity[1]:,} bytes, tag {identity[2]!r}"
    return f"inode {identity[1]}, {identity[2]:,} bytes, mtime {identity[3]} ns, ctime {identity[4]} ns"


def clear_caches() -> None:
    """Forget the grids and boxes this process has read (the next chunk reads its file again)."""
    _whole.cache_clear()
    _box.cache_clear()


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
    from vdbflow.io.openvdb import is_openvdb

    options = options_key(storage_options)
    identity = file_identity(path, storage_options)
    url = is_url(path)
    local = None if url else local_path(path)
    store = os.path.isdir(local) if local is not None else identity[0] == "directory"
    if store or path.rstrip("/").lower().endswith(".zarr"):
        return GridSource(path, grid, True, True, options, identity)
    if local is not None and is_openvdb(local):
        return GridSource(path, grid, False, False, options, identity)  # leaves decompressed by the box
    infos = list_grids(path, storage_options=storage_options)
    info = infos[_grid_index(infos, grid, path, storage_options)]
    # read whole: compressed .nvdb grids (decompressed whole) and .vdb objects (vdbflow reads them whole)
    whole = info.codec != "none" or (url and str(info.grid_type).startswith("Tree_"))  # OpenVDB's tree types
    return GridSource(path, grid, whole, False, options, identity)


def _grid_index(infos: list[Any], grid: int | str | None, path: str, storage_options: dict[str, Any] | None) -> int:
    """The position of ``grid`` among a file's grids (the reader's own error when it has none such)."""
    if grid is None:
        return 0
    names = [i.name for i in infos]
    if isinstance(grid, str) and grid in names:
        return names.index(grid)
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool) and 0 <= grid < len(infos):
        return int(grid)
    open_volume(path, grid, leaves=[], storage_options=storage_options)  # the format's own error, naming the grids
    raise VolumeError(f"expected a grid index in [0, {len(infos)}) or one of the names {names} of {path}, got {grid!r}")


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
