"""Zarr stores at URLs handed to Zarr itself (volume stores, dense inputs of ``vdbflow convert``, points
files): refused when their metadata names a ``pickle`` codec, whose decoding runs code from the store
(what :func:`vdbflow.io.zarr_v2.refuse_code_codecs` does for local stores).

:func:`checked_store` is the store Zarr reads: each metadata document is checked as Zarr reads it, so
the bytes checked are the bytes Zarr decodes (no second read that a store replaced meanwhile could
answer differently), and nothing is decoded before its metadata passed."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from vdbflow.io.location import filesystem
from vdbflow.io.zarr_metadata import check_metadata, is_metadata


class CheckedMapping(MutableMapping):
    """A read-only view of an fsspec mapper whose metadata values are checked as they are read (Zarr 2, whose
    stores must be mutable mappings: writing raises)."""

    def __init__(self, mapper: Any, url: str) -> None:
        self.mapper, self.url = mapper, url

    def __getitem__(self, key: str) -> bytes:
        data = self.mapper[key]
        if is_metadata(key):
            check_metadata(data, key, self.url)
        return data

    def __iter__(self) -> Iterator[str]:
        return iter(self.mapper)

    def __len__(self) -> int:
        return len(self.mapper)

    def __contains__(self, key: object) -> bool:
        return key in self.mapper

    def __setitem__(self, key: str, value: bytes) -> None:
        raise PermissionError(f"{self.url} is read only here (writing {key})")

    def __delitem__(self, key: str) -> None:
        raise PermissionError(f"{self.url} is read only here (deleting {key})")


def checked_store(url: str, storage_options: dict[str, Any] | None = None) -> Any:
    """The read-only store of the Zarr store at ``url`` to hand to Zarr (``xr.open_zarr``,
    ``zarr.open_array``): a metadata document naming a pickle codec raises VolumeError when Zarr reads
    it, before anything is decoded."""
    fs, path = filesystem(url, storage_options)
    return checked(fs.get_mapper(path), url)


def checked(mapper: Any, url: str) -> Any:
    """:func:`checked_store` of an fsspec mapper of the store at ``url``."""
    import zarr

    if int(zarr.__version__.split(".")[0]) < 3:
        return CheckedMapping(mapper, url)
    from vdbflow.io.zarr_checked import CheckedStore

    return CheckedStore.of(mapper, url)
