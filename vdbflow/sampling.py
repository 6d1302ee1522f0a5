"""Sampling entry points: array level (:func:`sample_grad_arrays`) and xarray level
(:func:`sample`, :func:`sample_grad`).  The math runs in kernels/ through a backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from .backends import is_cupy_array, resolve_device
from .errors import PointsError, SamplingError, ShapeError
from .volume import Volume

# SampleMode (sample.h) and HigherScheme (schemes.h) codes
MODES = {"closest": 0, "linear": 1, "lag4": 2, "lag6": 3, "lag8": 4, "fd4": 5, "fd6": 6, "fd4lag4": 7,
         "catmull_rom": 8, "bspline3": 9, "fd2": 10}
# Reach of each scheme's stencil in voxels on the positive side of the base cell (the negative side
# reaches one voxel less); the distributed halo must be at least this wide.
STENCIL_RADIUS = {"closest": 1, "linear": 1, "lag4": 2, "lag6": 3, "lag8": 4, "fd4": 3, "fd6": 4, "fd4lag4": 4,
                  "catmull_rom": 2, "bspline3": 2, "fd2": 2}
POINT_ORDERS = ("auto", "coherent", "scattered")
SPACES = ("index", "world")
AXIS_LABELS = {"index": ("i", "j", "k"), "world": ("x", "y", "z")}


def _check_choice(value: str, choices: Any, what: str) -> str:
    if value not in choices:
        raise SamplingError(f"expected {what} to be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _backend(device: str) -> Any:
    if device == "cuda":
        from .backends import cuda

        return cuda
    from .backends import cpu

    return cpu


def _prepare_points(vol: Volume, points: Any, device: str, space: str = "index") -> Any:
    """(N, 3) C-contiguous float32/float64 points on the device's array module.  Integer data has no
    NaN to return, so its points must map to finite index coordinates (checked after the world map)."""
    on_gpu = is_cupy_array(points)
    if device == "cuda" and not on_gpu:
        from .backends.cuda import cupy_module

        points = cupy_module().asarray(np.asarray(points))
        on_gpu = True
    if device == "cpu" and on_gpu:
        points = points.get()
        on_gpu = False
    if on_gpu:
        import cupy as xp
    else:
        xp = np
        try:
            points = np.asarray(points)
        except (ValueError, TypeError) as err:
            raise PointsError(
                f"expected points as an (N, 3) numeric array, got {type(points).__name__}: {err}"
            ) from None
    if points.ndim != 2 or points.shape[1] != 3:
        raise PointsError(f"expected points of shape (N, 3), got {tuple(points.shape)}")
    kind = points.dtype.kind
    if kind in "iu":
        points = points.astype(xp.float64)
    elif kind == "f" and points.dtype.itemsize in (4, 8) and not points.dtype.isnative:
        points = points.astype(points.dtype.newbyteorder("="))  # big-endian: the same numbers, native order
    elif points.dtype == np.float16:
        points = points.astype(xp.float32)  # exact
    elif points.dtype not in (np.float32, np.float64):
        raise PointsError(f"expected float16/32/64 or integer points, got dtype {points.dtype}")
    points = xp.ascontiguousarray(points)
    if not vol.value_type.is_float and points.size:
        bad = int((~xp.isfinite(points).all(axis=1)).sum())
        if bad:
            raise PointsError(
                f"expected finite points for {vol.value_type.name} data (integers have no NaN), "
                f"got {bad} points with NaN or inf coordinates"
            )
        if space == "world":
            # the kernels' own order: (p - t), then the rows of the inverse; 1e300 leaves a margin for
            # rounding, far beyond any index a tree can hold (2^31)
            inverse, origin = vol.transform.world_to_index[:3, :3], vol.transform.index_to_world[:3, 3]
            with np.errstate(over="ignore", invalid="ignore"):
                u = (points.astype(xp.float64) - xp.asarray(origin)) @ xp.asarray(inverse).T
            bad = int((~(xp.abs(u) < 1e300).all(axis=1)).sum())
            if bad:
                raise PointsError(
                    f"expected points whose index coordinates are finite for {vol.value_type.name} data "
                    f"(integers have no NaN), got {bad} finite world points that map outside the float range "
                    f"(the world-to-index map scales by up to {np.abs(inverse).max():.3g})"
                )
    return points


def _check_out(arr: Any, expected: tuple[int, ...], dtype: np.dtype, on_gpu: bool, what: str,
               transposed: tuple[int, ...] | None = None) -> Any:
    if arr is None:
        return None
    if is_cupy_array(arr) != on_gpu:
        where = "CuPy (GPU)" if on_gpu else "NumPy (CPU)"
        raise ShapeError(f"expected {what} as a {where} array, got {type(arr).__module__}.{type(arr).__name__}")
    shape = tuple(arr.shape)
    if shape != expected:
        hint = " [component, axis]" if what == "jacobian" else ""
        if transposed is not None and shape == transposed:
            raise ShapeError(f"expected {what} {expected}{hint}, got {shape} (transposed: axis before component)")
        raise ShapeError(f"expected {what} {expected}{hint}, got {shape}")
    if arr.dtype != dtype:
        raise ShapeError(f"expected {what} of dtype {dtype}, got {arr.dtype}")
    if not arr.flags.c_contiguous or (not on_gpu and not arr.flags.writeable):
        raise ShapeError(f"expected {what} to be a writeable C-contiguous array")
    return arr


def sample_grad_arrays(
    vol: Volume,
    uvw: Any,
    mode: str = "linear",
    out: tuple[Any, Any] | None = None,
    *,
    space: str = "index",
    jacobian_space: str | None = None,
    device: str = "cpu",
    jacobian: bool = True,
    point_order: str = "auto",
) -> tuple[Any, Any]:
    """Values and Jacobians at points, as raw arrays.

    Parameters
    ----------
    uvw : (N, 3) float32/float64 (integers are taken as float64), NumPy or CuPy
        Point coordinates, in index space (voxel centres at integers) unless ``space="world"``.
    mode : ``"linear"`` (trilinear, Warp-exact), ``"closest"``, or a higher-order scheme: ``"lag4"``,
        ``"lag6"``, ``"lag8"`` (Lagrange), ``"fd4"``, ``"fd6"`` (centred differences at the nodes,
        interpolated linearly), ``"fd4lag4"``, ``"catmull_rom"``, ``"bspline3"`` (see kernels/vdbflow/schemes.h).
    out : optional ``(values, jacobian)`` buffers; either may be None.
    jacobian_space : ``"index"`` (columns i, j, k) or ``"world"`` (``J_index . M^-1``); default ``space``.
    device : ``"cpu"``, ``"cuda"`` (CuPy in and out) or ``"auto"`` (follows the points' array type).
    jacobian : compute the Jacobian (False returns ``(values, None)``).
    point_order : ``"auto"`` (measured), ``"coherent"`` or ``"scattered"``: a hint for the CPU loop
        (scattered points are prefetched ahead); results do not depend on it.

    Returns
    -------
    values : (N,) for scalar data or (N, C), the volume's dtype
    jacobian : (N, 3) or (N, C, 3) with ``J[n, c, a] = d value[c] / d axis[a]``; float32 for float
        data, float64 for double and integer data (integers: closest only, Jacobian 0).
    """
    _check_choice(mode, MODES, "mode")
    _check_choice(space, SPACES, "space")
    _check_choice(point_order, POINT_ORDERS, "point_order")
    jacobian_space = space if jacobian_space is None else _check_choice(jacobian_space, SPACES, "jacobian_space")
    device = resolve_device(device, uvw)
    vt = vol.value_type
    if mode != "closest" and not vt.is_float:
        raise SamplingError(f"expected mode='closest' for {vt.name} data (integers are not interpolated), "
                            f"got mode={mode!r}")
    points = _prepare_points(vol, uvw, device, space)
    on_gpu = device == "cuda"
    if on_gpu:
        import cupy as xp
    else:
        xp = np
    N, C = points.shape[0], vol.components
    vshape = (N,) if C == 1 else (N, C)
    jshape = (N, 3) if C == 1 else (N, C, 3)
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != 2):
        raise ShapeError(f"expected out=(values, jacobian), a pair of arrays or None, got {type(out).__name__}"
                         + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    out_values, out_jac = (None, None) if out is None else out
    values = _check_out(out_values, vshape, vt.dtype, on_gpu, "values")
    jac = _check_out(out_jac, jshape, vt.jacobian_dtype, on_gpu, "jacobian",
                     transposed=None if C == 1 else (N, 3, C)) if jacobian else None
    if values is not None and jac is not None and xp.may_share_memory(values, jac):
        raise ShapeError("expected separate values and jacobian buffers, got two that overlap in memory")
    for buffer, what in ((values, "values"), (jac, "jacobian")):
        if buffer is not None and xp.may_share_memory(buffer, points):
            raise ShapeError(f"expected a {what} buffer apart from the points, got one that overlaps them in memory "
                             "(the kernels would overwrite points before reading them)")
    if values is None:
        values = xp.empty(vshape, vt.dtype)
    if jacobian and jac is None:
        jac = xp.empty(jshape, vt.jacobian_dtype)
    if N == 0:
        return values, jac
    kernel_jac = jac if (jacobian and vt.is_float) else None
    if jacobian and not vt.is_float:
        jac[...] = 0
    _backend(device).sample(vol, points, MODES[mode], vol.transform.kernel_parameters(), space == "world",
                            jacobian_space == "world", values, kernel_jac, point_order)
    return values, jac


def _dataset(vol: Volume, points: Any, values: Any, jac: Any, mode: str, space: str,
             jacobian_space: str | None) -> xr.Dataset:
    C = vol.components
    if is_cupy_array(points):
        pts = points.get()
    elif type(points).__module__.split(".")[0] == "dask":
        pts = points  # stays lazy: coordinates are computed with the values, never gathered here
    else:
        pts = np.asarray(points)
    N = len(values)
    vdims = ("point",) if C == 1 else ("point", "component")
    coords: dict[str, Any] = {"point": np.arange(N)}
    if C > 1:
        coords["component"] = list(vol.component_names)
    if pts.ndim == 2 and pts.shape[0] == N:
        length = getattr(vol, "length_units", None) if space == "world" else "voxel"
        for a, label in enumerate(AXIS_LABELS[space]):
            coords[label] = ("point", pts[:, a].astype(np.float64),
                             {"long_name": f"point {label} ({space} space)", **({"units": length} if length else {})})
    common = {"sampling_mode": mode, "point_space": space}
    value_attrs = {"long_name": vol.name, **common}
    units = getattr(vol, "units", None)
    if units:
        value_attrs["units"] = units
    data_vars = {vol.name: (vdims, values, value_attrs)}
    if jac is not None:
        coords["axis"] = list(AXIS_LABELS[jacobian_space])
        jname = f"{vol.name}_jacobian"
        comp = "[component]" if C > 1 else ""
        data_vars[jname] = (vdims + ("axis",), jac, {
            "long_name": f"Jacobian of {vol.name}",
            "convention": f"{jname}[{'component, ' if C > 1 else ''}axis] = d {vol.name}{comp} / d axis",
            "jacobian_space": jacobian_space,
            **common,
        })
        length = getattr(vol, "length_units", None) if jacobian_space == "world" else "voxel"
        if units and length:
            data_vars[jname][2]["units"] = f"{units}/{length}"
    attrs = {
        "value_type": vol.value_type.name,
        "layout": "index" if vol.index_layout else "per-leaf",
        "index_to_world": vol.index_to_world.ravel().tolist(),
        "sampling_mode": mode,
        "point_space": space,
    }
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def sample(vol: Volume, points: Any, mode: str = "linear", space: str = "world", *,
           device: str = "cpu") -> xr.Dataset:
    """Values at ``points`` (N, 3) as a Dataset: variable ``vol.name`` with dims ``(point,)`` or
    ``(point, component)``, point positions as coordinates."""
    values, _ = sample_grad_arrays(vol, points, mode, space=space, device=device, jacobian=False)
    return _dataset(vol, points, values, None, mode, space, None)


def sample_grad(vol: Volume, points: Any, mode: str = "linear", space: str = "world",
                jacobian_space: str | None = None, *, device: str = "cpu") -> xr.Dataset:
    """Values and Jacobians at ``points`` (N, 3) as a Dataset.

    Variables ``vol.name`` (dims ``(point,)`` / ``(point, component)``) and ``vol.name + "_jacobian"``
    (dims ``(point, axis)`` / ``(point, component, axis)``), ``jacobian[c, a] = d value[c] / d axis[a]``;
    ``axis`` is labelled ``i j k`` in index space, ``x y z`` in world space (``jacobian_space``,
    default ``space``).
    """
    jacobian_space = space if jacobian_space is None else jacobian_space
    values, jac = sample_grad_arrays(vol, points, mode, space=space, jacobian_space=jacobian_space, device=device)
    return _dataset(vol, points, values, jac, mode, space, jacobian_space)
