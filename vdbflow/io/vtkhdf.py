"""Results as VTKHDF files (the HDF5 format VTK and ParaView read with ``vtkHDFReader``), written with h5py.

A Dataset of points (coordinates ``x, y, z``, or ``i, j, k`` in index space) becomes

- **ImageData** where its points form a regular lattice (a job's ``grid`` or ``plane`` points, a dense box
  of ``xr.open_dataset(..., engine="vdbflow")``): ``Origin``, ``Spacing`` and ``Direction`` (the lattice's
  unit steps, columns of a 3 x 3 matrix stored row by row) say where each point is;
- **PolyData** otherwise: ``Points`` and one vertex a point (cell ``n`` is point ``n``; the points are the
  result's, flattened in C order over its point dims).

Each variable over the point dims is a point-data array: a scalar one component, a vector 3, the
Jacobian ``J[c, a] = d value[c] / d axis[a]`` 9, row-major (``3 c + a``, the order of NumPy's
``J.reshape(-1, 9)``); each array's ``components`` attr names them (``u/x u/y ... w/z``). Booleans
(``stencil_inside``) are stored as uint8 0/1. Numeric variables without the point dims go to ``FieldData``.
The Dataset's attrs (a job's provenance) are attrs of the file's root group, which VTK ignores.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core.atomic import atomic_file
from vdbflow.errors import WriteError

VERSION = (2, 0)  # of the VTKHDF format: its first with PolyData (VTK 9.3, ParaView 5.12); ImageData is 1.0
SUFFIXES = (".vtkhdf",)
_BLOCK_BYTES = 64 << 20  # a variable is read (computed) and written in blocks of about this many bytes
_COORDS = (("x", "y", "z"), ("i", "j", "k"))


@dataclass(frozen=True)
class Layout:
    """Where a Dataset's points are: their dims (in the file's order), coordinate names and, for a regular
    lattice, its origin, steps (3 x 3: one row a point dim) and shape."""

    dims: tuple[str, ...]
    coords: tuple[str, str, str]
    origin: np.ndarray | None = None
    steps: np.ndarray | None = None

    @property
    def image(self) -> bool:
        return self.origin is not None


def point_coords(ds: xr.Dataset) -> tuple[str, str, str]:
    for names in _COORDS:
        if all(n in ds.variables for n in names):
            return names
    raise WriteError(
        "expected a Dataset with point coordinates x, y, z (or i, j, k) to write as VTKHDF, found "
        f"{sorted(map(str, ds.coords))} (statistics and other results without points have no VTK form)"
    )


def _lattice(points: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(origin, steps) where ``points`` (shape (*n, 3), each n >= 2, 1 to 3 dims) is a regular lattice:
    ``origin + sum_d index_d * steps[d]``, the steps orthogonal; else None."""
    if points.ndim - 1 not in (1, 2, 3) or min(points.shape[:-1]) < 2 or not np.isfinite(points).all():
        return None
    rank = points.ndim - 1
    origin = points[(0,) * rank]
    steps = np.stack([points[tuple(int(e == d) for e in range(rank))] - origin for d in range(rank)])
    lengths = np.linalg.norm(steps, axis=1)
    if (lengths == 0).any():
        return None
    gram = (steps / lengths[:, None]) @ (steps / lengths[:, None]).T
    if not np.allclose(gram, np.eye(len(steps)), atol=1e-9):
        return None
    index = np.stack(np.meshgrid(*(np.arange(n) for n in points.shape[:-1]), indexing="ij"), axis=-1)
    expected = origin + index @ steps
    scale = max(float(np.abs(points).max()), float(lengths.max()))
    return (origin, steps) if np.allclose(points, expected, rtol=0, atol=1e-9 * scale) else None


