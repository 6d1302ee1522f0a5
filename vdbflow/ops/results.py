"""Sampled arrays as an xarray Dataset: the one function every path uses (eager, lazy, distributed,
series, jobs).  Names, dims and attrs come from :mod:`vdbflow.core.schema` (docs/results.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import xarray as xr

from vdbflow.core import schema, units
from vdbflow.devices import is_cupy_array
from vdbflow.errors import PointsError
from vdbflow.ops.request import SampleRequest

if TYPE_CHECKING:
    from vdbflow.core.volume import Volume

CONVENTIONS = schema.CONVENTIONS


def is_dask(arr: Any) -> bool:
    return type(arr).__module__.split(".")[0] == "dask"


def as_numpy(points: Any) -> np.ndarray:
    """``np.asarray(points)``, ragged or non-numeric input refused with a PointsError."""
    try:
        return np.asarray(points)
    except (ValueError, TypeError) as err:
        raise PointsError(f"expected points as an (N, 3) numeric array, got {type(points).__name__}: {err}") from None


def points_in(points: Any, dims: Any) -> tuple[Any, tuple[int, ...], tuple[str, ...], dict[str, Any]]:
    """Points of shape (..., 3) as given (NumPy, CuPy or Dask), the shape of their leading dims, the
    names of those dims and the coordinates a DataArray of points brings along."""
    coords: dict[str, Any] = {}
    if isinstance(points, (tuple, list)) and len(points) == 3 and all(isinstance(p, xr.DataArray) for p in points):
        points = _stacked(points)  # xr.broadcast(ds.x, ds.y, ds.z): three DataArrays of one shape
    if isinstance(points, xr.DataArray):
        lead_dims = points.dims[:-1]
        coords = {
            str(name): c.variable
            for name, c in points.coords.items()
            if name not in points.dims[-1:] and set(c.dims) <= set(lead_dims)
        }
        dims = lead_dims if dims is None else dims
        points = points.data
    if not (is_dask(points) or is_cupy_array(points)):
        points = as_numpy(points)
    shape = tuple(points.shape)
    if len(shape) < 2 or shape[-1] != 3:
        raise PointsError(f"expected points of shape (N, 3) or (..., 3), got {shape}")
    if any(not isinstance(n, (int, np.integer)) or n != n for n in shape):
        raise PointsError(f"expected Dask points with known chunk sizes (call .compute_chunk_sizes()), got {shape}")
    lead = shape[:-1]
    if dims is None:
        dims = (schema.POINT,) if len(lead) == 1 else tuple(f"point_{d}" for d in range(len(lead)))
    else:
        dims = (str(dims),) if isinstance(dims, str) else tuple(str(d) for d in dims)
    if len(dims) != len(lead) or len(set(dims)) != len(dims):
        raise PointsError(f"expected {len(lead)} distinct dim names for points of shape {shape}, got {list(dims)}")
    grid = {d for d in GRID_DIMS if d in coords and coords[d].dims == (d,)}  # a grid's own x(x), i(x), ...
    clash = sorted(set(dims) & set(schema.RESERVED_DIMS) - grid)
    if clash:
        raise PointsError(
            f"expected point dims named apart from the result's own names {list(schema.RESERVED_DIMS)}, "
            f"got {clash} (e.g. dims=('point_z', 'point_y', 'point_x'))"
        )
    return points, lead, dims, coords


GRID_DIMS = ("x", "y", "z", "i", "j", "k")  # point dims a grid's points may keep, with its coordinate on each


def _stacked(parts: Any) -> xr.DataArray:
    """Three DataArrays of coordinates (x, y, z: ``xr.broadcast(ds.x, ds.y, ds.z)``) as one DataArray of points
    with a last dim ``xyz``."""
    first = parts[0]
    if any(p.dims != first.dims or p.shape != first.shape for p in parts):
        raise PointsError(
            "expected three DataArrays of coordinates on the same dims (xr.broadcast(ds.x, ds.y, ds.z)), got dims "
            + ", ".join(str(p.dims) for p in parts)
        )
    return xr.concat([p.drop_attrs(deep=False) for p in parts], dim="xyz", coords="minimal", join="exact").transpose(
        *first.dims, "xyz"
    )


def _grid_coordinate(dims: tuple[str, ...], coord: Any, values: Any, label: str) -> Any:
    """The point coordinate ``label`` of a grid's points whose dim ``label`` carries the grid's own 1-D
    coordinate ``coord``: that coordinate, where the points are its values broadcast (a PointsError else)."""
    if not is_dask(values):
        along = np.asarray(coord.values, dtype=np.float64).reshape([-1 if d == label else 1 for d in dims])
        if not np.array_equal(np.broadcast_to(along, values.shape), np.asarray(values, dtype=np.float64)):
            raise PointsError(
                f"expected the points' {label} to be their dim {label}'s coordinate broadcast (points on the grid "
                f"of xr.broadcast(ds.x, ds.y, ds.z)), got other values: name the dims apart (dims=...)"
            )
    return coord


def result_dataset(
    vol: Volume,
    request: SampleRequest,
    points: Any,
    arrays: dict[str, Any],
    *,
    dims: tuple[str, ...] | None = None,
    point_coords: dict[str, Any] | None = None,
) -> xr.Dataset:
    """The result Dataset of a request's ``arrays`` (values (*lead[, C]), Jacobians (*lead[, C], 3),
    Hessians (*lead[, C], 3, 3)) at ``points`` (*lead, 3), with CF attrs (docs/results.md).  ``vol``
    gives the names, units and transform (a Volume, or a distributed volume's or series' template);
    ``dims`` names the leading dims (default ``("point",)`` for (N, 3) points)."""
    first = next(iter(arrays.values()))
    lead = tuple(first.shape[:1] if dims is None else first.shape[: len(dims)])
    dims = (schema.POINT,) if dims is None else tuple(dims)
    coords = _point_coords(vol, request.space, _host_points(points), dims, lead, point_coords)
    data_vars = _value_vars(vol, request, arrays, dims)
    data_vars.update(_derivative_vars(vol, request, arrays, dims, coords))
    clash = sorted(set(data_vars) & (set(dims) | set(coords)))
    if clash:
        raise PointsError(f"expected point dims and coordinates named apart from the result's variables, got {clash}")
    return xr.Dataset(data_vars, coords=coords, attrs=_dataset_attrs(vol, request, dims))


def _host_points(points: Any) -> Any:
    """``points`` where coordinates can be taken from them: CuPy copied to the host, Dask kept lazy
    (coordinates are computed with the values, never gathered here), anything else as NumPy."""
    if is_cupy_array(points):
        return points.get()
    if is_dask(points):
        return points
    return np.asarray(points)


def _point_coords(
    vol: Volume,
    space: str,
    pts: Any,
    dims: tuple[str, ...],
    lead: tuple[int, ...],
    point_coords: dict[str, Any] | None,
) -> dict[str, Any]:
    """The coordinates of the points' dims: the point index, the component labels and each point's
    x, y, z (``pts`` (*lead, 3)), beside the coordinates the points brought along (``point_coords``)."""
    coords: dict[str, Any] = dict(point_coords or {})
    if dims == (schema.POINT,) and schema.POINT not in coords:
        # a RangeIndex: 0 .. N-1 without an array of N integers (the same int64 values wherever it is read)
        coords[schema.POINT] = (schema.POINT, pd.RangeIndex(lead[0]), {"long_name": "point index"})
    if vol.components > 1:
        coords[schema.COMPONENT] = (
            schema.COMPONENT,
            schema.labels(vol.component_names),
            {"long_name": f"component of {vol.name}"},
        )
    length = schema.length_of(vol.length_units, space)
    if pts.ndim == len(dims) + 1 and tuple(pts.shape[:-1]) == lead:
        for a, label in enumerate(schema.AXIS_LABELS[space]):
            attrs: dict[str, Any] = {"long_name": f"{label} coordinate of the point ({space} space)"}
            if length:
                attrs["units"] = length
            if label in dims and label in coords:  # a grid's points keep its own 1-D coordinate on that dim
                coords[label] = _grid_coordinate(dims, coords[label], pts[..., a], label)
                continue
            # float64 points: views of them, as xarray keeps the arrays it is given (no copy of N points)
            coords[label] = (dims, pts[..., a].astype(np.float64, copy=False), attrs)
    return coords


def _value_dims(vol: Volume, dims: tuple[str, ...]) -> tuple[str, ...]:
    """The dims of a value: the points' dims, then ``component`` for a grid of several components."""
    return dims if vol.components == 1 else dims + (schema.COMPONENT,)


