"""Points files at URLs (``points.path: s3://...``, read with ``points.storage_options``): a .npy file's
header by one range and each chunk's rows by another (in the task that needs them, the object checked to
be the one the job planned with), a Zarr array through fsspec, .csv / .parquet through Dask's readers."""

from __future__ import annotations

import csv
from typing import Any

import numpy as np

from vdbflow.errors import PointsError, StorageError, VolumeError
from vdbflow.io import location
from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import RemoteFile, Url, filesystem
from vdbflow.io.zarr_url import checked_store


def npy_header(url: Url) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and data offset of the .npy file at ``url`` (one request)."""
    return location.npy_header(RemoteFile.open(url), PointsError, "points.path: ")


def npy_url_rows(
    block: int, start: int, stop: int, url: Url, identity: FileIdentity, offset: int, dtype: str
) -> np.ndarray:
    """Rows ``[start, stop)`` of the (N, 3) .npy file at ``url`` as float64 (one range request)."""
    dt = np.dtype(dtype)
    row = 3 * dt.itemsize

    def read() -> np.ndarray:
        remote = RemoteFile.open(url)
        try:
            ((_, data),) = remote.read_ranges([(offset + start * row, offset + stop * row)])
        except StorageError as err:
            raise PointsError(f"points.path: {err}") from None
        return np.frombuffer(data, dt).reshape(-1, 3).astype(np.float64)

    return identity.opened(read, f"when its points {start:,} to {stop:,} were read")


def zarr_array(url: Url, component: str | None) -> Any:
    """The Dask array of a Zarr store at ``url`` (``component``: the array inside a group), once no
    metadata file of the store names a pickle codec (decoding it would run code from the store)."""
    import dask.array as da
    import zarr

    try:  # each metadata document checked as Zarr reads it: the bytes checked are the bytes decoded
        return da.from_zarr(zarr.open_array(checked_store(url), path=component or "", mode="r"))
    except (VolumeError, StorageError) as err:
        raise PointsError(f"points.path: {err}") from None
    except Exception as err:  # zarr, fsspec and the store raise several kinds
        where = f" (array {component!r})" if component else ""
        raise PointsError(f"points.path: expected a Zarr array of shape (N, 3) at {url}{where}: {err}") from None


def table_header(url: Url, suffix: str) -> list[str]:
    """The column names of a .csv (its first line) or .parquet (its schema) file at ``url``."""
    fs, path = filesystem(url)
    with fs.open(path, "rb") as f:
        if suffix == ".csv":
            first = f.read(1 << 20).split(b"\n", 1)[0].decode("utf-8")
            return next(csv.reader([first]), [])
        import pyarrow.parquet as pq

        return list(pq.read_schema(f).names)


def read_table(url: Url, suffix: str) -> Any:
    """A Dask dataframe of a .csv or .parquet file at ``url``."""
    import dask.dataframe as dd

    options = url.storage_options or None
    return (
        dd.read_csv(str(url), storage_options=options)
        if suffix == ".csv"
        else dd.read_parquet(str(url), storage_options=options)
    )
