"""Local files memory-mapped read-only, whose pages are given back as the readers pass over them.

A mapped page a process has touched counts in its resident memory (``RssFile``) until the mapping
is closed or the page is released, and Dask's memory monitor counts it: a worker that read its own
leaves through a mapping of a 3 GB file would be charged for every page it walked past.  The
readers therefore walk a mapping in spans of :data:`RELEASE_BYTES` and hand each span's pages back
(``madvise(MADV_DONTNEED)``: for a read-only file mapping the data stays in the page cache, and a
later read faults it in again, so nothing is lost) once what they need from it is copied.

Only mappings made by :func:`map_file` and shared ``numpy.memmap`` arrays are released; any other
buffer (bytes, a NumPy array, the anonymous buffer of a remote file or a copy-on-write map, whose
pages *are* their data) is left alone.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import numpy as np

from vdbflow.errors import NanoVDBError

RELEASE_BYTES = 32 << 20  # span of a mapping read before its pages are given back
_PAGE = mmap.PAGESIZE


class FileMap(mmap.mmap):
    """A read-only mapping of a local file (its type marks the buffers whose pages may be released)."""


def map_file(path: str | os.PathLike) -> np.ndarray:
    """The file at ``path`` memory-mapped read-only as a uint8 array: pages are read from disk only
    when touched, and can be given back with :func:`release`."""
    size = os.path.getsize(path)
    if size == 0:
        raise NanoVDBError(f"{os.fspath(path)} is empty: expected a NanoVDB file header at byte 0")
    with open(path, "rb") as fh:
        mapped = FileMap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=np.uint8)


def _releasable(arr: np.ndarray) -> mmap.mmap | None:
    """The mapping ``arr`` owns when its pages may be given back without losing data: a :class:`FileMap`,
    or a :class:`numpy.memmap` of a file opened ``r``, ``r+`` or ``w+`` (shared: written pages stay in
    the file); never an anonymous or copy-on-write mapping, whose pages are their only copy."""
    if isinstance(arr, np.memmap) and getattr(arr, "mode", None) in ("r", "r+", "w+"):
        return getattr(arr, "_mmap", None)
    base = arr.base
    owner = base.obj if isinstance(base, memoryview) else base  # np.frombuffer keeps a memoryview
    return owner if isinstance(owner, FileMap) else None


def _address(mapping: mmap.mmap) -> int:
    """The address of a mapping's first byte."""
    view = np.frombuffer(mapping, np.uint8)
    try:
        return view.__array_interface__["data"][0]
    finally:
        del view


def _root(buf: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The releasable mapping under ``buf`` and the byte of the mapping ``buf``'s first element is, or None."""
    arr: object = buf
    while isinstance(arr, np.ndarray):
        mapping = _releasable(arr)
        if mapping is not None:
            if mapping.closed:
                return None
            return mapping, buf.__array_interface__["data"][0] - _address(mapping)
        arr = arr.base
    return None


def release(buf: np.ndarray, start: int, stop: int) -> None:
    """Give back the whole pages of bytes ``[start, stop)`` (counted from ``buf``'s first element) when
    ``buf`` is a view of a file mapping that allows it (:func:`map_file`, a shared ``numpy.memmap``);
    nothing otherwise.  The bytes stay readable, and written ones stay written: a later read faults
    them in again from the page cache."""
    found = _root(buf) if stop > start else None
    if found is None:
        return
    mapping, offset = found
    a = max(0, -(-(offset + start) // _PAGE) * _PAGE)  # whole pages only: a neighbour's partial page stays
    b = min((offset + stop) // _PAGE * _PAGE, len(mapping))
    if b > a:
        mapping.madvise(mmap.MADV_DONTNEED, a, b - a)


def release_rows(arr: np.ndarray, first: int, last: int) -> None:
    """:func:`release` of the bytes of rows ``[first, last)`` of ``arr`` (along its first axis)."""
    if last <= first or arr.ndim == 0 or arr.strides[0] <= 0:
        return
    row = arr.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    release(arr, first * arr.strides[0], (last - 1) * arr.strides[0] + row)


def spans(start: int, stop: int, step: int = RELEASE_BYTES) -> Iterator[tuple[int, int]]:
    """``[start, stop)`` cut into consecutive spans of at most ``step`` bytes."""
    for a in range(start, stop, step):
        yield a, min(stop, a + step)


def rows_per_span(row_bytes: int) -> int:
    """How many rows of ``row_bytes`` bytes a reader takes from a mapping before releasing them."""
    return max(1, RELEASE_BYTES // max(1, row_bytes))