def _common_attrs(request: SampleRequest) -> dict[str, Any]:
    return {"sampling_mode": request.mode, "point_space": request.space}


def _value_vars(vol: Volume, request: SampleRequest, arrays: dict[str, Any], dims: tuple[str, ...]) -> dict[str, Any]:
    """The sampled values' variable (none where the request asked for derivatives only)."""
    if "value" not in arrays:
        return {}
    value_units = units.normalize(vol.units)
    value_attrs: dict[str, Any] = {
        "long_name": vol.name,
        **({"units": value_units} if value_units else {}),
        **_common_attrs(request),
    }
    vname = schema.value_name(vol.name)
    if vname != vol.name:  # a grid named like one of the result's own names (docs/results.md)
        value_attrs["grid_name"] = vol.name
    return {vname: (_value_dims(vol, dims), arrays["value"], value_attrs)}


def _derivative_vars(
    vol: Volume, request: SampleRequest, arrays: dict[str, Any], dims: tuple[str, ...], coords: dict[str, Any]
) -> dict[str, Any]:
    """The Jacobian, the derived quantities and the Hessian among ``arrays`` as variables; the axis
    coordinates they need are added to ``coords``."""
    vdims = _value_dims(vol, dims)
    common = _common_attrs(request)
    value_units = units.normalize(vol.units)
    vname = schema.value_name(vol.name)
    data_vars: dict[str, Any] = {}
    jspace = request.jacobian_space
    assert jspace is not None  # resolved when the request was made
    jattrs = schema.jacobian_attrs(vol.name, value_units, schema.length_of(vol.length_units, jspace), vol.components)
    if "jacobian" in arrays or "vorticity" in arrays:
        coords[schema.AXIS] = (
            schema.AXIS,
            schema.labels(schema.AXIS_LABELS[jspace]),
            {"long_name": f"axis of the derivative ({jspace} space)"},
        )
    if "jacobian" in arrays:
        data_vars[schema.jacobian_name(vol.name)] = (
            vdims + (schema.AXIS,),
            arrays["jacobian"],
            {**jattrs, "jacobian_space": jspace, **common},
        )
    for quantity in request.derived:
        qdims = dims + (schema.AXIS,) if arrays[quantity].ndim > len(dims) else dims
        qattrs = schema.derived_attrs(quantity, jattrs.get("units"), value_units)
        data_vars[quantity if quantity != vname else f"{vol.name}_{quantity}"] = (
            qdims,
            arrays[quantity],
            {**qattrs, "jacobian_space": jspace, **common},
        )
    if "hessian" in arrays:
        data_vars[schema.hessian_name(vol.name)] = _hessian_var(vol, request, arrays["hessian"], vdims, coords)
    return data_vars


