"""The emulated device's memory (``VDBFLOW_CUDA_EMULATE=1``): a pool as CuPy's, that shows what a GPU punishes.

- Every device allocation is a mapping of its own, its data ending where a ``PROT_NONE`` guard page begins and a
  guard page before it: a kernel's read or write past the end (or before the start's page) faults, and the
  emulated launch reports it as a :class:`~vdbflow.errors.DeviceError` (``emulate/cuda_host.h``); the bytes
  between the first data page and the data's start hold a pattern that :func:`check_guards` checks after each
  launch, so a write just before the start is reported too.
- Freed memory is poisoned (0xFF bytes: NaN floats, -1 integers) in the order of the stream it was allocated
  on, and the next allocation of as many pages on that stream and device reuses it at once (last freed, first
  reused), as CuPy's pool does: a kernel that reads an array through an address kept after the array was
  freed reads NaN or another array's values.
- ``VDBFLOW_CUDA_EMULATE_MEMORY`` bytes of live arrays at most: past it, :class:`OutOfMemoryError` (after the
  pool's cached blocks were given back, as CuPy retries); bytes are given back when NumPy frees an array.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from vdbflow.errors import DeviceError


class OutOfMemoryError(MemoryError):
    """An allocation past ``VDBFLOW_CUDA_EMULATE_MEMORY`` (cupy.cuda.memory.OutOfMemoryError)."""


PAGE = mmap.PAGESIZE
POISON = 0xFF  # freed memory: NaN in every float, -1 in every signed integer
PATTERN = 0xA5  # the bytes before an array's start on its first page
CACHED_BLOCKS = 512  # freed blocks kept for reuse at most (the oldest go first)
_PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int

_lock = threading.RLock()  # re-entrant: a finalizer may run while an allocation holds it
_allocated = [0]  # bytes of device memory held by live arrays
_live: dict[int, _Block] = {}  # id(block) -> block held by a live array
_free: dict[tuple, list[_Block]] = {}  # (device, stream key, pages) -> poisoned blocks, last freed last


class _Block:
    """One mapping: a guard page, ``pages`` pages of data, a guard page."""

    def __init__(self, pages: int, key: tuple):
        self.pages, self.key = pages, key
        self.map = mmap.mmap(-1, (pages + 2) * PAGE)
        probe = np.frombuffer(self.map, np.uint8, 1)
        self.address = probe.ctypes.data
        del probe
        for page in (0, pages + 1):
            if _libc.mprotect(self.address + page * PAGE, PAGE, _PROT_NONE) != 0:
                raise DeviceError(f"emulated CUDA: mprotect of a guard page failed (errno {ctypes.get_errno()})")
        self.nbytes, self.what, self.low = 0, "", np.empty(0, np.uint8)

    @property
    def end(self) -> int:
        """Offset of the upper guard page: where the data ends."""
        return (self.pages + 1) * PAGE

    def place(self, nbytes: int, what: str) -> int:
        """The data's offset for an array of ``nbytes`` ending at the upper guard; the bytes before it marked."""
        self.nbytes, self.what = nbytes, what
        start = self.end - nbytes
        self.low = np.frombuffer(self.map, np.uint8, start - PAGE, PAGE)
        self.low[...] = PATTERN
        return start

    def poison(self) -> None:
        """The array's bytes (not the marked ones before it) set to POISON."""
        with _lock:
            np.frombuffer(self.map, np.uint8, self.nbytes, self.end - self.nbytes)[...] = POISON

    def describe(self, address: int) -> str | None:
        """Where ``address`` lies against this block's array, or None where it lies outside the mapping."""
        offset = address - self.address
        if not 0 <= offset < (self.pages + 2) * PAGE:
            return None
        start = self.end - self.nbytes
        if offset >= self.end:
            where = f"byte {offset - self.end} after the end of"
        elif offset < start:
            where = f"byte {start - offset} before the start of"
        else:
            where = f"byte {offset - start} of"
        state = "a device array" if id(self) in _live else "a freed device array (was"
        return f"{where} {state} {self.what}" + ("" if id(self) in _live else ")")


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
    with _lock:
        return _allocated[0]


