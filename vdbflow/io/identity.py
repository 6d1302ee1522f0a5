"""The identity of an input file (device, inode, size, modification time), recorded when it is first
seen and checked whenever it is read again, so that a file replaced (write-and-rename) or rewritten
in place meanwhile is refused rather than read as if it were the same one.  Subclasses say what the
file is and which error a change raises (a job's input, a series step)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from vdbflow.errors import VdbflowError, VolumeError

_T = TypeVar("_T")


@dataclass(frozen=True)
class FileIdentity:
    """What the file at ``path`` was when it was first seen."""

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int

    label: ClassVar[str] = "the file"  # what the file is, in messages
    seen: ClassVar[str] = "it was first seen"  # when the identity was recorded, in messages
    error: ClassVar[type[VdbflowError]] = VolumeError  # what a change raises

    @classmethod
    def of(cls, path: str | os.PathLike, stat: os.stat_result | None = None) -> FileIdentity:
        """The identity of the file at ``path`` now (or of ``stat``, an ``os.fstat`` of it)."""
        if stat is None:
            try:
                stat = os.stat(path)
            except OSError as err:
                raise cls.error(f"expected {cls.label} at {os.fspath(path)}, cannot read it: {err}") from None
        return cls(os.fspath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def __str__(self) -> str:
        return f"{self.size:,} bytes, device {self.device}, inode {self.inode}, mtime {self.mtime_ns} ns"

    def check(self, when: str, stat: os.stat_result | None = None) -> None:
        """Raise :attr:`error` unless the file (or ``stat``) is still this one."""
        try:
            now = self.of(self.path, stat)
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
        """The SHA-256 of the file, read through one descriptor checked to be this file before and after."""
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
