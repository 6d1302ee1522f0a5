"""Zarr format 2 arrays of stores vdbflow does not trust, read without Zarr.

Nothing is decoded before the metadata is checked: every chunk the declared shape implies must be
there, as a regular file (never a link, FIFO or device) no larger than its chunk can encode to, and
an array may not claim more than :data:`MAX_RATIO` decoded bytes per stored byte. Codecs are what
``Volume.to_zarr`` writes: blosc or none, with ``vlen-utf8`` for strings (never ``pickle``: a
store's filters run code). Every failure is a :class:`~vdbflow.VolumeError` naming the file, what was
expected and what was found.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vdbflow.errors import VolumeError
from vdbflow.io import bounded_json

MAX_RATIO = 1024  # decoded bytes an array may claim per stored byte (blosc-lz4 reaches about 250)
_RATIO_SLACK = 1 << 16  # bytes any array may claim regardless (tiny arrays do not compress)
_MAX_METADATA = 1 << 20
_MAX_STRING_CHUNK = 1 << 20  # bytes of a chunk of strings (channel names)
_BLOSC_HEADER = 16  # also blosc's largest overhead over the bytes it compresses
_MAX_CHUNK = (1 << 31) - _BLOSC_HEADER  # blosc's limit
_NUMERIC = re.compile(r"[<>|](?:b1|[iu][1248]|f[248])\Z")
_STRING = "|O"
# never through a link, never blocking on a FIFO (the flags a platform lacks are 0)
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_regular(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (not following a link), at most ``limit`` of them."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise VolumeError(f"expected {what} at {path}, found nothing") from None
    except OSError as err:
        raise VolumeError(f"expected {what} at {path}, found it unreadable: {err.strerror}") from None
    if not stat.S_ISREG(before.st_mode):
        raise VolumeError(f"expected {what} at {path} as a regular file, found {_kind(before.st_mode)}")
    if before.st_size > limit:
        raise VolumeError(f"expected {what} at {path} of at most {limit} bytes, found {before.st_size}")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        raise VolumeError(f"expected {what} at {path} as a regular file, found it unreadable: {err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise VolumeError(f"expected {what} at {path} as a regular file, found it replaced while opened")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise VolumeError(f"expected {what} at {path} of at most {limit} bytes, found it growing past that")
    return data


def read_json(path: Path, what: str) -> Any:
    """The JSON document of the regular file ``path``, within :mod:`~vdbflow.io.bounded_json`'s limits."""
    try:
        return bounded_json.loads(read_regular(path, _MAX_METADATA, what))
    except VolumeError:
        raise
    except ValueError as err:
        raise VolumeError(f"expected {what} at {path} as UTF-8 JSON, found {err}") from None


