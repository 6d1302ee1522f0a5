"""Files published whole: written in a private directory beside the target, then renamed into place.

A writer never opens a predictable name and never follows a link it did not make: it creates a
hidden directory ``.NAME.tmp-TAG`` next to the target with ``mkdir`` (mode 0700, failing if anything
is there), creates the file inside it with ``O_CREAT | O_EXCL | O_NOFOLLOW``, and renames it onto the
target, which replaces a link at that path rather than writing through it.  ``TAG`` is
``XXXXXXXX-PID@HOST`` (32 random bits, then the writer), so ``vdbflow clean`` can tell the private
directory of a killed writer from that of a running one.  On any failure (a full disk, a signal
raised as an exception) the directory and what it holds are removed before the error goes on.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from vdbflow.errors import WriteError

__all__ = [
    "RENAME_EXCHANGE",
    "RENAME_NOREPLACE",
    "atomic_directory",
    "atomic_file",
    "create_exclusive",
    "displaced_path",
    "hidden_sibling",
    "private_directory",
    "put_back_aside",
    "put_back_exchanged",
    "remove_tree",
    "renameat2",
    "sibling_stem",
    "writer_tag",
]

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2  # Linux's renameat2 flags


def writer_tag() -> str:
    """``XXXXXXXX-PID@HOST``: unique, and naming the process that writes the file."""
    return f"{uuid.uuid4().hex[:8]}-{os.getpid()}@{socket.gethostname()}"


_MAX_STEM = 160  # bytes of NAME in a hidden sibling's name: the tag and kind take the rest of 255


def sibling_stem(name: str) -> str:
    """``name`` as it stands in the names of its hidden siblings: whole, or its first 160 bytes (a file
    name has at most 255, and the sibling's kind and writer tag need theirs)."""
    raw = name.encode("utf-8", "surrogateescape")
    return name if len(raw) <= _MAX_STEM else raw[:_MAX_STEM].decode("utf-8", "ignore")


def hidden_sibling(target: Path, kind: str) -> Path:
    """A fresh hidden name beside ``target`` for a file of ``kind`` (partial, input, replaced, tmp)
    naming its writer: ``.NAME.KIND-XXXXXXXX-PID@HOST``."""
    return target.parent / f".{sibling_stem(target.name)}.{kind}-{writer_tag()}"


def create_exclusive(path: str | os.PathLike, mode: int = 0o666, readable: bool = False) -> BinaryIO:
    """``path`` opened for writing (``readable``: and reading, as a writable memory map needs), newly made:
    never an existing file, never through a link."""
    access = os.O_RDWR if readable else os.O_WRONLY
    flags = access | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, mode)
    try:
        return os.fdopen(fd, "w+b" if readable else "wb")
    except BaseException:
        os.close(fd)
        raise


def private_directory(target: Path) -> Path:
    """A new directory ``.NAME.tmp-TAG`` beside ``target``, mode 0700 (``mkdir`` fails on any existing
    name, link or not, so an attacker cannot plant it)."""
    for _ in range(16):
        where = hidden_sibling(target, "tmp")
        try:
            os.mkdir(where, 0o700)
        except FileExistsError:  # 32 random bits collided (or a name was planted): draw again
            continue
        return where
    raise FileExistsError(errno.EEXIST, f"every private directory name tried beside {target} was taken")


