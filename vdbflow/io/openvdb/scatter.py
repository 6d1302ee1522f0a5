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
from typing import Any

import numpy as np

from vdbflow.errors import OpenVDBError

IOVEC = np.dtype([("base", np.uintp), ("len", np.uintp)])  # struct iovec


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
    path: str, offset: int, head_size: int, value_sizes: np.ndarray, heads: np.ndarray, values: np.ndarray
) -> None:
    """Read ``L = len(value_sizes)`` consecutive leaf records of ``path`` starting at byte ``offset``:
    record ``n`` is ``head_size`` bytes, stored into ``heads[n * head_size:]``, then
    ``value_sizes[n]`` bytes, stored right after the previous record's values in ``values``.
    ``heads`` and ``values`` are writable C-contiguous arrays of at least ``L * head_size`` and
    ``sum(value_sizes)`` bytes (checked)."""
    sizes = np.asarray(value_sizes, np.int64)
    L = len(sizes)
    total = int(sizes.sum()) if L else 0
    for arr, need, what in ((heads, L * head_size, "heads"), (values, total, "values")):
        if not (arr.flags.c_contiguous and arr.flags.writeable) or arr.nbytes < need or np.any(sizes < 0):
            raise ValueError(f"expected a writable contiguous array of {need} bytes for the {what}, got {arr.nbytes}")
    if L == 0:
        return
    iov = np.empty((L, 2), IOVEC)
    iov["base"][:, 0] = heads.ctypes.data + np.arange(L, dtype=np.uint64) * np.uint64(head_size)
    iov["len"][:, 0] = head_size
    value_ends = np.cumsum(sizes)
    iov["base"][:, 1] = values.ctypes.data + (value_ends - sizes).astype(np.uint64)
    iov["len"][:, 1] = sizes
    record_ends = offset + np.cumsum(sizes + head_size)  # the file offset after each record
    fd = os.open(path, os.O_RDONLY)
    try:
        if L < 2 * MIN_SPLIT or THREADS < 2:
            _read_calls(fd, path, iov, offset, record_ends, 0, L)
        else:  # halves in two threads: the kernel's copies (and the page faults of fresh memory) overlap
            half = L // 2
            failed: list[BaseException] = []

            def second() -> None:
                try:
                    _read_calls(fd, path, iov, int(record_ends[half - 1]), record_ends, half, L)
                except BaseException as err:  # re-raised in the calling thread
                    failed.append(err)

            helper = threading.Thread(target=second, daemon=True)
            helper.start()
            try:
                _read_calls(fd, path, iov, offset, record_ends, 0, half)
            finally:
                helper.join()
            if failed:
                raise failed[0]
    finally:
        os.close(fd)


def _read_calls(
    fd: int, path: str, iov: np.ndarray, pos: int, record_ends: np.ndarray, first_leaf: int, stop: int
) -> None:
    """Records [first_leaf, stop) from byte ``pos``, ``IOV_MAX // 2`` per ``preadv`` call (whole
    records, so every call starts on one)."""
    per_call = IOV_MAX // 2
    base = iov.ctypes.data
    for first in range(first_leaf, stop, per_call):
        last = min(first + per_call, stop)
        want = int(record_ends[last - 1]) - pos
        while True:
            got = PREADV(fd, base + first * 2 * IOVEC.itemsize, 2 * (last - first), pos)
            if got >= 0 or ctypes.get_errno() != errno.EINTR:
                break
        if got < 0:
            raise OpenVDBError(
                f"at byte {pos} of {path}: reading the leaf buffers failed: {os.strerror(ctypes.get_errno())}"
            )
        if got != want:
            raise OpenVDBError(
                f"at byte {pos} of {path}: expected {want} bytes of leaf buffers {first} to {last - 1}, found "
                f"{got} (the file is shorter than when it was opened)"
            )
        pos += got