def _take(key: tuple, nbytes: int) -> _Block:
    limit = memory_limit()
    with _lock:
        if limit is not None and _allocated[0] + nbytes > limit:
            _free.clear()  # CuPy gives its cached blocks back before it says out of memory
            raise OutOfMemoryError(
                f"Out of memory allocating {nbytes:,} bytes (allocated so far: {_allocated[0]:,} bytes, "
                f"limit {limit:,} bytes: VDBFLOW_CUDA_EMULATE_MEMORY)"
            )
        cached = _free.get(key)
        block = cached.pop() if cached else None
        _allocated[0] += nbytes
    return block if block is not None else _Block(key[-1], key)


def device_empty(
    shape: tuple, dtype: Any, device: int, stream_key: int, in_order: Callable[[Callable[[], None]], None]
) -> np.ndarray:
    """An uninitialized device array of ``shape`` and ``dtype`` from the pool of (``device``, stream): a block
    freed on that stream (poisoned) where one of as many pages is cached, else a new mapping.  ``in_order(f)``
    runs ``f`` in the stream's order: the poisoning of the block once the array is freed."""
    dtype, shape = np.dtype(dtype), tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    pages = max(1, -(-nbytes // PAGE))
    block = _take((device, stream_key, pages), nbytes)
    with _lock:
        start = block.place(nbytes, f"of {nbytes:,} bytes ({dtype}, shape {tuple(shape)})")
        _live[id(block)] = block
    flat = np.frombuffer(block.map, dtype, count, start)  # every view's base: freed when the last view is
    done = weakref.finalize(flat, _release, block, in_order)
    done.atexit = False
    return flat.reshape(shape)


def pooled_copy(a: np.ndarray, device: int, stream_key: int, in_order: Callable) -> np.ndarray:
    """``a``'s values in a device array of the pool (C order)."""
    out = device_empty(a.shape, a.dtype, device, stream_key, in_order)
    out[...] = a
    return out


def _release(block: _Block, in_order: Callable[[Callable[[], None]], None]) -> None:
    """The array of ``block`` was freed: its bytes given back now, the block poisoned in its stream's order and
    then cached for the next allocation of its size."""
    with _lock:
        _allocated[0] -= block.nbytes
        _live.pop(id(block), None)

    def poison_and_cache() -> None:
        block.poison()
        with _lock:
            cached = _free.setdefault(block.key, [])
            cached.append(block)
            if sum(len(v) for v in _free.values()) > CACHED_BLOCKS:
                cached.pop(0)  # the oldest of its size: the pool stays at CACHED_BLOCKS

    in_order(poison_and_cache)


def forget_stream(stream_key: int) -> None:
    """A stream is gone: its cached blocks are given back."""
    with _lock:
        for key in [k for k in _free if k[1] == stream_key]:
            del _free[key]


def check_guards(kernel: str) -> None:
    """After a launch of ``kernel``: every live array's bytes before its start still hold the pattern; a
    DeviceError names the first array written there (and the pattern is restored)."""
    with _lock:  # no block is placed, poisoned or freed meanwhile
        for block in list(_live.values()):  # a copy: a finalizer on this thread may free an array meanwhile
            low = block.low
            if low.size and not (low == PATTERN).all():
                bad = int(np.flatnonzero(low != PATTERN)[0])
                low[...] = PATTERN
                raise DeviceError(
                    f"emulated CUDA: {kernel} wrote {low.size - bad} bytes before the start of a device array "
                    f"{block.what} (an out-of-bounds write)"
                )


def describe_fault(kernel: str, address: int, block: int, thread: int, access: int) -> str:
    """The message of a kernel's fault at ``address`` (an out-of-bounds access caught by a guard page);
    ``access``: 0 a read, 1 a write, 2 not known."""
    with _lock:
        blocks = [*_live.values(), *(b for v in _free.values() for b in v)]
    where = next((w for b in blocks if (w := b.describe(address)) is not None), None)
    return (
        f"emulated CUDA: {kernel} (block {block}, thread {thread}) "
        f"{('read', 'wrote', 'read or wrote')[min(access, 2)]} device memory out of bounds at "
        f"0x{address:x}: " + (where or "no emulated device memory (a null, stale or host pointer?)")
    )
