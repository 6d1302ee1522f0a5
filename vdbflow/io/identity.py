"""The identity of an input file (device, inode, size, modification and change times), recorded when it is
first seen and checked whenever it is read again, so that a file replaced (write-and-rename) or rewritten
in place meanwhile (even keeping its size and putting its mtime back: its change time moves) is refused
rather than read as if it were the same one.  Subclasses say what the
file is and which error a change raises (a job's input, a series step).  For a URL (``s3://...``) the
identity is the object's size and version tag (its ETag), and it carries the ``storage_options`` it
was read with, which its checks use (readers take theirs from the :class:`~vdbflow.io.location.Url`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from vdbflow.errors import StorageError, VdbflowError, VolumeError
from vdbflow.io.location import RemoteFile, filesystem, is_url, object_size, stat_url, version_tag

_T = TypeVar("_T")


@dataclass(frozen=True)
class FileIdentity:
    """What the file at ``path`` was when it was first seen."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    tag: str = ""  # a URL's ETag (or modification time): what changes when the object is rewritten
    storage_options: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # the inode's change time: moved by every write and by setting the mtime back, and no user can set it,
    # so a rewrite in place of the same size whose mtime was put back (touch -r) is told apart too
    ctime_ns: int = 0

    label: ClassVar[str] = "the file"  # what the file is, in messages
    seen: ClassVar[str] = "it was first seen"  # when the identity was recorded, in messages
    error: ClassVar[type[VdbflowError]] = VolumeError  # what a change raises

    @classmethod
    def of(
        cls,
        path: str | os.PathLike,
        stat: os.stat_result | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> FileIdentity:
        """The identity of the file at ``path`` now (or of ``stat``, an ``os.fstat`` of it); for a URL,
        of the object there (read with ``storage_options``, or those in effect for it)."""
        if is_url(path):  # an object, or a prefix (a store: no size, no tag)
            url = os.fspath(path)
            try:
                fs, where = filesystem(url, storage_options)
                info = stat_url(fs, where, url)
                size = object_size(info, url)
            except StorageError as err:  # none there: this kind's error; others (no permission) as they are
                if "no such object" not in str(err):
                    raise
                raise cls.error(f"expected {cls.label} at {url}, cannot read it: {err}") from None
            options = fs.storage_options if storage_options is None else storage_options
            return cls(url, 0, 0, size, 0, version_tag(info), storage_options=dict(options) or None)
        if stat is None:
            try:
                stat = os.stat(path)
            except OSError as err:
                raise cls.error(f"expected {cls.label} at {os.fspath(path)}, cannot read it: {err}") from None
        return cls(os.fspath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, ctime_ns=stat.st_ctime_ns)

    def __str__(self) -> str:
        if is_url(self.path):
            return f"{self.size:,} bytes, tag {self.tag!r}"
        return (
            f"{self.size:,} bytes, device {self.device}, inode {self.inode}, mtime {self.mtime_ns} ns, "
            f"ctime {self.ctime_ns} ns"
        )

    def check(self, when: str, stat: os.stat_result | None = None) -> None:
        """Raise :attr:`error` unless the file (or ``stat``) is still this one."""
        try:
            now = self.of(self.path, stat, self.storage_options)
        except self.error:
            raise self.error(f"expected {self.label} {self.path} ({self}) {when}, found none") from None
        if now != self:
            raise self.error(
                f"expected {self.label} {self.path} as {self.seen} ({self}) {when}, found {now}: "
                "another process replaced or rewrote it"
            )

    def opened(self, opener: Callable[[], _T], when: str) -> _T:
        """``opener()``, the file checked to be this one before and after it (a file swapped in while
        it opens is caught by the second check)."""
        self.check(when)
        result = opener()
        self.check(when)
        return result

    def sha256(self) -> str:
        """The SHA-256 of the file, read through one descriptor checked to be this file before and after
        (a URL: streamed, the object checked to be this one before and after)."""
        if is_url(self.path):
            return self._sha256_url()
        try:
            with open(self.path, "rb") as f:
                self.check("when it was hashed", os.fstat(f.fileno()))
                digest = hashlib.sha256()
                while block := f.read(1 << 24):
                    digest.update(block)
                self.check("when it was hashed", os.fstat(f.fileno()))
        except OSError as err:
            raise self.error(f"expected to read {self.label} {self.path} ({self}), cannot: {err}") from None
        return digest.hexdigest()

    def fingerprint(self) -> str:
        """What a result records of the file: its SHA-256 (hex); for a URL its size and version tag
        (``"etag:TAG size:N"``), which do not need the object's bytes read again."""
        if is_url(self.path):
            self.check("when it was fingerprinted")
            return f"etag:{self.tag} size:{self.size}"
        return self.sha256()

    def _sha256_url(self) -> str:
        self.check("when it was hashed")
        digest = hashlib.sha256()
        try:
            remote = RemoteFile.open(self.path, self.storage_options)
            with remote.fs.open(remote.path, "rb", block_size=1 << 24) as f:
                while block := f.read(1 << 24):
                    digest.update(block)
        except (StorageError, OSError) as err:
            raise self.error(f"expected to read {self.label} {self.path} ({self}), cannot: {err}") from None
        self.check("when it was hashed")
        return digest.hexdigest()
