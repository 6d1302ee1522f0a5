"""The VTKHDF writer of job results (:mod:`vdbflow.io.vtkhdf`, h5py; ParaView opens the file): as the NetCDF
writer does, the workers write their chunks to a hidden Zarr store beside the target (resumable, unit by
unit), then one task writes the whole file from it; the job publishes the file atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xarray as xr

from vdbflow.io.atomic import remove_tree
from vdbflow.jobs.publish.writers import netcdf_file, plain_attrs

FORMAT = "vtkhdf"

prepare = netcdf_file.prepare
manifest_target = netcdf_file.manifest_target
discard = netcdf_file.discard


def _write_file(staged: Any, staging: str, target: str) -> None:
    """The file ``target`` written from the complete Zarr store ``staging`` (block by block), then the
    store removed."""
    import warnings

    import dask

    from vdbflow.io import vtkhdf

    with warnings.catch_warnings():  # the staging store's manifest is not a Zarr node
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        ds = xr.open_zarr(staging, consolidated=False)
    with dask.config.set(scheduler="synchronous"), ds:
        vtkhdf.write(ds, target)
    remove_tree(Path(staging))


def lazy_write(ds: xr.Dataset, spec: Any, target: Path, plan: Any = None) -> Any:
    """A Dask Delayed that writes ``ds`` to the VTKHDF file ``target``: the chunks to the hidden Zarr store
    :func:`~vdbflow.jobs.publish.writers.netcdf_file.staging_path` from the workers, then the file by one task.  A
    Dataset without point coordinates is a :class:`~vdbflow.errors.WriteError` now, before any sampling."""
    import dask

    from vdbflow.io import vtkhdf
    from vdbflow.jobs.publish.writers import zarr_store

    vtkhdf.point_coords(ds)
    staging = netcdf_file.staging_path(target)
    staged = zarr_store.lazy_write(ds, netcdf_file.Staging(), staging, plan)
    name = f"vdbflow-vtkhdf-{dask.base.tokenize(str(target))}"
    return dask.delayed(_write_file, pure=False)(staged, str(staging), str(target), dask_key_name=name)


def add_attrs(target: Path, attrs: dict[str, Any], spec: Any = None) -> None:
    """Add global attrs (the root group's) to a written, not yet published, file."""
    import h5py

    from vdbflow.io.vtkhdf import attr_value

    with h5py.File(target, "a") as f:
        for k, v in plain_attrs(attrs).items():
            f.attrs[k] = attr_value(v)