def layout(ds: xr.Dataset) -> Layout:
    """The :class:`Layout` of ``ds``'s points (a :class:`~vdbflow.errors.WriteError` where it has none)."""
    names = point_coords(ds)
    coords = [ds[n] for n in names]
    if all(c.ndim == 1 for c in coords) and len({c.dims for c in coords}) == 3:  # a dense box: x(x), y(y), z(z)
        dims = tuple(str(c.dims[0]) for c in coords)
        axes = [np.asarray(c.values, dtype=np.float64) for c in coords]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1) if min(map(len, axes)) >= 2 else None
        found = None if grid is None else _lattice(grid)
        if found is None:
            raise WriteError(
                f"expected the box's coordinates {', '.join(names)} evenly spaced (2 or more each) to write it as "
                f"VTKHDF ImageData, found sizes {[len(a) for a in axes]}"
            )
        return Layout(dims, names, *found)
    dims_of = {c.dims for c in coords}
    if len(dims_of) != 1:
        raise WriteError(
            f"expected point coordinates {', '.join(names)} on the same dims (or one dim each), found "
            + ", ".join(f"{n}{c.dims}" for n, c in zip(names, coords, strict=True))
        )
    dims = tuple(map(str, dims_of.pop()))
    if len(dims) > 1 and math.prod(ds.sizes[d] for d in dims) <= 1 << 26:  # planes and lattices: regular?
        points = np.stack([np.asarray(c.transpose(*dims).values, dtype=np.float64) for c in coords], axis=-1)
        found = _lattice(points)
        if found is not None:
            return Layout(dims, names, *found)
    return Layout(dims, names)


def _image_geometry(lay: Layout, sizes: dict[str, int]) -> dict[str, Any]:
    """ImageData's attrs: the point dims in VTK's i, j (, k) order, unit step directions completed to a
    right-handed frame where the lattice has fewer than 3 dims."""
    assert lay.origin is not None and lay.steps is not None
    steps = list(lay.steps)
    spacing = [float(np.linalg.norm(s)) for s in steps]
    frame = [s / n for s, n in zip(steps, spacing, strict=True)]
    if len(frame) == 1:
        helper = np.eye(3)[int(np.argmin(np.abs(frame[0])))]
        frame.append(np.cross(frame[0], helper) / np.linalg.norm(np.cross(frame[0], helper)))
    if len(frame) == 2:
        frame.append(np.cross(frame[0], frame[1]))
    spacing += [1.0] * (3 - len(spacing))
    extent = list(itertools.chain.from_iterable((0, sizes[d] - 1) for d in lay.dims)) + [0, 0] * (3 - len(lay.dims))
    return {
        "WholeExtent": np.asarray(extent, dtype=np.int64),
        "Origin": np.asarray(lay.origin, dtype=np.float64),
        "Spacing": np.asarray(spacing, dtype=np.float64),
        "Direction": np.stack(frame, axis=1).reshape(9).astype(np.float64),  # columns: the i, j, k steps
    }


def _components(var: xr.DataArray, ds: xr.Dataset, point_dims: tuple[str, ...]) -> list[str]:
    """Names of a variable's components (its non-point dims' labels joined, C order): ``u/x`` etc."""
    rest = [d for d in var.dims if d not in point_dims]
    labels = []
    for d in rest:
        values = ds[d].values if d in ds.coords else np.arange(var.sizes[d])
        labels.append([str(v) for v in values])
    if not rest:
        return [str(var.name)]
    sep = "/" if rest in (["component", "axis"],) else ","
    return [sep.join(p) for p in itertools.product(*labels)]


def _stored(var: xr.DataArray, dims: tuple[str, ...], image: bool) -> xr.DataArray:
    """``var`` ordered as the file stores it: ImageData's point dims reversed (VTK's i varies fastest),
    PolyData's flattened later; its other dims last."""
    rest = tuple(d for d in var.dims if d not in dims)
    return var.transpose(*(dims[::-1] if image else dims), *rest)


