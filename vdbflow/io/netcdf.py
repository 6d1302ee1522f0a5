"""NetCDF-4 files of results that CF checkers pass: flags typed as their variables are stored, and a
``history`` line for each program that wrote the file (CF 1.10 §2.6.2).

A Zarr store keeps attrs as JSON, so ``flag_values: [0, 1]`` read back from one is a list of Python ints,
which a NetCDF writer stores as int64 - beside a boolean variable stored as int8, which CF (§3.5) and the
IOOS compliance checker refuse.  And a coordinate variable of strings (``component(component)``) is not
CF's either.  :func:`cf_ready` types the flags again and stores string labels as character arrays;
:func:`to_netcdf` (and ``ds.vdbflow.to_netcdf``) writes a result, or a Zarr result opened with xarray,
that way.
"""

from __future__ import annotations

import os
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import xarray as xr

from vdbflow.core.atomic import private_directory, remove_tree
from vdbflow.errors import WriteError

FLAG_ATTRS = ("flag_values", "flag_masks", "valid_range", "valid_min", "valid_max")


def stored_dtype(var: xr.Variable) -> np.dtype:
    """The data type NetCDF stores ``var`` as: booleans as int8 (xarray's encoding), others as they are."""
    return np.dtype(np.int8) if var.dtype == bool else var.dtype


def cf_ready(ds: xr.Dataset) -> xr.Dataset:
    """A copy of ``ds`` whose flag and range attrs have the type its variables are stored as, and whose string
    labels (``component``, ``axis``) are stored as CF character arrays: a coordinate variable of strings is
    not CF's (CF 1.10 §1.3: numeric), the checker stops on one; xarray reads the characters back as the
    same labels, still the dims' index."""
    out = ds.copy()
    for name, var in out.variables.items():
        if var.dtype.kind in "OUT" and var.ndim == 1 and name in out.dims:
            var.encoding["dtype"] = "S1"
        if var.dtype.kind in "biuf":
            typed = stored_dtype(var)
            var.attrs.update({k: np.asarray(var.attrs[k]).astype(typed) for k in FLAG_ATTRS if k in var.attrs})
    return out


def now() -> str:
    """The time of a history line: UTC, ISO 8601 to the second (``2026-12-06T16:14:43Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def command_line() -> str:
    """This process's command, as a history line names it: ``vdbflow run job.yaml`` for the CLI, else the
    Python program (``python script.py ARGS``)."""
    argv = list(sys.argv) if sys.argv and sys.argv[0] else []
    if argv and Path(argv[0]).name in ("vdbflow", "cli.py"):
        return shlex.join(["vdbflow", *argv[1:]])
    return shlex.join(["python", *argv]) if argv else "python (interactive)"


def history_line(what: str, when: str | None = None) -> str:
    """One CF history line: ``TIME: WHAT`` (WHAT: the command, or the call, that wrote the file)."""
    return f"{when or now()}: {what}"


def add_history(attrs: dict, line: str) -> dict:
    """``attrs`` with ``line`` appended to their ``history`` (CF: one line a program, oldest first)."""
    earlier = str(attrs.get("history", "")).rstrip("\n")
    return {**attrs, "history": f"{earlier}\n{line}" if earlier else line}


def to_netcdf(ds: xr.Dataset, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``ds`` as a NetCDF-4 file (h5netcdf) whose flags are typed as CF asks (:func:`cf_ready`) and
    whose history says this call wrote it; whole or not at all (written in a private directory beside
    ``path``, then renamed).
    An existing file is replaced only with ``overwrite``.  Returns the path."""
    path = Path(path)
    if not overwrite and os.path.lexists(path):
        raise WriteError(f"expected no file at {path} (overwrite=True replaces it), found one")
    out = cf_ready(ds)
    out.attrs = add_history(out.attrs, history_line(f"{command_line()}: ds.vdbflow.to_netcdf({str(path)!r})"))
    where = private_directory(path)  # xarray writes Dask chunks to a path, not a file object
    try:
        written = where / path.name
        out.to_netcdf(written, engine="h5netcdf")
        if overwrite:
            os.replace(written, path)  # a link at path is replaced, not followed
        else:
            os.link(written, path, follow_symlinks=False)  # fails if anything appeared at path meanwhile
    except OSError as err:
        raise WriteError(f"could not write {path}: {err}") from err
    finally:
        remove_tree(where)
    return path