def _ints(value: Any, low: int, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 8:
        raise VolumeError(f"expected {what} as a list of at most 8 integers, found {value!r:.80}")
    if not all(isinstance(n, int) and not isinstance(n, bool) and low <= n < 1 << 53 for n in value):
        raise VolumeError(f"expected {what} of integers in [{low}, 2^53), found {value!r:.80}")
    return tuple(value)


@dataclass(frozen=True)
class Array:
    """One array of a format 2 store: its checked ``.zarray`` metadata."""

    path: Path
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    order: str
    blosc: bool
    separator: str

    @classmethod
    def open(cls, path: Path) -> Array:
        """The array at ``path`` (a directory holding ``.zarray``, not a link to one), its metadata checked."""
        if path.is_symlink():
            raise VolumeError(f"expected array {path.name} as a directory at {path}, found a symbolic link")
        meta = read_json(path / ".zarray", "Zarr array metadata")
        where = f"{path / '.zarray'}"
        if not isinstance(meta, dict) or meta.get("zarr_format") != 2:
            raise VolumeError(f"expected {where} to be a JSON object with zarr_format 2, found {meta!r:.80}")
        shape = _ints(meta.get("shape"), 0, f"the shape in {where}")
        chunks = _ints(meta.get("chunks"), 1, f"the chunks in {where}")
        if len(chunks) != len(shape):
            raise VolumeError(f"expected chunks of {len(shape)} dimensions in {where} (as the shape), found {chunks}")
        dtype, filters, compressor = meta.get("dtype"), meta.get("filters") or [], meta.get("compressor")
        if not (isinstance(dtype, str) and (_NUMERIC.match(dtype) or dtype == _STRING)):
            raise VolumeError(f"expected a numeric dtype or '|O' (strings) in {where}, found {dtype!r:.80}")
        if filters != ([{"id": "vlen-utf8"}] if dtype == _STRING else []):
            raise VolumeError(
                f"expected filters {'[vlen-utf8]' if dtype == _STRING else 'none'} for dtype {dtype} in {where} "
                f"(what Volume.to_zarr writes), found {filters!r:.80}"
            )
        if not (compressor is None or (isinstance(compressor, dict) and compressor.get("id") == "blosc")):
            raise VolumeError(f"expected compressor blosc or none in {where}, found {compressor!r:.80}")
        order, separator = meta.get("order"), meta.get("dimension_separator", ".")
        if order not in ("C", "F") or separator not in (".", "/"):
            raise VolumeError(
                f"expected order C or F and dimension_separator '.' or '/' in {where}, found {meta!r:.200}"
            )
        array = cls(path, shape, chunks, np.dtype(dtype), order, compressor is not None, separator)
        if array.chunk_bytes > (_MAX_STRING_CHUNK if array.strings else _MAX_CHUNK):
            raise VolumeError(f"expected chunks of at most {_MAX_CHUNK} bytes in {where}, found {chunks} of {dtype}")
        return array

    @property
    def strings(self) -> bool:
        return self.dtype == np.dtype(object)

    @property
    def chunk_bytes(self) -> int:
        """Decoded bytes of one chunk (of a chunk of strings: their smallest encoding, 4 bytes each)."""
        return math.prod(self.chunks) * (4 if self.strings else self.dtype.itemsize)

    @property
    def max_chunk_file(self) -> int:
        """The most bytes one chunk can encode to."""
        if self.strings:
            return _MAX_STRING_CHUNK
        return self.chunk_bytes + (_BLOSC_HEADER if self.blosc else 0)

    def _chunk_indices(self) -> itertools.product[tuple[int, ...]]:
        return itertools.product(*(range(-(-s // c)) for s, c in zip(self.shape, self.chunks, strict=True)))

    def _key(self, index: tuple[int, ...]) -> Path:
        return self.path / (self.separator.join(map(str, index)) or "0")

    def check_stored(self) -> None:
        """Every chunk present as a regular file of a plausible size, and no more claimed than stored
        (file metadata only: nothing is read)."""
        stored = 0
        for index in self._chunk_indices():  # stops at the first missing chunk: bounded by the files there
            key = self._key(index)
            try:
                st = os.lstat(key)
            except OSError:
                raise VolumeError(f"expected chunk {key.name} of array {self.path.name} at {key}, found none") from None
            if not stat.S_ISREG(st.st_mode):
                raise VolumeError(f"expected chunk {key} as a regular file, found {_kind(st.st_mode)}")
            if st.st_size > self.max_chunk_file:
                raise VolumeError(
                    f"expected chunk {key} of at most {self.max_chunk_file} bytes (a chunk of {self.chunks} "
                    f"{self.dtype}), found {st.st_size}"
                )
            stored += st.st_size
        claimed = math.prod(self.shape) * (4 if self.strings else self.dtype.itemsize)
        if claimed > MAX_RATIO * stored + _RATIO_SLACK:
            raise VolumeError(
                f"expected array {self.path.name} to claim at most {MAX_RATIO} decoded bytes per stored byte, "
                f"found shape {list(self.shape)} of {self.dtype} ({claimed} bytes) in {stored} bytes of chunks"
            )

    def read(self) -> np.ndarray:
        """The whole array, chunk by chunk (after :meth:`check_stored`)."""
        self.check_stored()
        out = np.empty(self.shape, self.dtype.newbyteorder("=") if self.dtype.byteorder != "|" else self.dtype)
        for index in self._chunk_indices():
            chunk = self._decode(self._key(index))
            where = tuple(
                slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, self.chunks, self.shape, strict=True)
            )
            out[where] = chunk[tuple(slice(0, w.stop - w.start) for w in where)]
        return out

    def _decode(self, key: Path) -> np.ndarray:
        raw = read_regular(key, self.max_chunk_file, f"chunk {key.name} of array {self.path.name}")
        count = math.prod(self.chunks)
        try:
            data = _unblosc(raw, None if self.strings else self.chunk_bytes) if self.blosc else raw
            if self.strings:
                import numcodecs

                if len(data) < 4 or int.from_bytes(data[:4], "little") != count:
                    raise ValueError(f"a string count other than the chunk's {count}")
                values = numcodecs.VLenUTF8().decode(data)
            else:
                if len(data) != self.chunk_bytes:
                    raise ValueError(f"{len(data)} bytes, not the chunk's {self.chunk_bytes}")
                values = np.frombuffer(data, self.dtype)
        except (ValueError, RuntimeError, TypeError, OverflowError) as err:
            raise VolumeError(
                f"expected chunk {key} to decode to {self.chunks} {self.dtype} ({'blosc' if self.blosc else 'raw'}), "
                f"found {err}"
            ) from None
        return np.asarray(values).reshape(self.chunks, order=self.order)  # type: ignore[call-overload]


def _unblosc(raw: bytes, size: int | None) -> bytes:
    """A blosc buffer decoded, once its header says it holds ``size`` bytes (any size up to a string
    chunk's limit when None) in exactly ``len(raw)`` compressed bytes."""
    from numcodecs import blosc

    if len(raw) < _BLOSC_HEADER:
        raise ValueError(f"{len(raw)} bytes, less than a blosc header")
    nbytes, cbytes = int.from_bytes(raw[4:8], "little"), int.from_bytes(raw[12:16], "little")
    if cbytes != len(raw) or (nbytes != size if size is not None else nbytes > _MAX_STRING_CHUNK):
        raise ValueError(f"a blosc header of {nbytes} bytes in {cbytes}, for a file of {len(raw)} bytes")
    return bytes(blosc.decompress(raw))


_METADATA_FILES = (".zarray", ".zmetadata", "zarr.json")
_MAX_METADATA_FILES = 10_000


def _codec_names(meta: Any) -> Iterator[str]:
    """Every codec id (format 2) or name (format 3) in a metadata document, at any depth."""
    stack = [meta]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in ("id", "name"):
                if isinstance(item.get(key), str):
                    yield item[key]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def refuse_code_codecs(store: Path) -> None:
    """Refuse (``VolumeError``) a Zarr store, of either format, whose metadata names a ``pickle`` codec:
    decoding it runs code from the store.  For stores vdbflow hands to Zarr itself (dense inputs of
    ``vdbflow convert``); volume stores are read by :class:`Array`, which allows no such codec."""
    seen = 0
    for folder, _subfolders, files in os.walk(store):  # links to directories are not followed
        for name in _METADATA_FILES:
            if name not in files:
                continue
            seen += 1
            if seen > _MAX_METADATA_FILES:
                raise VolumeError(
                    f"expected at most {_MAX_METADATA_FILES:,} Zarr metadata files in {store}, found more"
                )
            path = Path(folder) / name
            codecs = {c for c in _codec_names(read_json(path, "Zarr metadata")) if "pickle" in c.lower()}
            if codecs:
                raise VolumeError(
                    f"expected Zarr codecs that only decode data in {path}, found {sorted(codecs)}: decoding them "
                    "would run code from the store"
                )
