"""The VTKHDF writer of job results (:mod:`vdbflow.io.vtkhdf`, h5py; ParaView opens the file): as the NetCDF
writer does, the workers write their chunks to a hidden Zarr store beside the target (resumable, unit by
unit), then one task writes the whole file from it; the job publishes the file atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import h5py
import xarray as xr

from vdbflow.core.atomic import remove_tree
from vdbflow.io import vtkhdf
from vdbflow.jobs.publish.units import UnitPlan
from vdbflow.jobs.publish.writers import plain_attrs
from vdbflow.jobs.publish.writers.zarr_store import StagedFile, open_staged


def _write_file(staged: Any, staging: str, target: str) -> None:
    """The file ``target`` written from the complete Zarr store ``staging`` (block by block), then the
    store removed."""
    with dask.config.set(scheduler="synchronous"), open_staged(staging) as ds:
        vtkhdf.write(ds, target)
    remove_tree(Path(staging))


class VtkhdfFile(StagedFile):
    """The VTKHDF writer (a :class:`~vdbflow.jobs.publish.writers.Writer`)."""

    format = "vtkhdf"

    def lazy_write(self, ds: xr.Dataset, target: Path, plan: UnitPlan | None = None) -> Any:
        """A Dask Delayed that writes ``ds`` to the VTKHDF file ``target``: the chunks to the staging store
        from the workers, then the file by one task.  A Dataset without point coordinates is a
        :class:`~vdbflow.errors.WriteError` now, before any sampling."""
        vtkhdf.point_coords(ds)
        return self.staged(ds, target, plan, _write_file)

    def add_attrs(self, target: Path, attrs: dict[str, Any]) -> None:
        """Add global attrs (the root group's) to a written, not yet published, file."""
        with h5py.File(target, "a") as f:
            for k, v in plain_attrs(attrs).items():
                f.attrs[k] = vtkhdf.attr_value(v)
