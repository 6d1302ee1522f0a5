"""OpenVDB .vdb files at URLs (fsspec), read by byte ranges into a :class:`~vdbflow.io.sparse.SparseFile`
so that the same parser reads them (:mod:`~vdbflow.io.openvdb.read`):

1. the file header (a first request of :data:`vdbflow.io.sparse.HEAD` bytes, grown until the header
   parses: its metadata has no stated size);
2. the grid descriptors, each found at the end offset of the one before (names and offsets: a few
   hundred bytes each, usually inside the first request);
3. to open a grid: its bytes ``[grid, end)`` (head, topology and leaf buffers; an instance's parent too),
   so of a file of several grids only the one asked for is read; to list the grids: each grid's head and
   topology ``[grid, blocks)``, not its leaf buffers.

Within a grid the leaf buffers are read whole: they follow one another with their sizes inline and no
index of their offsets, so ``leaves=`` and ``bbox=`` choose which buffers are decompressed, not which
bytes are fetched.
"""

from __future__ import annotations

import struct
from typing import Any

import vdbflow.io.sparse as sparse_file
from vdbflow.errors import OpenVDBError
from vdbflow.io.location import RemoteFile
from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.header import read_header
from vdbflow.io.openvdb.read import VdbFile, list_vdb, open_vdb
from vdbflow.io.openvdb.stream import Cursor
from vdbflow.io.sparse import SparseFile

_DESCRIPTOR = 4096  # read ahead at each descriptor: three names and the offsets


def _unpack(sparse: SparseFile, pos: int, form: str) -> tuple[Any, ...] | None:
    """``form`` at ``pos`` (fetched first), or None past the end of the file."""
    n = struct.calcsize(form)
    if pos < 0 or pos + n > sparse.remote.size:
        return None
    sparse.fetch([(pos, pos + n)])
    return struct.unpack_from(form, sparse.array, pos)


def _header(sparse: SparseFile) -> tuple[int, bool] | None:
    """Where the grid count is and whether the file has grid offsets, the header fetched (the prefix
    grows until it parses; None when even the whole file does not: the parser then says why)."""
    size, n = sparse.remote.size, min(sparse.remote.size, sparse_file.HEAD)
    while True:
        sparse.fetch([(0, n)])
        try:
            cur = Cursor(sparse.array, 0, end=n)
            header = read_header(cur)
            return cur.pos, header.has_grid_offsets
        except OpenVDBError:
            if n >= size:
                return None
            n = min(size, 4 * n)


def fetch_descriptors(sparse: SparseFile) -> None:
    """Fetch the header and every grid descriptor; a malformed file stops the walk (the parser reports
    it, naming the byte, from what was fetched)."""
    found = _header(sparse)
    if found is None or not found[1]:
        return
    pos, size = found[0], sparse.remote.size
    count = _unpack(sparse, pos, "<i")
    if count is None or not 0 <= count[0] <= fmt.MAX_GRIDS:
        return
    pos += 4
    for _ in range(count[0]):
        sparse.fetch([(pos, pos + _DESCRIPTOR)])
        at = pos
        for _ in range(3):  # the unique name, the type, the instance parent
            length = _unpack(sparse, at, "<I")
            if length is None or length[0] > fmt.MAX_STRING_BYTES or at + 4 + length[0] > size:
                return
            sparse.fetch([(at + 4, at + 4 + length[0])])
            at += 4 + length[0]
        offsets = _unpack(sparse, at, "<qqq")
        if offsets is None or not at + 24 == offsets[0] <= offsets[2] <= size:
            return
        pos = offsets[2]


def _opened(remote: RemoteFile, sparse: SparseFile | None) -> tuple[SparseFile, VdbFile]:
    sparse = SparseFile(remote) if sparse is None else sparse
    fetch_descriptors(sparse)
    return sparse, VdbFile.open(sparse.array)


def open_vdb_remote(
    remote: RemoteFile, grid: int | str | None, leaves: Any, bbox: Any, sparse: SparseFile | None = None
) -> Any:
    """:func:`~vdbflow.io.openvdb.open_vdb` of the .vdb file ``remote``: its header, descriptors and the
    grid asked for (and an instance's parent) by ranges; ``read_stats`` set on the result.  ``sparse``:
    its buffer, if some of it was fetched already."""
    sparse, f = _opened(remote, sparse)
    d = f.select(grid)
    ranges = [(d.grid_pos, d.end_pos)]
    ranges += [(p.grid_pos, p.end_pos) for p in f.descriptors if d.parent and p.unique_name == d.parent]
    sparse.fetch(ranges)
    result = open_vdb(sparse.array, d.index, leaves, bbox)
    remote.check_unchanged()
    result.read_stats = remote.stats
    return result


def list_vdb_remote(remote: RemoteFile, sparse: SparseFile | None = None) -> list[Any]:
    """:func:`~vdbflow.io.openvdb.list_vdb` of the .vdb file ``remote``: headers, descriptors and each
    grid's head and topology by ranges, no leaf buffer."""
    sparse, f = _opened(remote, sparse)
    sparse.fetch([(d.grid_pos, d.block_pos) for d in f.descriptors])
    infos = list_vdb(sparse.array)
    remote.check_unchanged()
    return infos