def _write_array(group: Any, name: str, var: xr.DataArray, shape: tuple[int, ...]) -> Any:
    """``var`` written to ``group[name]`` with ``shape`` (its points flattened or not, its components in one
    last axis), block by block along its first dim (a Dask variable is computed one block at a time)."""
    dtype = np.dtype(np.uint8) if var.dtype == bool else var.dtype
    out = group.create_dataset(name, shape=shape, dtype=dtype)
    first = var.dims[0] if var.ndim else None
    if first is None:
        out[()] = np.asarray(var.values, dtype=dtype)
        return out
    n = var.sizes[first]
    row_bytes = max(1, var.size // max(1, n)) * dtype.itemsize
    step = max(1, _BLOCK_BYTES // row_bytes)
    rows_out = shape[0] // max(1, n) if shape and n else 1  # output rows per input row (PolyData flattens)
    for start in range(0, n, step):
        block = np.asarray(var.isel({first: slice(start, start + step)}).values, dtype=dtype)
        out[start * rows_out : (start + len(block)) * rows_out] = block.reshape(-1, *shape[1:])
    return out


def _cells(group: Any, name: str, count: int) -> None:
    """A PolyData cell group: ``count`` vertices (cell n is point n), or none."""
    cells = group.create_group(name)
    cells.create_dataset("NumberOfCells", data=np.array([count], dtype=np.int64))
    cells.create_dataset("NumberOfConnectivityIds", data=np.array([count], dtype=np.int64))
    cells.create_dataset("Offsets", data=np.arange(count + 1, dtype=np.int64))
    cells.create_dataset("Connectivity", data=np.arange(count, dtype=np.int64))


def attr_value(value: Any) -> Any:
    """An attr value h5py stores: nested values as JSON text, None as an empty string."""
    if value is None:
        return ""
    if isinstance(value, dict) or (isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value)):
        return json.dumps(value, default=str)
    return value


def write(ds: xr.Dataset, target: Any, attrs: dict[str, Any] | None = None) -> None:
    """Write ``ds`` as a VTKHDF file to ``target`` (a path or a binary file object) as the module says;
    ``attrs`` are added to its own as the root group's attrs."""
    import h5py

    lay = layout(ds)
    sizes = {d: int(ds.sizes[d]) for d in lay.dims}
    count = math.prod(sizes.values())
    with h5py.File(target, "w") as f:
        for k, v in {**ds.attrs, **(attrs or {})}.items():
            f.attrs[str(k)] = attr_value(v)
        root = f.create_group("VTKHDF")
        root.attrs["Version"] = np.asarray(VERSION, dtype=np.int64)
        kind = "ImageData" if lay.image else "PolyData"
        root.attrs.create("Type", np.bytes_(kind.encode("ascii")))  # VTK reads a fixed-length ASCII string
        if lay.image:
            for k, v in _image_geometry(lay, sizes).items():
                root.attrs[k] = v
        else:
            points = xr.concat([ds[n].transpose(*lay.dims).astype(np.float64) for n in lay.coords], dim="xyz_")
            _write_array(root, "Points", points.transpose(*lay.dims, "xyz_"), (count, 3))
            root.create_dataset("NumberOfPoints", data=np.array([count], dtype=np.int64))
            _cells(root, "Vertices", count)
            for name in ("Lines", "Polygons", "Strips"):
                _cells(root, name, 0)
        point_data, field_data = root.create_group("PointData"), root.create_group("FieldData")
        for key in ds.variables:
            name, var = str(key), ds[key]
            if name in lay.coords or var.dtype.kind not in "biuf":
                continue
            if set(lay.dims) <= set(var.dims):
                stored = _stored(var, lay.dims, lay.image)
                comps = math.prod(stored.shape[len(lay.dims) :])
                if lay.image:
                    shape = tuple(sizes[d] for d in lay.dims[::-1]) + ((comps,) if var.ndim > len(lay.dims) else ())
                else:
                    shape = (count, comps) if var.ndim > len(lay.dims) else (count,)
                out = _write_array(point_data, name, stored, shape)
                out.attrs["components"] = " ".join(_components(var, ds, lay.dims))
            elif key in ds.coords:  # index coordinates of a box (i, j, k): the lattice says them
                continue
            elif not set(lay.dims) & set(var.dims):
                out = _write_array(field_data, name, var, tuple(var.shape) or (1,))
            else:
                raise WriteError(
                    f"expected variable {name} over all the point dims {lay.dims} or none of them, got {var.dims}"
                )
            if var.dtype == bool:
                out.attrs["flag_values"] = np.array([0, 1], dtype=np.uint8)
            for k in ("units", "long_name"):
                if k in var.attrs:
                    out.attrs[k] = str(var.attrs[k])


def to_vtkhdf(ds: xr.Dataset, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write ``ds`` to the VTKHDF file ``path`` (whole or not at all: :func:`vdbflow.core.atomic.atomic_file`);
    an existing file is replaced only with ``overwrite``.  Returns the path."""
    path = Path(path)
    if not overwrite and os.path.lexists(path):
        raise WriteError(f"expected no file at {path} (overwrite=True replaces it), found one")
    layout(ds)  # refused before anything is made
    with atomic_file(path, replace=overwrite) as fh:
        write(ds, fh)
    return path
