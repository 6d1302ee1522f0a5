"""What marks a path as an earlier vdbflow result, which ``output.overwrite: always`` may replace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vdbflow.io import zarr_v2

RESULT_TITLE = "vdbflow run result"  # with a 'vdbflow_config' attr, what marks a store as vdbflow's own
ZARR_METADATA = (".zattrs", ".zgroup", ".zmetadata")


def _marked(attrs: Any) -> bool:
    return isinstance(attrs, dict) and attrs.get("title") == RESULT_TITLE and "vdbflow_config" in attrs


def not_a_result(path: Path) -> str | None:
    """None when ``path`` holds an earlier vdbflow result and nothing else; else what it holds instead.

    A result is a Zarr store (its ``.zattrs``) or a NetCDF file whose global attrs carry vdbflow's title
    and config; a Zarr store must hold only Zarr metadata and arrays.
    """
    if path.is_symlink():
        return f"a symbolic link to {os.readlink(path)}"
    if path.is_dir():
        try:
            attrs = zarr_v2.read_json(path / ".zattrs", "Zarr attrs")  # bounded; never a FIFO
        except (OSError, ValueError):
            entries = sorted(e.name for e in path.iterdir())
            return f"a directory that is not a Zarr store written by vdbflow (it holds {entries[:5]}" + (
                f" and {len(entries) - 5} more)" if len(entries) > 5 else ")"
            )
        if not _marked(attrs):
            return "a Zarr store without vdbflow's attributes (title, vdbflow_config)"
        others = sorted(
            e.name
            for e in path.iterdir()
            if not (e.name in ZARR_METADATA or (e.is_dir() and not e.is_symlink() and (e / ".zarray").is_file()))
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
