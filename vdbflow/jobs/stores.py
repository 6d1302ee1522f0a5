"""Where a job's stores are: a local path (``Path``) or an object-store URL (``str``) with its
``storage_options``, seen the same way by the writers, the manifest of written chunks and publishing.

A local path keeps the code paths it always had (``os``, renames); a URL is opened through fsspec (its
filesystem, for listings, small JSON objects and copies) and zarr's ``FsspecStore``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vdbflow.errors import VdbflowError

Target = Path | str  # a local path, or a URL (s3://bucket/prefix)


class OutputError(VdbflowError, RuntimeError):
    """A result could not be written or moved into place."""


def is_remote(target: Any) -> bool:
    """Whether ``target`` is an object-store URL (text) rather than a local ``Path``."""
    return isinstance(target, str)


def filesystem(target: Target, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """fsspec's filesystem of ``target`` and its path there (a local path: the local filesystem)."""
    import fsspec

    if not is_remote(target):
        return fsspec.filesystem("file"), str(Path(target).absolute())
    fs, path = fsspec.core.url_to_fs(str(target), **(options or {}))
    return fs, str(path).rstrip("/")


def child(target: Target, name: str) -> Target:
    """``target/name`` as a Path or a URL."""
    return Path(target) / name if not is_remote(target) else f"{str(target).rstrip('/')}/{name}"


def parent_and_name(target: Target) -> tuple[Target, str]:
    """The folder (or prefix) that holds ``target`` and its last name."""
    if not is_remote(target):
        path = Path(target)
        return path.parent, path.name
    head, _, name = str(target).rstrip("/").rpartition("/")
    return head, name


def zarr_store(target: Target, options: dict[str, Any] | None = None, read_only: bool = False) -> Any:
    """zarr's store of ``target``: a ``LocalStore`` of a path, an ``FsspecStore`` of a URL."""
    import zarr.storage

    if not is_remote(target):
        return zarr.storage.LocalStore(str(target), read_only=read_only)
    return zarr.storage.FsspecStore.from_url(str(target), storage_options=dict(options or {}), read_only=read_only)


def read_json(fs: Any, path: str) -> Any:
    """The JSON document at ``path`` of ``fs``, or None where there is none or it does not parse."""
    try:
        return json.loads(fs.cat_file(path))
    except (OSError, ValueError):
        return None


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is fsspec's local filesystem."""
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol


def write_json(fs: Any, path: str, document: Any) -> None:
    """Write ``document`` as JSON to ``path`` of ``fs`` (one object: a PUT of an object store is whole)."""
    data = json.dumps(document, sort_keys=True).encode()
    if is_local(fs):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    fs.pipe_file(path, data)


def remove(target: Target, options: dict[str, Any] | None = None) -> None:
    """Remove everything at ``target`` (a tree, a prefix); errors are ignored."""
    if not is_remote(target):
        from vdbflow.io.atomic import remove_tree

        remove_tree(Path(target))
        return
    fs, path = filesystem(target, options)
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except (OSError, ValueError):
        pass
