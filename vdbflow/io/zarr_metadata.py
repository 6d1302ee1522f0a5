"""Zarr metadata documents checked before Zarr decodes anything they describe: a ``pickle`` codec would
run code from the store.  Shared by the URL stores (:mod:`vdbflow.io.zarr_url`) and Zarr 3's checked store
(:mod:`vdbflow.io.zarr_checked`)."""

from __future__ import annotations

import json
from typing import Any

from vdbflow.errors import VolumeError

_METADATA = (".zarray", ".zgroup", ".zattrs", "zarr.json", ".zmetadata")


def pickle_codecs(meta: Any) -> list[str]:
    """The codec ids (or names) in Zarr metadata (parsed JSON) that contain 'pickle'."""
    if isinstance(meta, dict):
        own = [str(meta[k]) for k in ("id", "name") if isinstance(meta.get(k), str) and "pickle" in meta[k].lower()]
        return own + [c for v in meta.values() for c in pickle_codecs(v)]
    if isinstance(meta, list):
        return [c for v in meta for c in pickle_codecs(v)]
    return []


def is_metadata(key: str) -> bool:
    """Whether a store key names a Zarr metadata document (``.zarray``, ``zarr.json``, ...)."""
    return key.rsplit("/", 1)[-1] in _METADATA


def check_metadata(data: bytes, name: str, url: str) -> None:
    """Raise VolumeError when the metadata document ``data`` (store key ``name``) is not JSON or names a
    pickle codec."""
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError) as err:
        raise VolumeError(f"expected JSON Zarr metadata in {name} of {url}: {err}") from None
    found = pickle_codecs(meta)
    if found:
        raise VolumeError(
            f"expected Zarr codecs that only decode data in {url}, found {sorted(found)} in {name}: decoding "
            "them would run code from the store"
        )
