"""Leaf buffers read straight from a .vdb file into the values array, with one ``preadv(2)`` call per
batch of leaves: each leaf's record - its head (value mask and mask compression code, 65 bytes) and
its values - is scattered by the kernel, the head into a scratch array and the values into the next
slice of the result.  No mapping of the leaf buffers, no second copy of the values.

The iovec array is built with NumPy (two rows of (address, length) per leaf) and handed to the C
library's ``preadv`` through ctypes: building hundreds of thousands of memoryview slices for
``os.preadv`` costs more than the read itself.  Every address lies inside the two arrays the caller
passed, which are checked to be large enough first; a short read (a file that shrank since its
sizes were checked) is an :class:`~vdbflow.errors.OpenVDBError` naming the byte offset."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.errors import OpenVDBError

IOVEC = np.dtype([("base", np.uintp), ("len", np.uintp)])  # struct iovec


@dataclass(frozen=True)
class OpenFile:
    """A file already open for reading: its descriptor (owned by the caller, read with ``preadv`` and
    never closed here) and its path, for messages.  Reading through the descriptor that the bytes of
    the topology were mapped from means a file renamed over the path meanwhile is never read."""

    fd: int
    path: str

    def __str__(self) -> str:
        return self.path


Source = str | OpenFile  # a path (opened for each read) or an open file


def _find_preadv() -> Any:
    """The C library's ``preadv`` with 64-bit offsets, or None where there is none (Windows, or a
    32-bit build whose ``off_t`` may be 32 bits)."""
    if os.name != "posix" or sys.maxsize < 2**32 or not hasattr(os, "preadv"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).preadv
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    fn.restype = ctypes.c_ssize_t
    return fn


PREADV = _find_preadv()
THREADS = min(2, os.cpu_count() or 1)  # scatter-reads at once (two: memory bandwidth allows no more)
MIN_SPLIT = 4096  # records per thread below which one thread reads them all
IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1 << 16) if PREADV else 0


def available() -> bool:
    """Whether leaf buffers can be scatter-read on this platform (Linux, macOS and other POSIX
    systems with a 64-bit ``preadv``)."""
    return PREADV is not None and IOV_MAX >= 2


def read_records(
    path: Source, offset: int, head_size: int, value_sizes: np.ndarray, heads: np.ndarray, values: np.ndarray
) -> None:
    """Read ``L = len(value_sizes)`` consecutive leaf records of ``path`` starting at byte ``offset``:
    record ``n`` is ``head_size`` bytes, stored into ``heads[n * head_size:]``, then
    ``value_sizes[n]`` bytes, stored right after the previous record's values in ``values``.
    ``heads`` and ``values`` are writable C-contiguous arrays of at least ``L * head_size`` and
    ``sum(value_sizes)`` bytes (checked)."""
    Records(path, offset, head_size, value_sizes, heads, values).read()


class Records:
    """A planned :func:`read_records`: the arrays checked and the iovecs built here, the reading done by
    :meth:`read` (in another thread, say: it holds the GIL only between its ``preadv`` calls)."""

    def __init__(
        self, path: Source, offset: int, head_size: int, value_sizes: np.ndarray, heads: np.ndarray, values: np.ndarray
    ):
        sizes = np.asarray(value_sizes, np.int64)
        L = len(sizes)
        total = int(sizes.sum()) if L else 0
        for arr, need, what in ((heads, L * head_size, "heads"), (values, total, "values")):
            if not (arr.flags.c_contiguous and arr.flags.writeable) or arr.nbytes < need or np.any(sizes < 0):
                raise ValueError(
                    f"expected a writable contiguous array of {need} bytes for the {what}, got {arr.nbytes}"
                )
        self.path, self.offset, self.count = path, offset, L
        self.arrays = (heads, values)  # kept alive while the kernel writes through their addresses
        self.iov = np.empty((L, 2), IOVEC)
        self.iov["base"][:, 0] = heads.ctypes.data + np.arange(L, dtype=np.uint64) * np.uint64(head_size)
        self.iov["len"][:, 0] = head_size
        value_ends = np.cumsum(sizes)
        self.iov["base"][:, 1] = values.ctypes.data + (value_ends - sizes).astype(np.uint64)
        self.iov["len"][:, 1] = sizes
        self.record_ends = offset + np.cumsum(sizes + head_size)  # the file offset after each record

    def read(self) -> None:
        """Read the records, ``IOV_MAX // 2`` per ``preadv`` call (whole records, so that every call
        starts on one); from ``2 * MIN_SPLIT`` records on, two threads take the calls in turn (the
        kernel's copies, and the page faults of fresh memory, overlap)."""
        L, ends = self.count, self.record_ends
        if L == 0:
            return
        per_call = IOV_MAX // 2
        calls = [
            (first, min(first + per_call, L), self.offset if first == 0 else int(ends[first - 1]))
            for first in range(0, L, per_call)
        ]
        work = iter(calls)  # shared: each next() is one step under the GIL
        if isinstance(self.path, OpenFile):
            fd, own = self.path.fd, False
        else:
            fd, own = os.open(self.path, os.O_RDONLY), True
        try:
            if L < 2 * MIN_SPLIT or THREADS < 2:
                self._calls(fd, work)
                return
            failed: list[BaseException] = []

            def second() -> None:
                try:
                    self._calls(fd, work)
                except BaseException as err:  # re-raised in the calling thread
                    failed.append(err)

            helper = threading.Thread(target=second, daemon=True)
            helper.start()
            try:
                self._calls(fd, work)
            finally:
                helper.join()
            if failed:
                raise failed[0]
        finally:
            if own:
                os.close(fd)

    def _calls(self, fd: int, work: Iterator[tuple[int, int, int]]) -> None:
        """``preadv`` calls of records [first, last) from byte ``pos``, for each (first, last, pos)
        that ``work`` gives; a failed or short one is an OpenVDBError naming the byte."""
        base, ends, path = self.iov.ctypes.data, self.record_ends, self.path
        for first, last, pos in work:
            want = int(ends[last - 1]) - pos
            while True:
                got = PREADV(fd, base + first * 2 * IOVEC.itemsize, 2 * (last - first), pos)
                if got >= 0 or ctypes.get_errno() != errno.EINTR:
                    break
            if got < 0:
                err = os.strerror(ctypes.get_errno())
                raise OpenVDBError(f"at byte {pos} of {path}: reading the leaf buffers failed: {err}")
            if got != want:
                raise OpenVDBError(
                    f"at byte {pos} of {path}: expected {want} bytes of leaf buffers {first} to {last - 1}, found "
                    f"{got} (the file is shorter than when it was opened)"
                )
