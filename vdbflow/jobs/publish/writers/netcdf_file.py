"""The NetCDF-4 writer of job results (h5netcdf): the workers write their chunks to a hidden Zarr store
beside the target, and one task then writes the whole file from it, in one process
(:class:`~vdbflow.jobs.publish.writers.zarr_store.StagedFile`).

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

import dask
import h5netcdf
import xarray as xr

from vdbflow.core.atomic import remove_tree
from vdbflow.io.netcdf import cf_ready
from vdbflow.jobs.publish.units import UnitPlan
from vdbflow.jobs.publish.writers import plain_attrs
from vdbflow.jobs.publish.writers.zarr_store import StagedFile, open_staged


def _write_file(staged: Any, staging: str, target: str) -> None:
    """The file ``target`` written from the complete Zarr store ``staging`` (in this process, chunk by
    chunk), then the store removed."""
    with dask.config.set(scheduler="synchronous"), open_staged(staging) as ds:
        cf_ready(ds).to_netcdf(target, engine="h5netcdf")  # flags typed as stored (Zarr's JSON made them int64)
    remove_tree(Path(staging))


class NetcdfFile(StagedFile):
    """The NetCDF writer (a :class:`~vdbflow.jobs.publish.writers.Writer`)."""

    format = "netcdf"

    def lazy_write(self, ds: xr.Dataset, target: Path, plan: UnitPlan | None = None) -> Any:
        """A Dask Delayed that writes ``ds`` to the NetCDF file ``target``: the chunks to the staging store
        from the workers, then the file by one task."""
        return self.staged(ds, target, plan, _write_file)

    def add_attrs(self, target: Path, attrs: dict[str, Any]) -> None:
        """Add global attrs to a written (not yet published) file."""
        with h5netcdf.File(target, "a") as f:
            for k, v in plain_attrs(attrs).items():
                f.attrs[k] = v
