"""Writers of job results: one module per output format, each with the same functions.

A writer module defines

- ``FORMAT``, the name ``output.format`` takes;
- ``prepare(client, spec)``: anything the cluster's workers need before writing (run once a job);
- ``lazy_write(ds, spec, target, plan) -> Delayed``: a Dask Delayed that writes the chunked Dataset ``ds``
  to the hidden path ``target`` from the workers, the units ``plan`` says are not written yet (the store's
  metadata is written now);
- ``add_attrs(target, attrs, spec)``: global attrs added to the written, not yet published, store;
- ``manifest_target(target)``: the Zarr store the workers write, whose manifest records the units written
  (:mod:`~vdbflow.jobs.publish.units`);
- ``discard(target, spec)``: remove everything a failed attempt wrote (the store, and any store of its own).

:mod:`vdbflow.jobs.publish.output` publishes what a writer wrote (atomically, at the final path).  A new format is
a new module here and a row of :data:`WRITERS`; the config's format names come from the table.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import numpy as np

# format name -> (module, the path suffixes that imply it); the modules are imported when a job writes, so
# that the config reads the names without loading xarray.  The first format is the default of other paths.
WRITERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "zarr": ("vdbflow.jobs.publish.writers.zarr_store", (".zarr",)),
    "netcdf": ("vdbflow.jobs.publish.writers.netcdf_file", (".nc", ".nc4", ".netcdf")),
    "vtkhdf": ("vdbflow.jobs.publish.writers.vtkhdf_file", (".vtkhdf",)),  # ParaView / VTK (vdbflow.io.vtkhdf)
}


def format_of_path(path: Any) -> str:
    """The output format a path's suffix implies (``WRITERS``), the first format for any other suffix."""
    suffix = str(getattr(path, "suffix", "")).lower()
    return next((name for name, (_, suffixes) in WRITERS.items() if suffix in suffixes), next(iter(WRITERS)))


def writer(format_name: str) -> ModuleType:
    """The writer module of an output format (a name of :data:`WRITERS`)."""
    import importlib

    from vdbflow.errors import WriteError

    if format_name not in WRITERS:
        raise WriteError(f"expected an output format among {', '.join(WRITERS)}, got {format_name!r}")
    return importlib.import_module(WRITERS[format_name][0])


def plain_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attrs every store accepts: nested values become JSON text."""
    out = {}
    for k, v in attrs.items():
        if isinstance(v, (dict, list, tuple)):
            v = json.dumps(v, default=lambda o: o.tolist() if isinstance(o, np.ndarray) else str(o))
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


def with_plain_attrs(ds: Any) -> Any:
    """A copy of Dataset ``ds`` whose attrs (its own and its variables') every store accepts; the caller's
    attrs stay as they are."""
    ds = ds.copy().assign_attrs(plain_attrs(ds.attrs))
    for name in ds.variables:
        ds[name].attrs = plain_attrs(ds[name].attrs)
    return ds
