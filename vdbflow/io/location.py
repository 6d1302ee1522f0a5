"""Where an input is: a local path (read as it always was: memory maps, ``open``) or a URL that
fsspec opens (``s3://``, ``gs://``, ``https://``, ``memory://``) with ``storage_options``.

:func:`resolve` is the one place that tells them apart.  A URL becomes a :class:`RemoteFile`: its
size and version tag (ETag) read once, bytes read whole or by ranges, nearby ranges merged into few
large requests (:func:`coalesce`), every request counted in its :class:`ReadStats`, and fsspec's and
the store's errors turned into a :class:`~vdbflow.errors.StorageError` that names the URL.

A job's stores (its result, the manifest of written chunks) are a :data:`Target`: a local ``Path`` (``os``,
renames) or a URL (a :class:`Url` carries its ``storage_options``), seen the same way by the writers and
publishing through :func:`filesystem`, :func:`zarr_store`, :func:`read_json` and :func:`write_json`.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from vdbflow.errors import StorageError, VdbflowError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
Target = Path | str  # where a job's store is: a local path, or a URL (s3://bucket/prefix; a Url with its options)
GAP = 1 << 16  # ranges closer than this are read as one request (fsspec's merge_offset_ranges uses 64 kB too)
MAX_SIZE = 1 << 50  # bytes an object may report (1 PiB): more is a store's or a proxy's error
# what changes when an object is rewritten, in the order trusted: S3's and HTTP's ETag, a version id, a
# modification time (s3fs: LastModified; HTTP: Last-Modified; local and memory: mtime / created), a digest
_VERSION_KEYS = (
    "ETag",
    "etag",
    "VersionId",
    "LastModified",
    "Last-Modified",
    "mtime",
    "last_modified",
    "updated",
    "created",
    "Content-MD5",
    "Digest",
)


class UnversionedWarning(UserWarning):
    """A store gives an object no version (no ETag, Last-Modified or modification time): an object replaced
    by one of the same size while it is read cannot be told apart (docs/storage.md)."""


def is_url(path: Any) -> bool:
    """True for a string (or path-like) of the form ``protocol://...`` other than ``file://``."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    return isinstance(path, str) and bool(_URL.match(path)) and not path.lower().startswith("file://")


def local_path(path: str | os.PathLike) -> str:
    """A local path as a string (``file://`` URLs lose their prefix)."""
    text = os.fspath(path)
    return text[len("file://") :] if isinstance(text, str) and text.lower().startswith("file://") else str(text)