def renameat2(src: str | os.PathLike, dst: str | os.PathLike, flags: int) -> bool:
    """Linux's ``renameat2``: True when done; False where the system or filesystem lacks it."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        return False
    at_fdcwd = -100
    if call(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), ctypes.c_uint(flags)) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dst))


def _write_error(target: Path, err: OSError) -> WriteError:
    if isinstance(err, WriteError):
        return err
    what = err.strerror or str(err)
    return WriteError(
        err.errno or 0,
        f"expected to write {target}, got {type(err).__name__}: {what}; {target} is as it was and nothing "
        "was left beside it",
    )


def _private_or_fail(target: Path) -> Path:
    try:
        return private_directory(target)
    except OSError as err:
        raise _write_error(target, err) from err


def remove_tree(path: Path) -> None:
    """Remove a file, a link (not what it points to) or a directory tree; errors are ignored."""
    with contextlib.suppress(OSError):
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path)


def _publish(written: Path, target: Path, replace: bool) -> None:
    if replace:
        os.replace(written, target)  # a link at target is replaced, not followed
        return
    try:  # hard-link semantics: fails when anything (a link too) appeared at target meanwhile
        os.link(written, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: a check, then a rename
        if os.path.lexists(target):
            raise FileExistsError(f"{target} exists") from None
        os.replace(written, target)


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, *, replace: bool = True, readable: bool = False, mode: int = 0o666
) -> Iterator[BinaryIO]:
    """Write a file that appears at ``path`` whole or not at all::

        with atomic_file("out.nvdb") as fh:
            fh.write(data)

    The file is made in :func:`private_directory` and renamed onto ``path`` when the block ends
    without an error (``replace=False``: only if nothing is at ``path``); it gets the permissions a
    plain ``open`` would give, ``mode`` (0666) less the umask.  Any error, a ``KeyboardInterrupt`` too, removes
    the private directory and leaves ``path`` as it was; an ``OSError`` becomes a
    :class:`~vdbflow.errors.WriteError`.  ``readable``: the file is open for reading too (to map it).
    """
    target = Path(path)
    where = _private_or_fail(target)
    try:
        written = where / target.name
        with create_exclusive(written, mode, readable) as fh:  # mode less the umask; private in its 0700 directory
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _publish(written, target, replace)
    except OSError as err:
        raise _write_error(target, err) from err
    finally:
        remove_tree(where)


@contextlib.contextmanager
def atomic_directory(
    path: str | os.PathLike, *, replace: bool = False, replaceable: Callable[[Path], str | None] | None = None
) -> Iterator[Path]:
    """A directory (a Zarr store, say) that appears at ``path`` whole or not at all.

    Yields a fresh path inside :func:`private_directory` for the writer to create; when the block
    ends without an error it is renamed onto ``path``.  With ``replace=True`` an earlier directory at
    ``path`` is exchanged with the new one in one step where Linux allows (else set aside, then
    replaced) and removed; ``replace=False`` refuses when anything is at ``path``.  ``replaceable``
    (with ``replace``) checks what came out of ``path`` once it is out, before it is removed: None
    when it may go, else what it is; then it is put back (what appeared at ``path`` during the write
    is never deleted) and a :class:`~vdbflow.errors.WriteError` says what was found.  Any error
    removes the private directory; an ``OSError`` becomes a :class:`~vdbflow.errors.WriteError`.
    """
    target = Path(path)
    where = _private_or_fail(target)
    try:
        written = where / target.name
        yield written
        if not os.path.lexists(target):
            if not renameat2(written, target, RENAME_NOREPLACE):
                os.rename(written, target)
        elif not replace:
            raise FileExistsError(f"{target} exists")
        else:
            _replace_directory(written, target, replaceable)
    except OSError as err:
        raise _write_error(target, err) from err
    finally:
        remove_tree(where)


def _appeared_meanwhile(target: Path, problem: str, put_back: str) -> WriteError:
    """The error of a replace that found, once the write was done, something else than what was checked."""
    return WriteError(
        errno.EEXIST,
        f"expected to replace what was checked at {target} before the write, found {problem} there once the "
        f"write was done (it appeared meanwhile); {put_back}, and the new data was not kept",
    )


def _replace_directory(written: Path, target: Path, replaceable: Callable[[Path], str | None] | None) -> None:
    """``written`` onto ``target``, what was there removed once ``replaceable`` passed it (else put back)."""
    check = replaceable or (lambda out: None)
    if renameat2(written, target, RENAME_EXCHANGE):  # the earlier one is now at `written`
        problem = check(written)
        if problem is not None:
            raise _appeared_meanwhile(target, problem, put_back_exchanged(written, target))
        return
    aside = hidden_sibling(target, "replaced")  # vdbflow clean puts it back should this be killed
    os.rename(target, aside)
    problem = check(aside)
    if problem is not None:
        raise _appeared_meanwhile(target, problem, put_back_aside(aside, target))
    try:
        os.rename(written, target)
    except BaseException:
        os.rename(aside, target)
        raise
    remove_tree(aside)


def displaced_path(target: Path) -> Path:
    """A fresh visible sibling of ``target`` for what came out of it and could not be put back:
    ``NAME.displaced-XXXXXXXX`` (no leftover pattern matches it, so no cleanup removes it)."""
    return target.parent / f"{target.name}.displaced-{writer_tag()[:8]}"


def put_back_exchanged(out: Path, target: Path) -> str:
    """Undo an exchange of ``target`` with ``out`` (what came out of ``target`` is at ``out``): exchange
    them again; where that fails, move ``out`` to :func:`displaced_path`.  Returns what was done."""
    try:
        if renameat2(out, target, RENAME_EXCHANGE):
            return f"it is back at {target}"
    except OSError:
        pass
    return put_back_aside(out, target)


def put_back_aside(aside: Path, target: Path) -> str:
    """Put ``aside`` (what came out of ``target``) back at ``target`` if nothing is there now, else at
    :func:`displaced_path`.  Returns what was done."""
    try:
        if not os.path.lexists(target):
            if not renameat2(aside, target, RENAME_NOREPLACE):
                os.rename(aside, target)
            return f"it is back at {target}"
    except OSError:
        pass
    kept = displaced_path(target)
    try:
        os.rename(aside, kept)
    except OSError as err:
        return f"it could not be put back ({err}) and is at {aside}"
    return f"it could not be put back at {target} (something else is there now) and is kept at {kept}"
