"""xarray's door: ``xr.open_dataset(path, engine="vdbflow")`` opens a grid of a .nvdb or .vdb file or a
volume store as dense, lazy arrays over its box of data (docs/xarray.md).

The grid's values are a variable named for the grid, on dims ``x, y, z`` (``dim_order="zyx"``: ``z, y,
x``) and, for vector grids, ``component``; ``<name>_active`` is its activity mask.  Nothing is read when
the Dataset is opened but the file's headers (a volume store, or a zip or blosc .nvdb file, which vdbflow
reads whole: the grid); indexing or computing a chunk reads the leaves and tiles of its box through
:mod:`~vdbflow.io.box_reader`.  The backend's preferred chunks (``chunks={}``) are aligned to whole 8^3
leaves: ``leaf_chunks`` voxels a side (64 by default, rounded up to a multiple of 8), their boundaries
at multiples of it in index space.  Coordinates are the voxel centres in world units, for axis-aligned
transforms.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.core import indexing

from vdbflow.core import tree
from vdbflow.core.volume import Volume
from vdbflow.errors import VolumeError
from vdbflow.io import zarr_v2
from vdbflow.io.box_reader import GridSource, dense_box, read_picked, source_for
from vdbflow.io.location import is_url
from vdbflow.io.nanovdb import format as nvdb
from vdbflow.io.openvdb import format as ovdb
from vdbflow.io.selection import index_box
from vdbflow.io.volumes import FORMAT

DIM_ORDERS = {"xyz": ("x", "y", "z"), "zyx": ("z", "y", "x")}
AXES = {"x": 0, "y": 1, "z": 2}
INDEX_NAMES = {"x": "i", "y": "j", "z": "k"}
COMPONENT_DIM = "component"
COORDINATE_NAMES = {*AXES, *INDEX_NAMES.values(), COMPONENT_DIM}
DEFAULT_LEAF_CHUNKS = 64
SUFFIXES = (".nvdb", ".vdb")
MAX_EXTENT = 1 << 24  # voxels a side of a Dataset's box (its coordinates: 128 MiB an axis)
MAX_CHUNKS = 1 << 22  # chunks of a Dataset's box (a Dask graph of millions of tasks takes minutes to build)


class LeafBoxArray(BackendArray):
    """A grid's values (``part="values"``) or activity mask (``part="mask"``) over the index box of
    ``extent`` (3,) voxels from ``lo`` (3,), in the order of ``dims``; each indexing reads the leaves and
    tiles of the box it covers (:meth:`GridSource.read`)."""

    def __init__(self, source: GridSource, lo: Any, extent: Any, dims: tuple[str, ...], part: str, vt: Any):
        self.source, self.dims, self.part = source, dims, part
        self.lo, self.extent = np.asarray(lo, np.int64), np.asarray(extent, np.int64)
        self.dtype = np.dtype(bool) if part == "mask" else np.dtype(vt.dtype)
        spatial = tuple(int(self.extent[AXES[d]]) for d in dims)
        self.shape = (*spatial, vt.components) if part == "values" and vt.components > 1 else spatial

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._read)

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        """The entries of a basic key (an int or a slice a dim): the box they span, read and cut; a strided
        selection reads only the leaves of the voxels it picks (:meth:`_read_picked`), never its span dense."""
        picks = []
        for n in range(len(self.dims)):
            picked = np.atleast_1d(np.asarray(range(self.shape[n])[key[n]], np.int64))
            if picked.size == 0:  # an empty selection reads nothing
                return np.zeros(np.broadcast_to(np.empty((), bool), self.shape)[key].shape, self.dtype)  # no copy
            picks.append(picked)
        if any(int(p.max()) - int(p.min()) + 1 != len(p) for p in picks):
            return self._read_picked(key, picks)
        lo, hi, local = self.lo.copy(), self.lo.copy(), []
        for n, dim in enumerate(self.dims):
            first = int(picks[n].min())
            lo[AXES[dim]], hi[AXES[dim]] = self.lo[AXES[dim]] + first, self.lo[AXES[dim]] + int(picks[n].max())
            local.append(_shifted(key[n], picks[n], first))
        values, mask = dense_box(self.source.read(lo, hi), lo, hi)
        block = self._part(values, mask)
        return np.asarray(block[tuple(local) + tuple(key[3:])])

    def _part(self, values: np.ndarray | None, mask: np.ndarray) -> np.ndarray:
        """The values or the mask (as ``part`` says) of a block in i, j, k order, in the order of ``dims``."""
        block = mask if self.part == "mask" else values
        if block is None:
            raise VolumeError(f"expected a grid of values in {self.source.ref.path}, got a topology (no values)")
        axes = [AXES[d] for d in self.dims]
        return np.transpose(block, axes + ([3] if block.ndim == 4 else []))

    def _read_picked(self, key: tuple[Any, ...], picks: list[np.ndarray]) -> np.ndarray:
        """A strided selection: the voxels at the picked indices (``picks``, per dim, in the key's order)."""
        ordered: list[np.ndarray] = [np.empty(0, np.int64)] * 3
        for n, dim in enumerate(self.dims):
            ordered[AXES[dim]] = np.unique(picks[n]) + self.lo[AXES[dim]]
        values, mask = read_picked(self.source, ordered)
        block = self._part(values, mask)
        for n in reversed(range(len(self.dims))):  # the key's order and ints, last dim first
            at = np.searchsorted(np.unique(picks[n]), picks[n])
            block = np.take(block, int(at[0]) if isinstance(key[n], (int, np.integer)) else at, axis=n)
        return np.asarray(block[(Ellipsis, *key[3:])])


def _shifted(k: Any, picked: np.ndarray, first: int) -> Any:
    """One dim's key ``k`` (selecting ``picked``) in a block that starts at ``first``."""
    if not isinstance(k, slice):
        return int(picked[0]) - first
    step = int(k.step or 1)
    start, last = int(picked[0]) - first, int(picked[-1]) - first
    stop = last + (1 if step > 0 else -1)
    return slice(start, None if stop < 0 else stop, step)


def leaf_chunk_sizes(leaf_chunks: int | Mapping[str, int], dims: Iterable[str]) -> dict[str, int]:
    """Voxels a side of the backend's chunks, each dim's rounded up to a multiple of the leaf's 8.

    Parameters
    ----------
    leaf_chunks : int or mapping of str to int
        One size for every spatial dim, or a size by dim name (``{"x": 32}``; dims not named take 64).
    dims : iterable of str
        The spatial dims.

    Returns
    -------
    dict of str to int
        A multiple of 8 (at least 8) for each dim.
    """
    dims = tuple(dims)
    given = dict(leaf_chunks) if isinstance(leaf_chunks, Mapping) else dict.fromkeys(dims, leaf_chunks)
    unknown = sorted(set(given) - set(dims))
    if unknown:
        raise VolumeError(f"expected leaf_chunks for the dims {list(dims)}, got {unknown}")
    out = {}
    for dim in dims:
        size = given.get(dim, DEFAULT_LEAF_CHUNKS)
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise VolumeError(f"expected leaf_chunks of positive integers (voxels a side), got {size!r} for {dim}")
        out[dim] = -(-int(size) // tree.LEAF_DIM) * tree.LEAF_DIM
    return out


def aligned_chunks(lo: int, extent: int, size: int) -> tuple[int, ...]:
    """Chunks of ``extent`` voxels from index ``lo`` whose boundaries fall on multiples of ``size``
    (a multiple of 8: whole leaves) in index space; the first and last may be shorter."""
    first = min(size - lo % size, extent)
    rest = extent - first
    return (first, *(size,) * (rest // size), *((rest % size,) if rest % size else ()))


def _box(source: GridSource, bbox: Any, head: Any) -> tuple[str, np.ndarray]:
    """The grid's name and the index box (2, 3) the Dataset spans: ``bbox``, or the grid's box of data
    (its header's box and its tiles)."""
    name, declared = source.declared()
    if bbox is not None:
        box = index_box(bbox, VolumeError)
        assert box is not None
        if np.any(box[0] > box[1]):
            raise VolumeError(f"expected a bbox with each lower bound at most its upper bound, got {box.tolist()}")
        if box.min() < np.iinfo(np.int32).min or box.max() > np.iinfo(np.int32).max:
            raise VolumeError(f"expected a bbox inside the int32 index range of grids, got {box.tolist()}")
        return name, box
    boxes = [b for b in (declared, head.index_bbox) if b is not None]
    if not boxes:
        raise VolumeError(f"expected a grid with data in {source.ref.path}, got an empty grid: give its bbox=")
    return name, np.stack([np.min([b[0] for b in boxes], 0), np.max([b[1] for b in boxes], 0)]).astype(np.int64)


def _coordinates(head: Any, name: str, box: np.ndarray, dims: tuple[str, ...], source: GridSource) -> dict[str, Any]:
    """World coordinates of the voxel centres (an axis-aligned transform's) and index coordinates."""
    transform = head.transform
    if not transform.is_axis_aligned:
        raise VolumeError(
            f"expected an axis-aligned index-to-world transform (a diagonal matrix) for the coordinates x, y, z "
            f"of grid {name!r} in {source.ref.path}, got {transform!r}: sample it at world points with "
            "vdbflow.open(path).sample(points) instead"
        )
    matrix = transform.index_to_world
    units = {"units": head.length_units} if head.length_units else {}
    coords: dict[str, Any] = {}
    for dim in dims:
        a = AXES[dim]
        index = np.arange(box[0, a], box[1, a] + 1, dtype=np.int64)
        world = index * matrix[a, a] + matrix[a, 3]
        attrs = {"long_name": f"{dim} of the voxel centres", "axis": dim.upper(), **units}
        coords[dim] = xr.Variable((dim,), world + 0.0, attrs)  # + 0.0: -0 as +0, as Transform.apply gives it
        coords[INDEX_NAMES[dim]] = xr.Variable((dim,), index, {"long_name": f"{INDEX_NAMES[dim]} index of the voxel"})
    return coords


def open_grid_dataset(
    path: str | os.PathLike,
    *,
    grid: int | str | None = None,
    bbox: Any = None,
    leaf_chunks: int | Mapping[str, int] = DEFAULT_LEAF_CHUNKS,
    dim_order: str = "xyz",
    storage_options: dict[str, Any] | None = None,
    drop_variables: str | Iterable[str] | None = None,
) -> xr.Dataset:
    """A grid of a .nvdb or .vdb file or a volume store as a Dataset of lazy dense arrays.

    What ``xr.open_dataset(path, engine="vdbflow", ...)`` returns (xarray then chunks it: ``chunks={}``
    for Dask arrays in the backend's leaf-aligned chunks).

    Parameters
    ----------
    path : str or os.PathLike
        A .nvdb or OpenVDB .vdb file, or a volume store (``Volume.to_zarr``); a URL with
        ``storage_options`` where ``vdbflow.open`` reads URLs.
    grid : int or str, optional
        The grid (index or name; default the first), as ``vdbflow.open`` takes it.
    bbox : array_like of shape (2, 3), optional
        The inclusive index box ``((i0, j0, k0), (i1, j1, k1))`` to span; default the grid's box of data
        (its active voxels and tiles).
    leaf_chunks : int or mapping of str to int, default 64
        Voxels a side of the preferred chunks, rounded up to a multiple of 8 (:func:`leaf_chunk_sizes`).
    dim_order : {"xyz", "zyx"}, default "xyz"
        The spatial dims' order: ``x, y, z`` (index i, j, k) or, as CF users expect, ``z, y, x``.
    storage_options : dict, optional
        Passed on to ``vdbflow.open`` (only when given).
    drop_variables : str or iterable of str, optional
        Variables (and coordinates) to leave out.

    Returns
    -------
    xarray.Dataset
        ``<grid>``: the values (dims ``x, y, z`` [, ``component``]; ``<grid>_values`` for a grid named as a
        coordinate), background where no data;
        ``<grid>_active``: bool, True at active voxels and tiles; coordinates ``x, y, z`` (voxel centres,
        world units: ``units`` is the length units where known) and ``i, j, k`` (index), ``component``
        (the component names).  Attrs: the grid's name, value type, ``index_to_world`` (16 numbers),
        ``index_bbox`` (6), ``units`` and ``background`` on the values.  A grid without values (OnIndex,
        mask and bool grids) gives only the mask.

    Raises
    ------
    VolumeError
        A non-axis-aligned transform, an empty grid without ``bbox``, a bad ``bbox``, ``leaf_chunks``,
        ``dim_order``, ``drop_variables`` or ``storage_options``; a file replaced since the Dataset was opened
        (when a chunk is read).
    NanoVDBError, OpenVDBError
        A malformed file or a grid it lacks (the reader's own errors).
    """
    if not isinstance(dim_order, str) or dim_order not in DIM_ORDERS:
        raise VolumeError(f"expected dim_order 'xyz' or 'zyx', got {type(dim_order).__name__} {dim_order!r:.80}")
    dims = DIM_ORDERS[dim_order]
    drop = _names(drop_variables)
    sizes = leaf_chunk_sizes(leaf_chunks, dims)
    source = source_for(os.fspath(path), grid, storage_options)
    head = source.head()
    name, box = _box(source, bbox, head)
    name = name or (head.name if isinstance(head, Volume) and head.name else "value")
    values_name = f"{name}_values" if name in COORDINATE_NAMES else name  # a grid named "x" or "k"
    extent = box[1] - box[0] + 1
    _check_size(extent, sizes, dims)
    coords = _coordinates(head, name, box, dims, source)
    preferred = {d: aligned_chunks(int(box[0, AXES[d]]), int(extent[AXES[d]]), sizes[d]) for d in dims}
    variables: dict[str, xr.Variable] = {}
    mask = LeafBoxArray(source, box[0], extent, dims, "mask", np.dtype(bool))
    if isinstance(head, Volume):
        values = LeafBoxArray(source, box[0], extent, dims, "values", head.value_type)
        vdims = (*dims, COMPONENT_DIM) if head.components > 1 else dims
        attrs = {"long_name": name, "background": np.asarray(head.background_values).reshape(-1).tolist()}
        if head.components == 1:
            attrs["background"] = attrs["background"][0]
        if head.units:
            attrs["units"] = head.units
        variables[values_name] = xr.Variable(vdims, indexing.LazilyIndexedArray(values), attrs)
        variables[values_name].encoding["preferred_chunks"] = preferred
        if head.components > 1:
            coords[COMPONENT_DIM] = xr.Variable((COMPONENT_DIM,), np.array(head.component_names, dtype=object))
    active = f"{name}_active"
    variables[active] = xr.Variable(
        dims, indexing.LazilyIndexedArray(mask), {"long_name": f"whether {name} holds data (active voxels, tiles)"}
    )
    variables[active].encoding["preferred_chunks"] = preferred
    ds = xr.Dataset(
        {k: v for k, v in variables.items() if k not in drop},
        coords={k: v for k, v in coords.items() if k not in drop},
        attrs=_attrs(head, name, box),
    )
    return _indexed(ds)


def _indexed(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with ``i, j, k`` indexed beside ``x, y, z``: plain arrays after xarray's chunking (``chunks={}``
    makes every coordinate without an index a Dask array), and ``ds.sel(i=...)`` works."""
    for index_name in INDEX_NAMES.values():
        if index_name in ds.coords:
            ds = ds.set_xindex(index_name)
    return ds


def _names(drop_variables: Any) -> set[str]:
    """``drop_variables`` (None, a name or an iterable of names) as a set of names (a VolumeError else)."""
    if drop_variables is None:
        return set()
    if isinstance(drop_variables, str):
        return {drop_variables}
    if isinstance(drop_variables, (bytes, Mapping)) or not isinstance(drop_variables, Iterable):
        raise VolumeError(
            f"expected drop_variables as a name or an iterable of names, got {type(drop_variables).__name__} "
            f"{drop_variables!r:.80}"
        )
    names = list(drop_variables)
    wrong = [n for n in names if not isinstance(n, str)]
    if wrong:
        raise VolumeError(f"expected drop_variables as variable names (str), got {wrong!r:.80} among the names")
    return set(names)


def _check_size(extent: np.ndarray, sizes: dict[str, int], dims: tuple[str, ...]) -> None:
    """A box whose coordinates fit in memory and whose chunks a Dask graph can hold (a VolumeError)."""
    if extent.max() > MAX_EXTENT:
        raise VolumeError(
            f"expected a box of at most {MAX_EXTENT:,} voxels a side (its coordinates are in memory), got "
            f"{extent.tolist()}: give a smaller bbox="
        )
    chunks = int(np.prod([-(-int(extent[AXES[d]]) // sizes[d]) for d in dims], dtype=np.float64))
    if chunks > MAX_CHUNKS:
        raise VolumeError(
            f"expected a box of at most {MAX_CHUNKS:,} chunks, got {extent.tolist()} voxels in chunks of "
            f"{[sizes[d] for d in dims]} ({chunks:,} chunks, more than a Dask graph holds): give a smaller "
            "bbox= or larger leaf_chunks="
        )


def _attrs(head: Any, name: str, box: np.ndarray) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "grid": name,
        "index_to_world": np.asarray(head.transform.index_to_world, np.float64).ravel().tolist(),
        "index_bbox": box.ravel().tolist(),
    }
    if isinstance(head, Volume):
        attrs["value_type"] = head.value_type.name
    if head.length_units:
        attrs["length_units"] = head.length_units
    periodic = getattr(head, "periodic", None)
    if periodic is not None:  # as results say it (vdbflow.ops.results): index-space periods, docs/periodic.md
        attrs.update(periodic_axes=periodic.axes, period_lo=list(periodic.lo), period_voxels=list(periodic.size))
    return attrs


def _head_bytes(path: str) -> bytes:
    """The first 8 bytes of a local regular file (b"" for anything else)."""
    try:
        if not os.path.isfile(path):
            return b""
        with open(path, "rb") as f:
            return f.read(8)
    except OSError:
        return b""


def can_open(filename_or_obj: Any) -> bool:
    """Whether ``filename_or_obj`` looks like something the backend opens: a file starting with NanoVDB's
    or OpenVDB's magic number, a volume store (its attrs' ``format``), or a URL ending in .nvdb or .vdb.

    Parameters
    ----------
    filename_or_obj : Any
        What ``xr.open_dataset`` was given.

    Returns
    -------
    bool
        True for .nvdb and .vdb files (by their magic, whatever their suffix) and volume stores.
    """
    if not isinstance(filename_or_obj, (str, os.PathLike)):
        return False
    path = os.fspath(filename_or_obj)
    if not isinstance(path, str):
        return False
    if is_url(path):
        return path.lower().endswith(SUFFIXES)
    if os.path.isdir(path):
        try:
            attrs = zarr_v2.read_json(Path(path) / ".zattrs", "a store's attrs")
        except VolumeError:
            return False
        return isinstance(attrs, dict) and attrs.get("format") == FORMAT
    head = _head_bytes(path)
    if len(head) < 8:
        return path.lower().endswith(SUFFIXES) and not os.path.exists(path)
    magic = int.from_bytes(head, "little")
    return magic in (*nvdb.FILE_MAGICS, *nvdb.GRID_MAGICS) or int.from_bytes(head, "little", signed=True) == ovdb.MAGIC


class VdbflowBackendEntrypoint(BackendEntrypoint):
    """``engine="vdbflow"``: NanoVDB (.nvdb) and OpenVDB (.vdb) grids and vdbflow volume stores as lazy
    dense arrays (:func:`open_grid_dataset`)."""

    description = "Open NanoVDB (.nvdb) and OpenVDB (.vdb) grids and vdbflow volume stores as lazy dense arrays"
    url = "docs/xarray.md of vdbflow (the xarray backend's page)"
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "grid",
        "bbox",
        "leaf_chunks",
        "dim_order",
        "storage_options",
    )

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike,
        *,
        drop_variables: str | Iterable[str] | None = None,
        grid: int | str | None = None,
        bbox: Any = None,
        leaf_chunks: int | Mapping[str, int] = DEFAULT_LEAF_CHUNKS,
        dim_order: str = "xyz",
        storage_options: dict[str, Any] | None = None,
    ) -> xr.Dataset:
        """:func:`open_grid_dataset` of ``filename_or_obj``."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            raise VolumeError(
                "expected a path or URL of a .nvdb or .vdb file or a volume store, "
                f"got {type(filename_or_obj).__name__}"
            )
        return open_grid_dataset(
            filename_or_obj,
            grid=grid,
            bbox=bbox,
            leaf_chunks=leaf_chunks,
            dim_order=dim_order,
            storage_options=storage_options,
            drop_variables=drop_variables,
        )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """:func:`can_open`."""
        return can_open(filename_or_obj)