def _options_of(url: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options``, else those a :class:`Url` carries, else none."""
    return dict(options if options is not None else getattr(url, "storage_options", None) or {})


class Url(str):
    """A URL as a job config holds it: the text, the ``storage_options`` to read it with (carried along
    when it is pickled to a worker, never printed), and the few ``pathlib.Path`` methods job code uses."""

    storage_options: dict[str, Any]

    def __new__(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> Url:
        obj = super().__new__(cls, url)
        obj.storage_options = dict(storage_options or {})
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (Url, (str(self), self.storage_options))

    @property
    def name(self) -> str:
        """The last part of the URL's path."""
        return PurePosixPath(urlsplit(str(self)).path).name

    @property
    def suffix(self) -> str:
        """The suffix of :attr:`name` (``".nvdb"``)."""
        return PurePosixPath(urlsplit(str(self)).path).suffix

    def resolve(self) -> Url:
        """Itself: a URL is absolute."""
        return self

    absolute = resolve

    @property
    def parents(self) -> tuple[()]:
        """No local folders hold a URL (what ``Path.parents`` checks compare against)."""
        return ()

    def _info(self) -> dict[str, Any] | None:
        fs, path = filesystem(self, self.storage_options)
        try:
            return stat_url(fs, path, self, refresh=True)
        except StorageError as err:
            if "no such object" in str(err):
                return None
            raise

    def exists(self) -> bool:
        """Whether an object or a prefix is there (a StorageError when the store cannot be asked)."""
        return self._info() is not None

    def is_file(self) -> bool:
        """Whether an object (not a prefix) is there (a StorageError when the store cannot be asked)."""
        info = self._info()
        return info is not None and info.get("type") != "directory"

    def is_dir(self) -> bool:
        """Whether a prefix (a 'directory': a Zarr store, say) is there."""
        info = self._info()
        return info is not None and info.get("type") == "directory"


def as_location(path: str | os.PathLike, storage_options: Mapping[str, Any] | None = None) -> Path | Url:
    """A :class:`Url` (with ``storage_options``) for a URL, else a local :class:`pathlib.Path`."""
    if is_url(path):
        return Url(os.fspath(path), _options_of(path, storage_options))  # a Url keeps its own
    if storage_options:
        raise StorageError(f"expected a URL with storage_options, got the local path {os.fspath(path)!r}")
    return Path(local_path(path))


def glob(pattern: str, storage_options: Mapping[str, Any] | None = None) -> list[Url]:
    """The objects matching a URL glob pattern (``s3://bucket/run/step-*.nvdb``), in name order."""
    fs, path = filesystem(pattern, storage_options)
    try:
        found = sorted(fs.glob(path))
    except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
        raise storage_error(pattern, err, "list") from None
    protocol = pattern.split("://", 1)[0]
    return [Url(f"{protocol}://{p.split('://', 1)[-1]}", storage_options) for p in found]


@dataclass
class ReadStats:
    """What was read of one object: bytes, requests (ranges after merging, one HTTP GET each), rounds
    (batches of requests issued together: the latencies paid one after another) and the object's size."""

    url: str
    file_size: int
    bytes_read: int = 0
    requests: int = 0
    rounds: int = 0

    @property
    def fraction(self) -> float:
        """Bytes read over the object's size (0 for an empty object)."""
        return self.bytes_read / self.file_size if self.file_size else 0.0

    def __str__(self) -> str:
        return (
            f"{self.bytes_read:,} of {self.file_size:,} bytes ({100 * self.fraction:.1f} %) "
            f"in {self.requests} request{'s' * (self.requests != 1)} ({self.rounds} round{'s' * (self.rounds != 1)})"
        )


def storage_error(url: str, err: BaseException, doing: str = "read") -> StorageError:
    """``err`` from fsspec or the store as a StorageError naming ``url`` and what to check."""
    if isinstance(err, StorageError):
        return err
    if isinstance(err, FileNotFoundError):
        found = "no such object (or no such bucket)"
    elif isinstance(err, PermissionError):
        found = f"permission denied ({err}); check the credentials in storage_options or the environment"
    elif isinstance(err, ImportError):
        from vdbflow.version import install_hint  # only on this error: validating a config loads no vdbflow.version

        found = f"a missing package ({err}); for s3:// install the s3 extra: {install_hint('s3')}"
    else:
        found = f"{type(err).__name__}: {err}"
    from vdbflow.io.redact import redact_text

    return StorageError(redact_text(f"expected to {doing} {url}, got {found}"))  # no credentials of the URL


def filesystem(url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem and the path within it for ``url`` (a local path: the local filesystem and the
    absolute path)."""
    try:
        import fsspec

        if not is_url(url):
            return fsspec.filesystem("file"), str(Path(local_path(url)).absolute())
        fs, path = fsspec.core.url_to_fs(url, **_options_of(url, storage_options))
    except (ImportError, ValueError, TypeError, OSError) as err:
        if isinstance(err, ValueError) and "protocol" in str(err).lower():
            raise StorageError(f"expected a URL whose protocol fsspec knows, got {url} ({err})") from None
        raise storage_error(url, err, "open") from None
    return fs, path


@dataclass
class RemoteFile:
    """An object read through fsspec: its URL, filesystem, size and version tag, and what was read."""

    url: str
    fs: Any
    path: str
    size: int
    tag: str
    stats: ReadStats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = ReadStats(self.url, self.size)

    @classmethod
    def open(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> RemoteFile:
        """The object at ``url`` (its size and tag read now); a StorageError when there is none."""
        fs, path = filesystem(url, storage_options)
        info = stat_url(fs, path, url)
        if info.get("type") == "directory":
            raise StorageError(f"expected a file at {url}, found a directory (a prefix)")
        tag = version_tag(info)
        if not tag:
            warnings.warn(
                f"{url}: the store gives no ETag or Last-Modified (no version of the object): a replacement of "
                "the same size while it is read cannot be detected (docs/storage.md)",
                UnversionedWarning,
                stacklevel=2,
            )
        return cls(url, fs, path, object_size(info, url), tag)

    def read(self) -> bytes:
        """The whole object."""
        try:
            data = self.fs.cat_file(self.path)
        except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
            raise storage_error(self.url, err) from None
        self.stats.bytes_read += len(data)
        self.stats.requests += 1
        self.stats.rounds += 1
        return bytes(data)

    def read_ranges(self, ranges: Sequence[tuple[int, int]], gap: int = GAP) -> list[tuple[int, bytes]]:
        """The bytes of the ``[start, stop)`` ranges, read as the fewest merged requests (:func:`coalesce`):
        ``(start, data)`` per merged range, in order."""
        merged = coalesce(ranges, gap)
        if not merged:
            return []
        try:
            blobs = self.fs.cat_ranges(
                [self.path] * len(merged), [a for a, _ in merged], [b for _, b in merged], on_error="raise"
            )
        except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
            raise storage_error(self.url, err) from None
        out = []
        for (a, b), blob in zip(merged, blobs, strict=True):
            if isinstance(blob, BaseException):
                raise storage_error(self.url, blob)
            if len(blob) != b - a:
                raise StorageError(
                    f"expected bytes [{a}, {b}) of {self.url} ({self.size:,} bytes), got {len(blob):,}: "
                    "the object changed or was truncated while it was read"
                )
            self.stats.bytes_read += len(blob)
            out.append((a, bytes(blob)))
        self.stats.requests += len(merged)
        self.stats.rounds += 1
        return out

    def check_unchanged(self) -> None:
        """Raise a StorageError when the object's size or tag is no longer what it was when opened."""
        info = stat_url(self.fs, self.path, self.url, refresh=True)
        size, tag = object_size(info, self.url), version_tag(info)
        if (size, tag) != (self.size, self.tag):
            raise StorageError(
                f"expected {self.url} to stay the same object while it was read ({self.size:,} bytes, tag "
                f"{self.tag!r}), found {size:,} bytes, tag {tag!r}: it was replaced meanwhile; open it again"
            )


def stat_url(fs: Any, path: str, url: str, refresh: bool = False) -> dict[str, Any]:
    """fsspec's ``info`` of ``path`` (a StorageError naming ``url`` when it fails)."""
    try:
        if refresh:
            fs.invalidate_cache(path)
        return dict(fs.info(path))
    except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
        raise storage_error(url, err) from None


def version_tag(info: Mapping[str, Any]) -> str:
    """What changes when an object is rewritten: its ETag, else its version id, else its modification
    time (HTTP's Last-Modified too), else a digest, else ''."""
    for key in _VERSION_KEYS:
        value = info.get(key)
        if value:
            return str(value).strip('"')
    return ""


def object_size(info: Mapping[str, Any], url: str) -> int:
    """The size fsspec's ``info`` reports for the object at ``url``: a StorageError naming the URL for one
    that is not a whole number in [0, :data:`MAX_SIZE`] (a store, proxy or server that misreports it)."""
    raw = info.get("size") or 0
    try:
        size = int(raw)
        exact = size == raw or isinstance(raw, str)
    except (TypeError, ValueError, OverflowError):
        size, exact = -1, False
    if not exact or not 0 <= size <= MAX_SIZE:
        raise StorageError(
            f"expected {url} to report a size of 0 to {MAX_SIZE:,} bytes, got {raw!r:.40}: the store (or a proxy) "
            "misreports it"
        )
    return size


def coalesce(ranges: Sequence[tuple[int, int]], gap: int = GAP) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges sorted and merged where they overlap or lie at most ``gap`` bytes apart."""
    out: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and a <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def size_of(path: str | os.PathLike) -> int:
    """The size in bytes of a local file or of the object at a URL (its own storage_options, if a :class:`Url`)."""
    if is_url(path):
        fs, where = filesystem(os.fspath(path))
        return object_size(stat_url(fs, where, os.fspath(path)), os.fspath(path))
    return os.stat(local_path(path)).st_size


def resolve(path: str | os.PathLike, storage_options: Mapping[str, Any] | None = None) -> str | RemoteFile:
    """A local path (a string, unchanged) or, for a URL, the :class:`RemoteFile` to read.

    ``storage_options`` are refused for a local path: they would be silently ignored."""
    if is_url(path):
        return RemoteFile.open(os.fspath(path), storage_options)
    if storage_options:
        raise StorageError(f"expected a URL with storage_options, got the local path {os.fspath(path)!r}")
    return local_path(path)


def parent_and_name(target: Target) -> tuple[Target, str]:
    """The folder (or prefix) that holds ``target`` and its last name."""
    if not is_url(target):
        path = Path(target)
        return path.parent, path.name
    head, _, name = str(target).rstrip("/").rpartition("/")
    return head, name


def zarr_store(target: Target, options: Mapping[str, Any] | None = None, read_only: bool = False) -> Any:
    """zarr's store of ``target``: a ``LocalStore`` of a path, an ``FsspecStore`` of a URL."""
    import zarr.storage

    if not is_url(target):
        return zarr.storage.LocalStore(str(target), read_only=read_only)
    options = _options_of(target, options)
    return zarr.storage.FsspecStore.from_url(str(target), storage_options=options, read_only=read_only)


def read_json(fs: Any, path: str) -> Any:
    """The JSON document at ``path`` of ``fs``, or None where there is none or it does not parse."""
    try:
        return json.loads(fs.cat_file(path))
    except (OSError, ValueError):
        return None


def write_json(fs: Any, path: str, document: Any) -> None:
    """Write ``document`` as JSON to ``path`` of ``fs`` (one object: a PUT of an object store is whole)."""
    data = json.dumps(document, sort_keys=True).encode()
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "file" in protocol:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    fs.pipe_file(path, data)


def remove(target: Target, options: Mapping[str, Any] | None = None) -> None:
    """Remove everything at ``target`` (a tree, a prefix); errors are ignored."""
    if not is_url(target):
        from vdbflow.core.atomic import remove_tree

        remove_tree(Path(target))
        return
    try:
        fs, path = filesystem(target, options)
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except (OSError, ValueError):
        pass


NPY_HEAD = 1 << 16  # a .npy header is at most this long (numpy pads it to 64 bytes; 4 GiB headers are absurd)


def npy_header(remote: RemoteFile, error: type[VdbflowError], what: str = "") -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and data offset of the .npy file ``remote`` (one range request), checked: a C-ordered
    array of numeric values and non-negative dimensions whose bytes the object holds; ``error`` (prefixed
    with ``what``) otherwise."""
    head = remote.read_ranges([(0, min(remote.size, NPY_HEAD))])
    fp = io.BytesIO(head[0][1] if head else b"")
    try:
        version = np.lib.format.read_magic(fp)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(fp)
    except (ValueError, OSError) as err:
        raise error(f"{what}expected a .npy array, cannot read {remote.url}: {err}") from None
    if fortran and len(shape) > 1:
        raise error(f"{what}expected a C-ordered .npy array at {remote.url}, got a Fortran-ordered one")
    if dtype.hasobject:
        raise error(f"{what}expected numeric values in {remote.url}, got dtype {dtype}")
    if any(n < 0 for n in shape):  # numpy's header reader takes them; np.load refuses the local file
        raise error(f"{what}expected a .npy array of non-negative dimensions at {remote.url}, got {shape}")
    offset = fp.tell()
    need = offset + math.prod(shape) * dtype.itemsize  # Python integers: no overflow
    if remote.size < need:
        raise error(
            f"{what}expected {remote.url} to hold the {need:,} bytes its header promises, found {remote.size:,}"
        )
    return tuple(shape), dtype, offset
