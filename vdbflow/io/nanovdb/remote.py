""".nvdb files at URLs (``s3://``, ``https://``, ``memory://``: fsspec), read by byte ranges.

The bytes fetched are written at their own offsets into a buffer as long as the file that costs no
memory until written (an anonymous mapping: pages never written read as zeros and take no RAM), so
the same parser and decoder as for local files read them (:mod:`~vdbflow.io.nanovdb.read`,
:mod:`~vdbflow.io.nanovdb.decode`) and the results are the same, bit for bit.  What is fetched:

1. the file and grid headers, segment after segment (a first request of
   :data:`vdbflow.io.sparse.HEAD` bytes usually holds them all);
2. for a part of a grid (``leaves=`` / ``bbox=``): its blind data, the root and its table, the upper
   nodes that meet ``bbox`` (all of them for ``leaves=``), the lower nodes that do, then only the
   leaves selected, level by level as the decoder walks the tree
   (:func:`~vdbflow.io.nanovdb.decode.selected_leaf_rows`), each level's ranges merged into few
   requests (:func:`~vdbflow.io.location.coalesce`);
3. for a whole grid or a compressed file (zip, blosc): the rest of the file, in one request; for FpN
   leaves (whose sizes vary): the rest of the grid.

What was read is in :class:`~vdbflow.io.location.ReadStats` (``volume.read_stats``).
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np

import vdbflow.io.sparse as sparse_file
from vdbflow.errors import NanoVDBError
from vdbflow.io.location import RemoteFile
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.decode import decode_grid, selected_leaf_rows
from vdbflow.io.nanovdb.header import grid_header, layout_of
from vdbflow.io.nanovdb.read import list_grids, looks_like_grid, open_grid, select_grid
from vdbflow.io.nanovdb.records import GridInfo
from vdbflow.io.selection import index_box
from vdbflow.io.sparse import SparseFile


def _u(sparse: SparseFile, pos: int, form: str) -> tuple[Any, ...] | None:
    """``form`` unpacked at ``pos`` (fetched first), or None past the end of the file."""
    n = struct.calcsize(form)
    if pos < 0 or pos + n > sparse.remote.size:
        return None
    sparse.fetch([(pos, pos + n)])
    return struct.unpack_from(form, sparse.array, pos)


def _fetch_grid_headers(sparse: SparseFile, pos: int, end: int) -> None:
    """The headers of the grids back to back in ``[pos, end)`` (one grid, or a pre-32.6 multi-grid payload)."""
    while pos + fmt.GRID_SIZE + fmt.TREE_SIZE <= end:
        sparse.fetch([(pos, pos + fmt.GRID_SIZE + fmt.TREE_SIZE)])
        head = _u(sparse, pos, "<Q")
        size = _u(sparse, pos + fmt.GRID_OFF_GRID_SIZE, "<Q")
        if head is None or head[0] not in fmt.GRID_MAGICS or size is None or size[0] <= 0:
            return
        pos += int(size[0])


def fetch_structure(sparse: SparseFile) -> bool:
    """Fetch every file header, grid metadata record and grid header; False when a segment is compressed
    (its grids are read from the whole file).  A malformed file stops the walk: the parser then reports
    it, naming the byte."""
    size = sparse.remote.size
    sparse.fetch([(0, min(size, sparse_file.HEAD))])
    magic = _u(sparse, 0, "<Q")
    if magic is None:
        return True
    if magic[0] == fmt.MAGIC_GRID or (magic[0] == fmt.MAGIC_NUMBER and looks_like_grid(sparse.array)):
        _fetch_grid_headers(sparse, 0, size)
        return True
    pos = 0
    while pos + fmt.FILE_HEADER_SIZE <= size:
        head = _u(sparse, pos, fmt.FILE_HEADER_FORMAT)
        if head is None or head[0] not in fmt.FILE_MAGICS or head[2] == 0:
            return True
        if head[3] != 0:  # zip or blosc: the payloads are read whole
            return False
        meta, sizes = pos + fmt.FILE_HEADER_SIZE, []
        for _ in range(head[2]):
            gsize = _u(sparse, meta, "<Q")
            name_size = _u(sparse, meta + fmt.FILE_META_OFF_NAME_SIZE, "<I")
            if gsize is None or name_size is None:
                return True
            sparse.fetch([(meta, meta + fmt.FILE_METADATA_SIZE + name_size[0])])
            sizes.append(int(gsize[0]))
            meta += fmt.FILE_METADATA_SIZE + name_size[0]
        pos = meta
        for gsize in sizes:
            _fetch_grid_headers(sparse, pos, min(size, pos + gsize))
            pos += gsize
    return True


def _fetch_head(sparse: SparseFile, base: int) -> dict[str, Any]:
    """The header of the grid at ``base``; fetched: everything before its upper nodes (headers, root, root
    table and any padding: what the head half of an older version's checksum covers), its blind
    metadata and data, and a grid without upper nodes whole (small: its checksum covers it all)."""
    h = grid_header(sparse.array, base)
    end = base + h["grid_size"]
    upper = h["tree"] + h["node_offsets"][2]
    ranges = [(base, min(max(upper, base), end) if h["node_counts"][2] else end)]
    if h["blind_count"]:
        ranges.append((base + h["blind_offset"], end))
    sparse.fetch(ranges)
    return h


def _not_empty(remote: RemoteFile) -> None:
    if remote.size == 0:  # as for a local file
        raise NanoVDBError(f"{remote.url} is empty: expected a NanoVDB file header at byte 0")


def open_grid_remote(
    remote: RemoteFile,
    grid: int | str | None,
    bbox: Any,
    leaves: Any,
    checksum: bool | str,
    sparse: SparseFile | None = None,
) -> Any:
    """A grid of the .nvdb file ``remote`` (:func:`~vdbflow.io.nanovdb.open_grid`'s arguments): the part
    asked for by ranges, or the whole file (``sparse``: its buffer, if some of it was fetched already);
    ``read_stats`` set on the result."""
    _not_empty(remote)
    box = index_box(bbox, NanoVDBError)
    sparse = SparseFile(remote) if sparse is None else sparse
    if box is None and leaves is None:  # the whole grid: the rest of the file in one request
        sparse.fetch([(0, remote.size)])
        result = open_grid(sparse.array, grid, checksum=checksum)
    elif not fetch_structure(sparse):  # compressed: the rest of the file, then as a buffer
        sparse.fetch([(0, remote.size)])
        result = open_grid(sparse.array, grid, bbox=bbox, leaves=leaves, checksum=checksum)
    else:
        g = select_grid(sparse.array, grid)
        h = _fetch_head(sparse, g.offset)
        rows = selected_leaf_rows(sparse.array, g.offset, box, leaves, sparse.fetch)
        if rows is None:  # FpN: leaves of varying size, found by walking them all
            sparse.fetch([(g.offset, g.offset + h["grid_size"])])
        else:
            leaf_start, leaf_size = h["tree"] + h["node_offsets"][0], layout_of(h, g.offset).leaf_size
            starts = leaf_start + np.unique(rows).astype(np.int64) * leaf_size
            sparse.fetch([(int(a), int(a) + leaf_size) for a in starts])
        _, result = decode_grid(sparse.array, g.offset, box, leaves, checksum, g.position)
    remote.check_unchanged()
    result.read_stats = remote.stats
    return result


def list_grids_remote(remote: RemoteFile, sparse: SparseFile | None = None) -> list[GridInfo]:
    """:func:`~vdbflow.io.nanovdb.list_grids` of the .nvdb file ``remote``, from its headers, roots and
    blind data (a compressed file: read whole); ``sparse``: its buffer, if some was fetched already."""
    _not_empty(remote)
    sparse = SparseFile(remote) if sparse is None else sparse
    if fetch_structure(sparse):
        for index in itertools.count():
            try:
                g = select_grid(sparse.array, index)
            except NanoVDBError:  # past the last grid, or a malformed file (list_grids says where)
                break
            h = grid_header(sparse.array, g.offset)
            root = h["tree"] + h["node_offsets"][3]
            ranges = [(root, root + fmt.ROOT_OFF_TABLE_SIZE + 4)]
            if h["blind_count"]:
                ranges.append((g.offset + h["blind_offset"], g.offset + h["grid_size"]))
            sparse.fetch(ranges)
    else:
        sparse.fetch([(0, remote.size)])
    infos = list_grids(sparse.array)
    remote.check_unchanged()
    return infos
