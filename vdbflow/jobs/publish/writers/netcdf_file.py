"""The NetCDF-4 writer of job results (h5netcdf): the workers write their chunks to a hidden Zarr store
beside the target, and one task then writes the whole file from it, in one process.

Why not every worker into the file: HDF5 locks a file while a process has it open, and xarray keeps the
files it wrote open in each worker's file cache.  On a cluster whose workers outlive a job (``cluster:
{kind: address}``) the next job's chunks then failed to open the file ("unable to lock file, errno = 11"),
and writes from several processes to one HDF5 file were only as safe as a lock on the scheduler.  Writing
the chunks to Zarr (one object a chunk, any number of writers) and the file once costs a second pass over
the result, which is small next to the sampling of a slice or a line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xarray as xr

from vdbflow.io.atomic import remove_tree
from vdbflow.jobs.publish.writers import plain_attrs, zarr_store

FORMAT = "netcdf"


class Staging:
    """The Zarr store's options: chunks stored as they are (read once, then removed), format 2, local."""

    compression = "none"
    resolved_zarr_format = 2
    storage_options = None
    shard = None


def staging_path(target: Path) -> Path:
    """The hidden Zarr store of ``target``'s chunks: ``.NAME.tmp-TAG`` beside ``.NAME.partial-TAG`` (a
    leftover ``vdbflow clean`` and the next job's tidy recognise)."""
    return target.parent / target.name.replace(".partial-", ".tmp-", 1)


def prepare(client: Any, spec: Any) -> None:
    """What the Zarr store of the chunks needs on the workers."""
    zarr_store.prepare(client, Staging())


def _write_file(staged: Any, staging: str, target: str) -> None:
    """The file ``target`` written from the complete Zarr store ``staging`` (in this process, chunk by
    chunk), then the store removed."""
    import warnings

    import dask

    from vdbflow.io.netcdf import cf_ready

    with warnings.catch_warnings():  # the staging store's manifest is not a Zarr node
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        ds = xr.open_zarr(staging, consolidated=False)
    with dask.config.set(scheduler="synchronous"), ds:
        cf_ready(ds).to_netcdf(target, engine="h5netcdf")  # flags typed as stored (Zarr's JSON made them int64)
    remove_tree(Path(staging))


def manifest_target(target: Path) -> Path:
    """The store the workers write for ``target`` (and whose manifest says what was written): the staging
    store of its chunks."""
    return staging_path(Path(target))


def lazy_write(ds: xr.Dataset, spec: Any, target: Path, plan: Any = None) -> Any:
    """A Dask Delayed that writes ``ds`` to the NetCDF file ``target``: the chunks to the hidden Zarr store
    :func:`staging_path` from the workers (``plan``: :func:`vdbflow.jobs.publish.writers.zarr_store.lazy_write`'s),
    then the file by one task."""
    import dask

    staging = staging_path(target)
    staged = zarr_store.lazy_write(ds, Staging(), staging, plan)
    name = f"vdbflow-netcdf-{dask.base.tokenize(str(target))}"
    return dask.delayed(_write_file, pure=False)(staged, str(staging), str(target), dask_key_name=name)


def add_attrs(target: Path, attrs: dict[str, Any], spec: Any = None) -> None:
    """Add global attrs to a written (not yet published) file."""
    import h5netcdf

    with h5netcdf.File(target, "a") as f:
        for k, v in plain_attrs(attrs).items():
            f.attrs[k] = v


def discard(target: Path, spec: Any = None) -> None:
    """Remove what a failed attempt wrote: the file, and the store of its chunks."""
    remove_tree(target)
    remove_tree(staging_path(target))
