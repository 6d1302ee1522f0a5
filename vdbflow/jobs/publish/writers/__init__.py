"""Writers of job results: one class per output format, each a :class:`Writer`.

:mod:`vdbflow.jobs.publish.output` publishes what a writer wrote (atomically, at the final path).  A new
format is a new module here and a row of :data:`WRITERS`; the config's format names come from the table.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Protocol

import numpy as np

from vdbflow.errors import WriteError

# format name -> (module, its Writer class, the path suffixes that imply it); the modules are imported when a job
# writes, so that the config reads the names without loading xarray.  The first format is the default of other paths.
WRITERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "zarr": ("vdbflow.jobs.publish.writers.zarr_store", "ZarrStore", (".zarr",)),
    "netcdf": ("vdbflow.jobs.publish.writers.netcdf_file", "NetcdfFile", (".nc", ".nc4", ".netcdf")),
    "vtkhdf": ("vdbflow.jobs.publish.writers.vtkhdf_file", "VtkhdfFile", (".vtkhdf",)),  # ParaView (io.vtkhdf)
}


class Writer(Protocol):
    """What writes a job's result in one format.  ``target`` is the hidden path (or URL) the result is written
    to before it is published; the writer is made from the config's ``output`` section (``of(spec)``)."""

    format: str  # the name ``output.format`` takes, a key of WRITERS

    def prepare(self, client: Any) -> None:
        """Anything the cluster's workers need before writing (run once a job)."""

    def lazy_write(self, ds: Any, target: Any, plan: Any = None) -> Any:
        """A Dask Delayed that writes the chunked Dataset ``ds`` to ``target`` from the workers, the units
        ``plan`` (:class:`~vdbflow.jobs.publish.units.UnitPlan`) says are not written yet."""

    def add_attrs(self, target: Any, attrs: dict[str, Any]) -> None:
        """Global attrs added to the written, not yet published, result."""

    def manifest_target(self, target: Any) -> Any:
        """The Zarr store the workers write for ``target``, whose manifest records the units written."""

    def discard(self, target: Any) -> None:
        """Remove everything a failed attempt wrote (the result, and any store of its own)."""


def format_of_path(path: Any) -> str:
    """The output format a path's suffix implies (``WRITERS``), the first format for any other suffix."""
    suffix = str(getattr(path, "suffix", "")).lower()
    return next((name for name, (_, _, suffixes) in WRITERS.items() if suffix in suffixes), next(iter(WRITERS)))


def writer(format_name: str, spec: Any = None) -> Writer:
    """The writer of an output format (a name of :data:`WRITERS`), with the options of the config's ``output``
    section ``spec`` (None: the format's defaults)."""
    if format_name not in WRITERS:
        raise WriteError(f"expected an output format among {', '.join(WRITERS)}, got {format_name!r}")
    module, name, _ = WRITERS[format_name]
    return getattr(importlib.import_module(module), name).of(spec)


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
