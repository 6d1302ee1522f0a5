"""A remote file's bytes as a NumPy array of its full size, filled in range by range: the buffer the
.nvdb and .vdb parsers read, where only the ranges fetched were ever read from the store.

The array is an anonymous memory mapping as long as the file: pages never written read as zeros and
take no memory (no swap is reserved for it either), so a 100 GB object costs only what was fetched.
The readers fetch every range they are about to read before reading it (vdbflow/io/nanovdb/remote.py,
vdbflow/io/openvdb/remote.py)."""

from __future__ import annotations

import mmap
import sys
from collections.abc import Sequence

import numpy as np

from vdbflow.errors import StorageError
from vdbflow.io.location import GAP, RemoteFile, coalesce

HEAD = 1 << 16  # the first request of a remote file: its headers (those of most .nvdb and .vdb files)
_MAP_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0  # no swap reserved for the sparse buffer


class SparseFile:
    """A remote file's bytes as a NumPy uint8 array of its full size, filled in range by range."""

    def __init__(self, remote: RemoteFile) -> None:
        self.remote = remote
        size = remote.size
        if size == 0:
            raise StorageError(f"expected a file with data at {remote.url}, found an empty object")
        try:
            try:
                flags = mmap.MAP_PRIVATE | _MAP_NORESERVE  # type: ignore[attr-defined]
                self._map = mmap.mmap(-1, size, flags=flags)
            except (AttributeError, TypeError):  # pragma: no cover - platforms without MAP_PRIVATE (Windows)
                self._map = mmap.mmap(-1, size)
        except (OSError, OverflowError, ValueError) as err:  # a size no address space holds
            raise StorageError(
                f"expected {remote.url} of a size this machine can map ({size:,} bytes reported), got "
                f"{type(err).__name__}: {err}"
            ) from None
        self._array = np.frombuffer(self._map, np.uint8)
        self.have: list[tuple[int, int]] = []

    @property
    def array(self) -> np.ndarray:
        """A read-only view of the buffer (the parts not fetched read as zeros: only fetched parts are read)."""
        view = self._array.view()
        view.flags.writeable = False
        return view

    def _untouched(self, a: int, b: int) -> bool:
        """Whether nothing of ``[a, b)`` was fetched yet (an empty range: True)."""
        return a >= b or subtract([(a, b)], self.have) == [(a, b)]

    def fetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Fetch the ``[start, stop)`` ranges (clipped to the file) not fetched already."""
        size = self.remote.size
        wanted = coalesce([(max(0, a), min(size, b)) for a, b in ranges], 0)
        missing = subtract(wanted, self.have)
        requests: list[tuple[int, int]] = []
        for a, b in missing:  # merged across gaps of at most GAP bytes that hold nothing fetched already
            if requests and a - requests[-1][1] <= GAP and self._untouched(requests[-1][1], a):
                requests[-1] = (requests[-1][0], b)
            else:
                requests.append((a, b))
        for start, data in self.remote.read_ranges(requests, gap=0):
            self._array[start : start + len(data)] = np.frombuffer(data, np.uint8)
        self.have = coalesce([*self.have, *requests], 0)


def subtract(ranges: list[tuple[int, int]], have: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the sorted, disjoint ``ranges`` outside the sorted, disjoint ``have``."""
    out = []
    for a, b in ranges:
        for c, d in have:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out
