"""The emulated device's memory (``VDBFLOW_CUDA_EMULATE=1``): the bytes live arrays hold, counted once a
buffer however often it is wrapped and given back when NumPy frees it, against the limit
``VDBFLOW_CUDA_EMULATE_MEMORY`` (past it, :class:`OutOfMemoryError`, as CuPy's pool raises)."""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np

from vdbflow.errors import DeviceError


class OutOfMemoryError(MemoryError):
    """An allocation past ``VDBFLOW_CUDA_EMULATE_MEMORY`` (cupy.cuda.memory.OutOfMemoryError)."""


_memory_lock = threading.Lock()
_allocated = [0]  # bytes of device memory alive
_owners: dict[int, weakref.ref] = {}  # id -> the NumPy buffer counted (once, however often it is wrapped)


def memory_limit() -> int | None:
    """``VDBFLOW_CUDA_EMULATE_MEMORY``: bytes of emulated device memory at most (unset: no limit)."""
    text = os.environ.get("VDBFLOW_CUDA_EMULATE_MEMORY")
    if not text:
        return None
    if not text.isdigit():
        raise DeviceError(f"expected VDBFLOW_CUDA_EMULATE_MEMORY in bytes (e.g. 1073741824), got {text!r}")
    return int(text)


def allocated_bytes() -> int:
    """Bytes of emulated device memory held by live arrays."""
    with _memory_lock:
        return _allocated[0]


def _release(key: int, nbytes: int) -> None:
    with _memory_lock:
        _allocated[0] -= nbytes
        _owners.pop(key, None)


def account(a: np.ndarray) -> None:
    """Counts a buffer that device memory owns, until NumPy frees it; past the limit, OutOfMemoryError."""
    if not a.flags.owndata or a.nbytes == 0:
        return
    key = id(a)
    limit = memory_limit()
    with _memory_lock:
        known = _owners.get(key)
        if known is not None and known() is a:
            return
        if limit is not None and _allocated[0] + a.nbytes > limit:
            raise OutOfMemoryError(
                f"Out of memory allocating {a.nbytes:,} bytes (allocated so far: {_allocated[0]:,} bytes, "
                f"limit {limit:,} bytes: VDBFLOW_CUDA_EMULATE_MEMORY)"
            )
        _allocated[0] += a.nbytes
        _owners[key] = weakref.ref(a)
    weakref.finalize(a, _release, key, a.nbytes)
