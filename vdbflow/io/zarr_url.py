"""Zarr stores at URLs handed to Zarr itself (dense inputs of ``vdbflow convert``, points files): refused
when their metadata names a ``pickle`` codec, whose decoding runs code from the store (what
:func:`vdbflow.io.zarr_v2.refuse_code_codecs` does for local stores)."""

from __future__ import annotations

import json
from typing import Any

from vdbflow.errors import VolumeError
from vdbflow.io.location import filesystem, storage_error

_METADATA = (".zarray", ".zgroup", ".zattrs", "zarr.json", ".zmetadata")
_MAX_METADATA_FILES = 10_000


def pickle_codecs(meta: Any) -> list[str]:
    """The codec ids (or names) in Zarr metadata (parsed JSON) that contain 'pickle'."""
    if isinstance(meta, dict):
        own = [str(meta[k]) for k in ("id", "name") if isinstance(meta.get(k), str) and "pickle" in meta[k].lower()]
        return own + [c for v in meta.values() for c in pickle_codecs(v)]
    if isinstance(meta, list):
        return [c for v in meta for c in pickle_codecs(v)]
    return []


def refuse_code_codecs_url(url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Raise VolumeError when a metadata file of the Zarr store at ``url`` names a pickle codec; a
    StorageError when the store cannot be listed."""
    fs, path = filesystem(url, storage_options)
    try:
        names = [p for p in fs.find(path) if p.rsplit("/", 1)[-1] in _METADATA]
    except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
        raise storage_error(url, err, "list") from None
    if len(names) > _MAX_METADATA_FILES:
        raise VolumeError(f"expected at most {_MAX_METADATA_FILES:,} Zarr metadata files in {url}, found more")
    for name in names:
        try:
            meta = json.loads(fs.cat_file(name))
        except ValueError as err:
            raise VolumeError(f"expected JSON Zarr metadata in {name} of {url}: {err}") from None
        except Exception as err:  # noqa: BLE001
            raise storage_error(url, err) from None
        found = pickle_codecs(meta)
        if found:
            raise VolumeError(
                f"expected Zarr codecs that only decode data in {url}, found {sorted(found)} in {name}: decoding "
                "them would run code from the store"
            )
