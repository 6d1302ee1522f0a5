"""What marks a path as an earlier vdbflow result, which ``output.overwrite: always`` may replace."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vdbflow.io import zarr_v2

RESULT_TITLE = "vdbflow run result"  # with a 'vdbflow_config' attr, what marks a store as vdbflow's own
ZARR_METADATA = (".zattrs", ".zgroup", ".zmetadata", "zarr.json")


def _marked(attrs: Any) -> bool:
    return isinstance(attrs, dict) and attrs.get("title") == RESULT_TITLE and "vdbflow_config" in attrs


def _array_folder(path: Path) -> bool:
    """Whether the folder ``path`` is a Zarr array (format 2 or 3)."""
    if (path / ".zarray").is_file():
        return True
    meta = path / "zarr.json"
    if not meta.is_file():
        return False
    try:
        return zarr_v2.read_json(meta, "Zarr metadata").get("node_type") == "array"
    except (OSError, ValueError, AttributeError):
        return False


def not_a_remote_result(fs: Any, root: str) -> str | None:
    """:func:`not_a_result` of the prefix ``root`` of an fsspec filesystem (an object store)."""
    fs.invalidate_cache()
    try:
        names = {p.rstrip("/").rsplit("/", 1)[-1]: p for p in fs.ls(root, detail=False)}
    except (OSError, ValueError):
        return "nothing that can be listed"
    attrs: Any = None
    try:
        if "zarr.json" in names:
            attrs = json.loads(fs.cat_file(f"{root}/zarr.json")).get("attributes")
        elif ".zattrs" in names:
            attrs = json.loads(fs.cat_file(f"{root}/.zattrs"))
    except (OSError, ValueError, AttributeError):
        attrs = None
    if attrs is None:
        return f"objects that are not a Zarr store written by vdbflow ({sorted(names)[:5]})"
    if not _marked(attrs):
        return "a Zarr store without vdbflow's attributes (title, vdbflow_config)"
    others = sorted(
        n
        for n, p in names.items()
        if n not in ZARR_METADATA and not (fs.exists(f"{p}/.zarray") or fs.exists(f"{p}/zarr.json"))
    )
    if others:
        return f"a vdbflow result that holds other objects too: {others[:5]}"
    return None


def not_a_result(path: Path) -> str | None:
    """None when ``path`` holds an earlier vdbflow result and nothing else; else what it holds instead.

    A result is a Zarr store (its ``.zattrs``, or format 3's ``zarr.json``) or a NetCDF file whose global
    attrs carry vdbflow's title and config; a Zarr store must hold only Zarr metadata and arrays.
    """
    if path.is_symlink():
        return f"a symbolic link to {os.readlink(path)}"
    if path.is_dir():
        try:
            if (path / "zarr.json").is_file() and not (path / ".zattrs").exists():  # Zarr format 3
                attrs = zarr_v2.read_json(path / "zarr.json", "Zarr metadata").get("attributes")
            else:
                attrs = zarr_v2.read_json(path / ".zattrs", "Zarr attrs")  # bounded; never a FIFO
        except (OSError, ValueError, AttributeError):
            entries = sorted(e.name for e in path.iterdir())
            return f"a directory that is not a Zarr store written by vdbflow (it holds {entries[:5]}" + (
                f" and {len(entries) - 5} more)" if len(entries) > 5 else ")"
            )
        if not _marked(attrs):
            return "a Zarr store without vdbflow's attributes (title, vdbflow_config)"
        others = sorted(
            e.name
            for e in path.iterdir()
            if not (e.name in ZARR_METADATA or (e.is_dir() and not e.is_symlink() and _array_folder(e)))
        )
        if others:
            return f"a vdbflow result that holds other files too: {others[:5]}"
        return None
    if path.is_file():
        import h5py

        try:
            with h5py.File(path, "r") as f:
                attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        except OSError:
            return "a file that is not a NetCDF (HDF5) file"
        return None if _marked(attrs) else "a NetCDF file without vdbflow's attributes (title, vdbflow_config)"
    return "neither a file nor a directory"
