"""Label coordinates (``component``, ``axis``) of Zarr format 3 results, in a form every v3 reader takes.

The Zarr v3 core specification has numeric and boolean data types only: zarr-python's ``string`` (and its
fixed-width ``fixed_length_utf32`` and ``null_terminated_bytes``) are extensions that other readers refuse
(tensorstore: "Error parsing object member data_type").  A format 3 result therefore stores no string
array: each label coordinate - a 1-D coordinate of strings named as its dim - is kept in the root group's
attribute ``vdbflow_labels``, ``{"component": {"labels": ["u", "v", "w"], "attrs": {"long_name": ...}},
"axis": {...}}`` (JSON, which every reader reads), and every array of the store opens anywhere.
:func:`open_result` (and ``vdbflow.open_result``) opens a result with xarray and puts the labels back as
the dims' index, so the Dataset is the one a format 2 store gives.  Plain ``xr.open_zarr`` opens the
store too, with the dims unlabelled (positions 0, 1, 2) and the labels in ``ds.attrs["vdbflow_labels"]``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.errors import StorageError

LABELS_ATTR = "vdbflow_labels"
_STRINGS = np.dtypes.StringDType()  # what zarr-python reads a format 2 store's labels as


def _entry_ok(entry: Any) -> bool:
    return (
        isinstance(entry, dict) and isinstance(entry.get("labels"), list) and isinstance(entry.get("attrs", {}), dict)
    )


def label_coords(ds: xr.Dataset) -> list[str]:
    """The label coordinates of ``ds``: 1-D coordinates of strings named as their dim."""
    return [
        str(name)
        for name, var in ds.coords.items()
        if var.ndim == 1 and var.dims == (name,) and var.dtype.kind in "OUST"
    ]


def to_attrs(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with its label coordinates moved to the attr ``vdbflow_labels`` (the caller's ``ds`` as it was)."""
    names = label_coords(ds)
    if not names:
        return ds
    labels = {
        name: {"labels": [str(v) for v in np.asarray(ds[name].values).tolist()], "attrs": dict(ds[name].attrs)}
        for name in names
    }
    out = ds.drop_vars(names)
    out.attrs = {**ds.attrs, LABELS_ATTR: labels}
    return out


def restore(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with the labels of its ``vdbflow_labels`` attr as its dims' index again (and the attr dropped);
    ``ds`` itself where it has none.  Labels that do not fit the dims are a
    :class:`~vdbflow.errors.StorageError`."""
    if LABELS_ATTR not in ds.attrs:
        return ds
    found: Any = ds.attrs[LABELS_ATTR]
    if isinstance(found, str):
        try:
            found = json.loads(found)
        except ValueError:
            found = None
    if not isinstance(found, dict) or not all(_entry_ok(v) for v in found.values()):
        raise StorageError(
            f"expected the {LABELS_ATTR} attr to map dims to {{'labels': [...], 'attrs': {{...}}}}, got {found!r:.120}"
        )
    coords = {}
    for dim, entry in found.items():
        labels = entry["labels"]
        if dim not in ds.dims or ds.sizes[dim] != len(labels):
            size = ds.sizes.get(dim)
            raise StorageError(
                f"expected {LABELS_ATTR}[{dim!r}] to hold one label for each of the dim's {size} positions, got "
                f"{len(labels)} labels for {'no such dim' if size is None else 'it'}"
            )
        coords[dim] = xr.Variable(dim, np.asarray([str(v) for v in labels], dtype=_STRINGS), entry.get("attrs", {}))
    out = ds.assign_coords(coords)
    out.attrs = {k: v for k, v in ds.attrs.items() if k != LABELS_ATTR}
    return out


def open_result(path: str | os.PathLike, **kwargs: Any) -> xr.Dataset:
    """A ``vdbflow run`` result (Zarr format 2 or 3 at a path or URL, or a NetCDF file) opened lazily with
    xarray, its label coordinates as written (a format 3 store keeps them in an attr: module docstring).
    ``kwargs`` go to ``xr.open_zarr`` (``storage_options=...``) or, for ``.nc`` files, ``xr.open_dataset``.

    Parameters
    ----------
    path : str or os.PathLike
        The result: a Zarr store (format 2 or 3; a local path or an fsspec URL such as ``s3://bucket/out.zarr``)
        or a NetCDF file (``.nc``, ``.nc4``, ``.netcdf``).
    **kwargs
        Passed on to ``xr.open_zarr`` (e.g. ``storage_options``, ``chunks``) or ``xr.open_dataset``.

    Returns
    -------
    xarray.Dataset
        The result, lazy (a Zarr store's arrays Dask-backed, a NetCDF file's read on access): the grid's
        values on the points' dims (``point`` (N,) or a grid's ``(x, y, z)``, then ``component`` (C,) for a
        vector grid), derivatives with ``axis`` (3,), the points' ``x``, ``y``, ``z`` as coordinates and
        ``component``/``axis`` labelled as they were written.

    Raises
    ------
    StorageError
        A format 3 store whose ``vdbflow_labels`` attr does not fit its dims.
    """
    text = os.fspath(path)
    if text.lower().endswith((".vtkhdf", ".hdf", ".h5", ".hdf5")):
        raise StorageError(
            f"expected a Zarr store or a NetCDF file at {text}, got a VTKHDF/HDF5 file: it is for ParaView and VTK "
            "(vtkHDFReader); read it in Python with h5py, or write the job as zarr or netcdf to open it here"
        )
    if text.lower().endswith((".nc", ".nc4", ".netcdf")):
        return xr.open_dataset(text, **kwargs)
    try:
        return restore(xr.open_zarr(text, **kwargs))
    except FileNotFoundError as err:  # zarr's GroupNotFoundError too
        raise StorageError(f"expected a Zarr store of a vdbflow result at {text}, found none ({err})") from None
