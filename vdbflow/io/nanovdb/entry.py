"""The public :func:`open_grid` and :func:`list_grids`, whatever the source: a path (memory-mapped) or a
buffer through :mod:`~vdbflow.io.nanovdb.read`, a URL by byte ranges through :mod:`~vdbflow.io.nanovdb.remote`
(which reads its fetched buffer with :mod:`~vdbflow.io.nanovdb.read` in turn)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import StorageError
from vdbflow.io.location import RemoteFile, is_url
from vdbflow.io.nanovdb import read, remote
from vdbflow.io.nanovdb.records import GridInfo


def _check_options(data: Any, storage_options: dict[str, Any] | None) -> None:
    if storage_options and not is_url(data):
        raise StorageError(f"expected a URL with storage_options, got {type(data).__name__} {str(data)[:80]!r}")


def open_grid(
    data: str | os.PathLike | bytes | np.ndarray,
    grid: int | str | None = None,
    *,
    bbox: Any = None,
    leaves: Any = None,
    checksum: bool | str = True,
    storage_options: dict[str, Any] | None = None,
) -> Volume | Topology:
    """A grid of a .nvdb file (path) or of an in-memory buffer: a :class:`Volume` for value grids, an
    index-layout :class:`Topology` for Index / OnIndex grids (attach values with ``with_data``).

    ``grid`` is an index or a name (default the first grid).  ``bbox`` ((i0, j0, k0), (i1, j1, k1)),
    inclusive index coordinates, or ``leaves`` (leaf indices in tree order) load only part of the
    grid; the rest of an uncompressed file is not read.  ``checksum`` checks the grid's NanoVDB
    checksum where it has one (the tail half, over all nodes, only when the whole grid is read) by the
    rules of the grid's version: True (default) reads a grid whose checksum matches none of them with
    a :class:`~vdbflow.ChecksumWarning` (as NanoVDB's reader and Warp read it: writers such as fVDB
    leave stale checksums), ``"strict"`` raises :class:`NanoVDBError`, ``"head"`` checks the head half
    only (headers, tree and root: no value byte is read for it), False does not check.
    ``data`` may be a URL fsspec opens (``s3://...``, with ``storage_options``): the headers and nodes
    are then read by byte ranges, and of the leaves only those asked for (docs/storage.md).
    """

    _check_options(data, storage_options)
    if is_url(data):  # read by byte ranges
        source = RemoteFile.open(os.fspath(data), storage_options)
        return read.named(source.url, lambda: remote.open_grid_remote(source, grid, bbox, leaves, checksum))
    return read.open_grid(data, grid, bbox=bbox, leaves=leaves, checksum=checksum)


def list_grids(
    data: str | os.PathLike | bytes | np.ndarray, storage_options: dict[str, Any] | None = None
) -> list[GridInfo]:
    """What each grid of a .nvdb file or buffer is, from the headers alone (nodes are not decoded).

    Parameters
    ----------
    data : str, os.PathLike, bytes or numpy.ndarray
        A .nvdb file path (memory-mapped), a URL fsspec opens (``s3://...``: headers, roots and
        blind data read by byte ranges), or bytes or a uint8 array holding a file or grid
        buffers back to back.  Compressed payloads (zip, blosc) are decompressed to read their
        headers.
    storage_options : dict, optional
        For a URL: fsspec's options (credentials, ``endpoint_url``, ...).

    Returns
    -------
    list of GridInfo
        One :class:`GridInfo` per grid, in file order: index, name, grid type, value type (the
        :class:`~vdbflow.core.value_types.ValueType` :func:`open_grid` reads it as; None for index and
        topology grids, whose values are external or absent), grid class, node and tile counts,
        active voxel count (the tree's, as NanoVDB counts it: voxels of active tiles included, where
        ``Volume.active_voxel_count`` counts leaf voxels), the index bounding box (inclusive, voxels)
        and world bounding box (length units), the (4, 4) index-to-world matrix, voxel size, codec,
        version, size in bytes, checksum, and the units, length units and component names the file
        stores (None where not).

    Raises
    ------
    NanoVDBError
        A malformed, truncated, empty or unsupported file or buffer.
    OSError
        A path that cannot be read (e.g. FileNotFoundError); for a URL a
        :class:`~vdbflow.errors.StorageError` naming it (no such object, no permission).

    See Also
    --------
    vdbflow.open : read a grid.
    save : write grids.
    """

    _check_options(data, storage_options)
    if is_url(data):  # headers, roots and blind data by byte ranges
        source = RemoteFile.open(os.fspath(data), storage_options)
        return read.named(source.url, lambda: remote.list_grids_remote(source))
    return read.list_grids(data)
