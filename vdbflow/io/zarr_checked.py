"""Zarr 3's fsspec store with each metadata document checked as it is read (:func:`vdbflow.io.zarr_url.checked_store`);
its own module because it imports Zarr 3 (a class at module level: it pickles by name to Dask workers)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zarr.storage import FsspecStore, WrapperStore

from vdbflow.errors import VolumeError
from vdbflow.io.zarr_metadata import check_metadata, is_metadata


class CheckedStore(WrapperStore):
    """A read-only fsspec store of the Zarr store at ``url``: a metadata document naming a pickle codec
    raises VolumeError as Zarr reads it, before anything is decoded."""

    def __init__(self, store: Any, url: str = "") -> None:
        super().__init__(store)
        self.url = url

    @classmethod
    def of(cls, mapper: Any, url: str) -> CheckedStore:
        """The checked store over an fsspec mapper."""
        return cls(FsspecStore.from_mapper(mapper, read_only=True), url)

    def _with_store(self, store: Any) -> CheckedStore:
        return type(self)(store, self.url)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        """The value of ``key``; a metadata document checked first."""
        buf = await self._store.get(key, prototype, byte_range)
        if buf is not None and is_metadata(key):
            if byte_range is not None:
                raise VolumeError(f"expected Zarr metadata {key} of {self.url} read whole, not in parts")
            check_metadata(buf.to_bytes(), key, self.url)
        return buf

    async def get_partial_values(self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]) -> list[Any]:
        """Parts of values (chunks of sharded arrays): never of a metadata document."""
        key_ranges = list(key_ranges)
        for key, _ in key_ranges:
            if is_metadata(key):
                raise VolumeError(f"expected Zarr metadata {key} of {self.url} read whole, not in parts")
        return await self._store.get_partial_values(prototype, key_ranges)
