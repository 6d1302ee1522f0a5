"""A grid in a file that a process opens: :class:`GridRef` names it - where (a local path, or a URL as a
:class:`~vdbflow.io.location.Url` that carries its ``storage_options``), which grid, its periods, the
file's identity when it was first seen, and optionally the index box to read - and opens it.

It is small and picklable (what a job's tasks, a distributed volume's partition tasks and the xarray
backend's chunks are given), and every read checks the file is still the one first seen, before and after
(a file renamed over it, or rewritten, is an error naming it, never read as that grid).  :meth:`GridRef.open`
keeps what it opened in the one per-process cache of :data:`OPEN_CACHE` grids and boxes (an uncompressed
.nvdb grid is memory-mapped: its values are read when touched); :meth:`GridRef.read` reads without keeping.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import VolumeError
from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import Url, as_location
from vdbflow.io.volumes import list_grids, open_volume

OPEN_CACHE = 32  # grids and boxes each process keeps open (a Dataset's values and mask chunks read one box)

Box = tuple[tuple[int, int, int], tuple[int, int, int]]


@dataclass(frozen=True)
class GridRef:
    """A grid of a file or store (a .nvdb or .vdb file, a volume store), as a process reads it.

    Attributes
    ----------
    path : str
        A local path, or a URL (a :class:`~vdbflow.io.location.Url`: read with its ``storage_options``).
    grid : int or str or None
        The grid (index or name) as ``vdbflow.open`` takes it.
    periodic : Periodicity or bool or None
        Its periods over those the file records (None: the file's own).
    identity : FileIdentity or None
        What the file was when first seen (checked at every read), None to read without checking.
    bbox : ((3,), (3,)) or None
        The inclusive index box to read (its leaves and tiles only), None for the whole grid.
    """

    path: str
    grid: int | str | None = None
    periodic: Any = None
    identity: FileIdentity | None = None
    bbox: Box | None = None
    options: str | None = field(default=None, init=False, repr=False)  # the Url's storage_options: the cache's key

    def __post_init__(self) -> None:
        options = getattr(self.path, "storage_options", None)
        object.__setattr__(self, "options", json.dumps(options, sort_keys=True) if options else None)

    @classmethod
    def to(
        cls,
        path: str | os.PathLike,
        grid: int | str | None = None,
        periodic: Any = None,
        storage_options: dict[str, Any] | None = None,
        identity: type[FileIdentity] | None = FileIdentity,
    ) -> GridRef:
        """The grid ``grid`` of ``path`` (a URL read with ``storage_options``), its file's ``identity``
        (a :class:`FileIdentity` type) recorded now; ``identity=None``: not checked."""
        if storage_options is not None and not isinstance(storage_options, dict):
            raise VolumeError(f"expected storage_options as a dict, got {type(storage_options).__name__}")
        try:
            json.dumps(storage_options)
        except (TypeError, ValueError) as err:
            raise VolumeError(f"expected storage_options of JSON-like values (a dict of str keys): {err}") from None
        where = as_location(path, storage_options)
        text = where if isinstance(where, Url) else os.fspath(where)
        recorded = None if identity is None else identity.of(text, storage_options=storage_options)
        return cls(text, grid, periodic, recorded)

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """The URL's ``storage_options`` (None for a local path or none given)."""
        return getattr(self.path, "storage_options", None) or None

    def box(self, lo: Any, hi: Any) -> GridRef:
        """This grid's inclusive index box ``[lo, hi]`` (3,) to read."""
        return dataclasses.replace(self, bbox=(tuple(int(v) for v in lo), tuple(int(v) for v in hi)))  # type: ignore[arg-type]

    def read(
        self, leaves: np.ndarray | None = None, when: str = "when it was read", **kwargs: Any
    ) -> Volume | Topology:
        """The grid (its box, or ``leaves`` of it; ``kwargs`` for ``vdbflow.open``) read now, not kept,
        the file checked to be the one first seen before and after (an error saying ``when``)."""
        if self.bbox is not None:
            kwargs["bbox"] = self.bbox
        if leaves is not None:
            kwargs["leaves"] = leaves
        if self.periodic is not None:
            kwargs["periodic"] = self.periodic

        def opener() -> Volume | Topology:
            return open_volume(self.path, self.grid, storage_options=self.storage_options, **kwargs)

        return opener() if self.identity is None else self.identity.opened(opener, when)

    def open(self) -> Volume | Topology:
        """The grid (or its box), opened once per process (:data:`OPEN_CACHE` kept) and kept open."""
        return _opened(self)

    def head(self) -> Volume | Topology:
        """The grid without its leaves (transform, background, tiles, names and units)."""
        return self.read(leaves=np.zeros(0, np.int64))

    def grid_info(self) -> Any:
        """What the file's header says of the grid (``vdbflow.list_grids``' entry)."""
        infos = list_grids(self.path, storage_options=self.storage_options)
        return infos[self.grid_index(infos)]

    def grid_index(self, infos: list[Any]) -> int:
        """The position of the grid among the file's grids ``infos`` (the reader's own error when it has none such)."""
        grid = self.grid
        if grid is None:
            return 0
        names = [i.name for i in infos]
        if isinstance(grid, str) and grid in names:
            return names.index(grid)
        if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool) and 0 <= grid < len(infos):
            return int(grid)
        self.head()  # the format's own error, naming the grids
        raise VolumeError(
            f"expected a grid index in [0, {len(infos)}) or one of the names {names} of {self.path}, got {grid!r}"
        )


# one thread at a time opens a grid or box (striped by the reference): a Dataset's values and mask chunks of one
# box, computed at once by two threads, both missed the cache and read the box twice
_OPEN_LOCKS = tuple(threading.Lock() for _ in range(64))


def _opened(ref: GridRef) -> Volume | Topology:
    with _OPEN_LOCKS[hash(ref) % len(_OPEN_LOCKS)]:
        return _kept(ref)


@functools.lru_cache(maxsize=OPEN_CACHE)
def _kept(ref: GridRef) -> Volume | Topology:
    return ref.read()


def clear_cache() -> None:
    """Forget the grids and boxes this process opened (the next read opens its file again)."""
    _kept.cache_clear()