def _hessian_var(
    vol: Volume, request: SampleRequest, hessian: Any, vdims: tuple[str, ...], coords: dict[str, Any]
) -> tuple[tuple[str, ...], Any, dict[str, Any]]:
    """The Hessian's variable (dims, data, attrs); its own axis coordinates are added to ``coords``."""
    hspace = request.hessian_space
    assert hspace is not None  # resolved when the request was made
    hlength = getattr(vol, "length_units", None) if hspace == "world" else "voxel"
    hattrs = {
        **schema.hessian_attrs(vol.name, getattr(vol, "units", None), hlength, vol.components),
        "hessian_space": hspace,
        "sampling_mode": request.mode,
    }
    haxes = schema.HESSIAN_AXES if hspace == request.jacobian_space else schema.OWN_HESSIAN_AXES
    labels = list(schema.AXIS_LABELS[hspace])
    coords.update({axis: labels for axis in haxes if axis != schema.AXIS})
    return (vdims + haxes, hessian, hattrs)


def _dataset_attrs(vol: Volume, request: SampleRequest, dims: tuple[str, ...]) -> dict[str, Any]:
    """The result's global attrs: conventions, the grid's value type, layout and transform, how it was
    sampled and its periods."""
    attrs = {
        "Conventions": CONVENTIONS,
        **({"featureType": "point"} if len(dims) == 1 else {}),
        "value_type": vol.value_type.name,
        "layout": "index" if vol.index_layout else "per-leaf",
        "index_to_world": np.asarray(vol.index_to_world, np.float64).ravel(),
        "sampling_mode": request.mode,
        "point_space": request.space,
    }
    periodic = getattr(vol, "periodic", None)
    if periodic is not None:  # index-space periods: voxels lo .. lo + size - 1 wrap (docs/periodic.md)
        attrs.update(
            periodic_axes=periodic.axes, period_lo=np.array(periodic.lo), period_voxels=np.array(periodic.size)
        )
    return attrs
