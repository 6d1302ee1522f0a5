"""The NetCDF-4 writer of job results (h5netcdf): one file, written through the Dask scheduler's lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xarray as xr

from vdbflow.jobs.writers import plain_attrs, with_plain_attrs

FORMAT = "netcdf"


def prepare(client: Any, spec: Any) -> None:
    """Nothing to set up on the workers."""


def lazy_write(ds: xr.Dataset, spec: Any, target: Path) -> Any:
    """A Dask Delayed that writes ``ds`` to the NetCDF file ``target`` (its header is written now)."""
    return with_plain_attrs(ds).to_netcdf(target, engine="h5netcdf", compute=False)


def add_attrs(target: Path, attrs: dict[str, Any]) -> None:
    """Add global attrs to a written (not yet published) file."""
    import h5netcdf

    with h5netcdf.File(target, "a") as f:
        for k, v in plain_attrs(attrs).items():
            f.attrs[k] = v
