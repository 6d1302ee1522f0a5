"""A bounds-checked cursor over the bytes of a .vdb file: every read says where it was, what it
expected and what it found, and nothing is read or allocated past the end of the bytes."""

from __future__ import annotations

import mmap
import struct

import numpy as np

from vdbflow.errors import OpenVDBError
from vdbflow.io.openvdb import format as fmt

_MADV_POPULATE_READ = 22  # <linux/mman.h>; Python's mmap module does not name it


class Cursor:
    """Reads little-endian fields from ``buf`` (a uint8 array, e.g. a memory-mapped file) at ``pos``,
    refusing any read that would pass ``end`` (default the buffer's end)."""

    __slots__ = ("buf", "pos", "end", "where")

    def __init__(self, buf: np.ndarray, pos: int = 0, end: int | None = None, where: str = ""):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else min(end, len(buf))
        self.where = where  # e.g. " in grid 'density'", appended to messages

    @property
    def left(self) -> int:
        return self.end - self.pos

    def fail(self, expected: str, found: str, at: int | None = None) -> OpenVDBError:
        return OpenVDBError(f"at byte {self.pos if at is None else at}{self.where}: expected {expected}, found {found}")

    def need(self, size: int, what: str) -> int:
        """Check that ``size`` bytes of ``what`` follow; return the position they start at."""
        if size < 0 or size > self.left:
            raise self.fail(
                f"{size} bytes of {what}", f"{max(self.left, 0)} bytes left (the data ends at byte {self.end})"
            )
        at = self.pos
        self.pos += size
        return at

    def take(self, size: int, what: str) -> np.ndarray:
        """The next ``size`` bytes as a uint8 view."""
        at = self.need(size, what)
        return self.buf[at : at + size]

    def unpack(self, form: str, what: str) -> tuple:
        at = self.need(struct.calcsize(form), what)
        return struct.unpack_from(form, self.buf, at)

    def byte_at(self, pos: int) -> int:
        """The byte at ``pos``, which the caller has checked lies before ``end`` (the leaf loop's one
        read per leaf that is not a :meth:`take`)."""
        return int(self.buf[pos])

    def u8(self, what: str) -> int:
        return self.unpack("<B", what)[0]

    def u32(self, what: str) -> int:
        return self.unpack("<I", what)[0]

    def i32(self, what: str) -> int:
        return self.unpack("<i", what)[0]

    def i64(self, what: str) -> int:
        return self.unpack("<q", what)[0]

    def array(self, dtype: np.dtype | str, count: int, what: str) -> np.ndarray:
        """``count`` values of ``dtype`` (a view of the bytes, read-only when they are)."""
        dt = np.dtype(dtype)
        if count < 0 or count > self.left // max(dt.itemsize, 1):
            raise self.fail(
                f"{count} values of {what} ({dt.itemsize} bytes each)",
                f"{max(self.left, 0)} bytes left (the data ends at byte {self.end})",
            )
        return self.take(count * dt.itemsize, what).view(dt)

    def string(self, what: str, limit: int = fmt.MAX_STRING_BYTES) -> str:
        """A uint32 length and that many bytes of text (UTF-8; undecodable bytes are replaced)."""
        at = self.pos
        size = self.u32(f"the length of {what}")
        if size > limit:
            raise self.fail(f"{what} of at most {limit} bytes", f"a length of {size}", at)
        return bytes(self.take(size, what)).decode("utf-8", "replace")

    def prefetch(self, size: int) -> None:
        """Ask the kernel to map the next ``size`` bytes of a memory-mapped file at once
        (``MADV_POPULATE_READ``, Linux 5.14+), rather than page by page as they are first touched;
        nothing happens for other buffers or kernels."""
        base = self.buf
        while isinstance(base, np.ndarray):
            base = base.base
        mapped = base.obj if isinstance(base, memoryview) else None
        if not isinstance(mapped, mmap.mmap) or size <= 0:
            return
        start = self.pos - self.pos % mmap.PAGESIZE
        try:
            mapped.madvise(_MADV_POPULATE_READ, start, min(self.pos + size, len(mapped)) - start)
        except (OSError, ValueError, OverflowError):
            pass  # an older kernel: pages are mapped as they are touched

    def at(self, pos: int, what: str) -> Cursor:
        """A cursor at ``pos`` of the same bytes, checked to lie within them."""
        if not 0 <= pos <= self.end:
            raise self.fail(f"{what} within the file's {self.end} bytes", f"offset {pos}")
        return Cursor(self.buf, pos, self.end, self.where)
