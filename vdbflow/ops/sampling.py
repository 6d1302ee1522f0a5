"""Sampling entry points: array level (:func:`sample_grad_arrays`) and xarray level
(:func:`sample`, :func:`sample_grad`).  The math runs in kernels/ through a backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core import kernel
from vdbflow.core.volume import Volume
from vdbflow.devices import is_cupy_array, resolve_device
from vdbflow.errors import PointsError, SamplingError, ShapeError

# Facts of the kernels (vdbflow.core.kernel, read from kernels/vdbflow/schemes.h): the mode codes, and
# each mode's reach in voxels on the positive side of the base cell; importable from here as well.
MODES: dict[str, int] = kernel.MODES
STENCIL_RADIUS: dict[str, int] = kernel.STENCIL_RADIUS
POINT_ORDERS = ("auto", "coherent", "scattered")
SPACES = ("index", "world")
AXIS_LABELS = {"index": ("i", "j", "k"), "world": ("x", "y", "z")}


def check_choice(value: str, choices: Any, what: str) -> str:
    if value not in choices:
        raise SamplingError(f"expected {what} to be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _backend(device: str) -> Any:
    if device == "cuda":
        from vdbflow.devices import cuda

        return cuda
    from vdbflow.devices import cpu

    return cpu


def _as_numpy(points: Any) -> np.ndarray:
    """``np.asarray(points)``, ragged or non-numeric input refused with a PointsError."""
    try:
        return np.asarray(points)
    except (ValueError, TypeError) as err:
        raise PointsError(f"expected points as an (N, 3) numeric array, got {type(points).__name__}: {err}") from None


def prepare_points(vol: Volume, points: Any, device: str, space: str = "index") -> Any:
    """(N, 3) C-contiguous float32/float64 points on the device's array module.  Integer data has no
    NaN to return, so its points must map to finite index coordinates (checked after the world map)."""
    on_gpu = is_cupy_array(points)
    if device == "cuda" and not on_gpu:
        from vdbflow.devices.cuda import cupy_module

        points = cupy_module().asarray(np.asarray(points))
        on_gpu = True
    if device == "cpu" and on_gpu:
        points = points.get()
        on_gpu = False
    if on_gpu:
        import cupy as xp
    else:
        xp = np
        points = _as_numpy(points)
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


def check_out(
    arr: Any,
    expected: tuple[int, ...],
    dtype: np.dtype,
    on_gpu: bool,
    what: str,
    transposed: tuple[int, ...] | None = None,
) -> Any:
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
    vol : Volume
        The volume to sample.
    uvw : (N, 3) float32/float64 (integers are taken as float64), NumPy or CuPy
        Point coordinates, in index space (voxel centres at integers) unless ``space="world"``.
    space : ``"index"`` (the default here) or ``"world"`` (the volume's length units): the space of ``uvw``.
    mode : ``"linear"`` (trilinear, Warp-exact), ``"closest"``, or a higher-order scheme: ``"lag4"``,
        ``"lag6"``, ``"lag8"`` (Lagrange), ``"fd4"``, ``"fd6"`` (centred differences at the nodes,
        interpolated linearly), ``"fd2"``, ``"fd8"``, ``"fd4lag4"``, ``"catmull_rom"`` (JHTDB's M1Q4),
        ``"bspline3"``, ``"m2q8"`` (JHTDB's quintic M2Q8 spline) (see kernels/vdbflow/schemes.h).
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

    Raises
    ------
    PointsError : points of the wrong shape or dtype, or non-finite points for integer data.
    SamplingError : an unknown mode, space, jacobian_space or point_order; a mode other than closest
        for integer data.
    ShapeError : ``out`` buffers of the wrong shape, dtype, array type or layout, or overlapping
        each other or the points.
    DeviceError : an unknown device, or ``"cuda"`` without CuPy or a GPU.
    """
    check_choice(mode, MODES, "mode")
    check_choice(space, SPACES, "space")
    check_choice(point_order, POINT_ORDERS, "point_order")
    jacobian_space = space if jacobian_space is None else check_choice(jacobian_space, SPACES, "jacobian_space")
    device = resolve_device(device, uvw)
    vt = vol.value_type
    if mode != "closest" and not vt.is_float:
        raise SamplingError(
            f"expected mode='closest' for {vt.name} data (integers are not interpolated), got mode={mode!r}"
        )
    points = prepare_points(vol, uvw, device, space)
    on_gpu = device == "cuda"
    if on_gpu:
        import cupy as xp
    else:
        xp = np
    N, C = points.shape[0], vol.components
    vshape = (N,) if C == 1 else (N, C)
    jshape = (N, 3) if C == 1 else (N, C, 3)
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != 2):
        raise ShapeError(
            f"expected out=(values, jacobian), a pair of arrays or None, got {type(out).__name__}"
            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        )
    out_values, out_jac = (None, None) if out is None else out
    values = check_out(out_values, vshape, vt.dtype, on_gpu, "values")
    jac = (
        check_out(out_jac, jshape, vt.jacobian_dtype, on_gpu, "jacobian", transposed=None if C == 1 else (N, 3, C))
        if jacobian
        else None
    )
    if values is not None and jac is not None and xp.may_share_memory(values, jac):
        raise ShapeError("expected separate values and jacobian buffers, got two that overlap in memory")
    for buffer, what in ((values, "values"), (jac, "jacobian")):
        if buffer is not None and xp.may_share_memory(buffer, points):
            raise ShapeError(
                f"expected a {what} buffer apart from the points, got one that overlaps them in memory "
                "(the kernels would overwrite points before reading them)"
            )
    if values is None:
        values = xp.empty(vshape, vt.dtype)
    if jacobian and jac is None:
        jac = xp.empty(jshape, vt.jacobian_dtype)
    if N == 0:
        return values, jac
    kernel_jac = jac if (jacobian and vt.is_float) else None
    if jacobian and not vt.is_float:
        assert jac is not None  # made above
        jac[...] = 0
    _backend(device).sample(
        vol.kernel_arrays(),
        points,
        MODES[mode],
        space == "world",
        jacobian_space == "world",
        values,
        kernel_jac,
        point_order,
    )
    return values, jac


CONVENTIONS = "CF-1.10"
_RESERVED_DIMS = ("component", "axis", "x", "y", "z", "i", "j", "k")


def is_dask(arr: Any) -> bool:
    return type(arr).__module__.split(".")[0] == "dask"


def points_in(points: Any, dims: Any) -> tuple[Any, tuple[int, ...], tuple[str, ...], dict[str, Any]]:
    """Points of shape (..., 3) as given (NumPy, CuPy or Dask), the shape of their leading dims, the
    names of those dims and the coordinates a DataArray of points brings along."""
    coords: dict[str, Any] = {}
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
        points = _as_numpy(points)
    shape = tuple(points.shape)
    if len(shape) < 2 or shape[-1] != 3:
        raise PointsError(f"expected points of shape (N, 3) or (..., 3), got {shape}")
    if any(not isinstance(n, (int, np.integer)) or n != n for n in shape):
        raise PointsError(f"expected Dask points with known chunk sizes (call .compute_chunk_sizes()), got {shape}")
    lead = shape[:-1]
    if dims is None:
        dims = ("point",) if len(lead) == 1 else tuple(f"point_{d}" for d in range(len(lead)))
    else:
        dims = (str(dims),) if isinstance(dims, str) else tuple(str(d) for d in dims)
    if len(dims) != len(lead) or len(set(dims)) != len(dims):
        raise PointsError(f"expected {len(lead)} distinct dim names for points of shape {shape}, got {list(dims)}")
    clash = sorted(set(dims) & set(_RESERVED_DIMS))
    if clash:
        raise PointsError(
            f"expected point dims named apart from the result's own names {list(_RESERVED_DIMS)}, "
            f"got {clash} (e.g. dims=('point_z', 'point_y', 'point_x'))"
        )
    return points, lead, dims, coords


def _labels(names: Any) -> np.ndarray:
    """String labels as variable-length strings (object dtype): a type Zarr v3 specifies, unlike
    fixed-width unicode."""
    return np.array([str(n) for n in names], dtype=object)


def build_dataset(
    vol: Volume,
    points: Any,
    values: Any,
    jac: Any,
    mode: str,
    space: str,
    jacobian_space: str | None,
    *,
    dims: tuple[str, ...] | None = None,
    point_coords: dict[str, Any] | None = None,
) -> xr.Dataset:
    """The result Dataset of ``values`` (*lead[, C]) and ``jac`` (*lead[, C], 3) at ``points``
    (*lead, 3), with CF attrs (docs/results.md).  ``dims`` names the leading dims (default
    ``("point",)`` for (N, 3) points)."""
    from vdbflow.core import units as _u

    C = vol.components
    if is_cupy_array(points):
        pts = points.get()
    elif is_dask(points):
        pts = points  # stays lazy: coordinates are computed with the values, never gathered here
    else:
        pts = np.asarray(points)
    lead = tuple(values.shape[:1] if dims is None else values.shape[: len(dims)])
    dims = ("point",) if dims is None else tuple(dims)
    vdims = dims if C == 1 else dims + ("component",)
    coords: dict[str, Any] = dict(point_coords or {})
    if dims == ("point",) and "point" not in coords:
        coords["point"] = ("point", np.arange(lead[0]), {"long_name": "point index"})
    if C > 1:
        coords["component"] = ("component", _labels(vol.component_names), {"long_name": f"component of {vol.name}"})
    length = _u.normalize(vol.length_units) if space == "world" else "voxel"
    if pts.ndim == len(dims) + 1 and tuple(pts.shape[:-1]) == lead:
        for a, label in enumerate(AXIS_LABELS[space]):
            attrs: dict[str, Any] = {"long_name": f"{label} coordinate of the point ({space} space)"}
            if length:
                attrs["units"] = length
            coords[label] = (dims, pts[..., a].astype(np.float64), attrs)
    common = {"sampling_mode": mode, "point_space": space}
    units = _u.normalize(vol.units)
    value_attrs: dict[str, Any] = {"long_name": vol.name, **({"units": units} if units else {}), **common}
    data_vars: dict[str, Any] = {vol.name: (vdims, values, value_attrs)}
    if jac is not None:
        assert jacobian_space is not None  # given with every Jacobian
        coords["axis"] = (
            "axis",
            _labels(AXIS_LABELS[jacobian_space]),
            {"long_name": f"axis of the derivative ({jacobian_space} space)"},
        )
        jname = f"{vol.name}_jacobian"
        comp = "[component]" if C > 1 else ""
        jlength = _u.normalize(vol.length_units) if jacobian_space == "world" else "voxel"
        junits = _u.divide(units, jlength)
        data_vars[jname] = (
            vdims + ("axis",),
            jac,
            {
                "long_name": f"Jacobian of {vol.name}",
                **({"units": junits} if junits else {}),
                "convention": f"{jname}[{'component, ' if C > 1 else ''}axis] = d {vol.name}{comp} / d axis",
                "jacobian_space": jacobian_space,
                **common,
            },
        )
    attrs = {
        "Conventions": CONVENTIONS,
        **({"featureType": "point"} if len(dims) == 1 else {}),
        "value_type": vol.value_type.name,
        "layout": "index" if vol.index_layout else "per-leaf",
        "index_to_world": np.asarray(vol.index_to_world, np.float64).ravel(),
        "sampling_mode": mode,
        "point_space": space,
    }
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def _sample_block(
    block: np.ndarray, vol: Volume, mode: str, space: str, jacobian_space: str, device: str, jacobian: bool
) -> tuple[Any, Any]:
    """Values and Jacobians of one block of points (..., 3), shaped like the block."""
    lead = block.shape[:-1]
    values, jac = sample_grad_arrays(
        vol, block.reshape(-1, 3), mode, space=space, jacobian_space=jacobian_space, device=device, jacobian=jacobian
    )
    return values.reshape(lead + values.shape[1:]), None if jac is None else jac.reshape(lead + jac.shape[1:])


def _pick(pair: tuple[Any, Any], which: int) -> Any:
    return pair[which]


def _sample_lazy(
    vol: Volume, points: Any, mode: str, space: str, jacobian_space: str, device: str, jacobian: bool
) -> tuple[Any, Any]:
    """Dask arrays of values (*lead[, C]) and Jacobians (*lead[, C], 3): one task per block of the
    points (chunked along the leading dims), nothing computed here."""
    import dask
    import dask.array as da

    check_choice(mode, MODES, "mode")
    check_choice(space, SPACES, "space")
    check_choice(jacobian_space, SPACES, "jacobian_space")
    vt = vol.value_type
    if mode != "closest" and not vt.is_float:
        raise SamplingError(
            f"expected mode='closest' for {vt.name} data (integers are not interpolated), got mode={mode!r}"
        )
    if points.dtype.kind not in "iuf":
        raise PointsError(f"expected float16/32/64 or integer points, got dtype {points.dtype}")
    pts = points.rechunk({points.ndim - 1: 3})
    lead = pts.ndim - 1
    meta = np.empty((0,) * lead, object)
    shared = dask.delayed(vol, name=f"vdbflow-volume-{id(vol):x}-{dask.base.tokenize(vol.name, vol.leaf_count)}")
    both = da.map_blocks(
        _sample_block,
        pts,
        shared,
        mode,
        space,
        jacobian_space,
        device,
        jacobian,
        drop_axis=lead,
        meta=meta,
        token="vdbflow-sample-local",
    )
    C = vol.components
    vextra = () if C == 1 else ((C,),)
    values = da.map_blocks(
        _pick,
        both,
        0,
        dtype=vt.dtype,
        chunks=both.chunks + vextra,
        new_axis=list(range(lead, lead + len(vextra))) or None,
        meta=np.empty((0,) * (lead + len(vextra)), vt.dtype),
        token="vdbflow-values-local",
    )
    jac = None
    if jacobian:
        jextra = vextra + ((3,),)
        jac = da.map_blocks(
            _pick,
            both,
            1,
            dtype=vt.jacobian_dtype,
            chunks=both.chunks + jextra,
            new_axis=list(range(lead, lead + len(jextra))),
            meta=np.empty((0,) * (lead + len(jextra)), vt.jacobian_dtype),
            token="vdbflow-jacobian-local",
        )
    return values, jac


def _sample_any(
    vol: Volume, points: Any, mode: str, space: str, jacobian_space: str | None, device: str, jacobian: bool, dims: Any
) -> xr.Dataset:
    jspace = space if jacobian_space is None else jacobian_space
    pts, lead, dims, coords = points_in(points, dims)
    if is_dask(pts):
        values, jac = _sample_lazy(vol, pts, mode, space, jspace, device, jacobian)
    else:
        values, jac = sample_grad_arrays(
            vol, pts.reshape(-1, 3), mode, space=space, jacobian_space=jspace, device=device, jacobian=jacobian
        )
        values = values.reshape(lead + values.shape[1:])
        jac = None if jac is None else jac.reshape(lead + jac.shape[1:])
    return build_dataset(
        vol, pts, values, jac, mode, space, jspace if jacobian else None, dims=dims, point_coords=coords
    )


def sample(
    vol: Volume, points: Any, mode: str = "linear", space: str = "world", *, device: str = "cpu", dims: Any = None
) -> xr.Dataset:
    """Values of a volume at points, as an xarray Dataset.

    Each point is interpolated with ``mode`` from the voxels around it; outside the volume's leaves
    and tiles they read the background.  ``points`` is (N, 3), or (..., 3) with a shape
    that the result keeps - a plane (ny, nx, 3), a lattice (nz, ny, nx, 3).  NumPy, CuPy or Dask:
    Dask points give a lazy Dataset, sampled block by block when computed.

    Parameters
    ----------
    vol : Volume
        The volume to sample.  Integer data is read with ``mode="closest"`` only.
    points : array_like, shape (N, 3) or (..., 3)
        Point coordinates, float16/32/64 or integers (taken as float64): NumPy, CuPy, Dask, or a
        DataArray whose last dim holds the three coordinates (it brings its own dims and
        coordinates).  World space (the volume's length units) by default; with ``space="index"``
        index space, in voxels, voxel centres at integer coordinates.
    mode : str, default ``"linear"``
        The interpolation scheme: ``"linear"`` (trilinear), ``"closest"`` or a higher-order
        scheme; :func:`sample_grad_arrays` lists them all.
    space : {"world", "index"}, default ``"world"``
        The space of ``points``.
    device : {"cpu", "cuda", "auto"}, default ``"cpu"``
        Where the kernels run: ``"cuda"`` needs CuPy and an NVIDIA GPU (the result then holds CuPy
        arrays), ``"auto"`` follows the points (CuPy points run on the GPU).
    dims : str or sequence of str, optional
        Names of the points' leading dims, one per leading axis and distinct, none of them a name
        the result uses itself (``component``, ``axis``, ``x``, ``y``, ``z``, ``i``, ``j``, ``k``).
        Default: ``("point",)`` for (N, 3) points, ``point_0, point_1, ...`` for (..., 3) points,
        the DataArray's own dims for a DataArray.

    Returns
    -------
    xarray.Dataset
        Variable ``vol.name``, dims ``dims`` (scalar data) or ``dims + ("component",)``, in the
        volume's dtype, with attr ``units`` = ``vol.units`` where the volume has units.
        Coordinates: the point positions as float64 ``x, y, z`` (world space, in
        ``vol.length_units``) or ``i, j, k`` (index space, units ``"voxel"``); ``point``
        (0 .. N-1) for (N, 3) points; ``component`` (``vol.component_names``) for multi-component
        data.  Attrs after CF-1.10 (docs/results.md): ``Conventions``, ``featureType`` (one point
        dim), ``value_type``, ``layout``, ``index_to_world`` (the 4 x 4 matrix as 16 numbers, row by
        row), ``sampling_mode`` and ``point_space``.

    Raises
    ------
    PointsError
        Points of the wrong shape or dtype, Dask points of unknown chunk sizes, ``dims`` that do
        not fit, or - for integer data, which has no NaN - points that are not finite.
    SamplingError
        An unknown ``mode`` or ``space``, or a mode other than ``"closest"`` for integer data.
    DeviceError
        An unknown ``device``, or ``"cuda"`` without CuPy or a GPU.

    See Also
    --------
    sample_grad : values and Jacobians.
    vdbflow.sample_hessian : values, Jacobians and Hessians.
    sample_grad_arrays : the same sampling on raw arrays, no Dataset.

    Examples
    --------
    A 4 x 4 x 4 block of voxels holding ``2 i + 3 j`` (all in the 8 x 8 x 8 leaf at the origin); a
    point outside that leaf reads the background, 0:

    >>> import numpy as np
    >>> import vdbflow
    >>> ijk = np.array([[i, j, k] for i in range(4) for j in range(4) for k in range(4)])
    >>> vol = vdbflow.Volume.from_voxels(ijk, (2 * ijk[:, 0] + 3 * ijk[:, 1]).astype(np.float32))
    >>> ds = vdbflow.sample(vol, [[1.5, 1.25, 2.0], [10.0, 10.0, 10.0]], space="index")
    >>> ds["value"].dims, ds["value"].dtype
    (('point',), dtype('float32'))
    >>> ds["value"].values.tolist()
    [6.75, 0.0]
    >>> ds["i"].values.tolist(), ds["i"].attrs["units"]
    ([1.5, 10.0], 'voxel')

    A plane of 2 x 3 points, an array of shape (2, 3, 3), keeps its shape:

    >>> plane = np.stack(np.meshgrid([1.0, 2.0], [0.0, 1.0, 2.0], [1.0], indexing="ij"), axis=-1)[:, :, 0]
    >>> vdbflow.sample(vol, plane, space="index", dims=("row", "col"))["value"].values.tolist()
    [[2.0, 5.0, 8.0], [4.0, 7.0, 10.0]]
    """
    return _sample_any(vol, points, mode, space, None, device, False, dims)


def sample_grad(
    vol: Volume,
    points: Any,
    mode: str = "linear",
    space: str = "world",
    jacobian_space: str | None = None,
    *,
    device: str = "cpu",
    dims: Any = None,
) -> xr.Dataset:
    """Values and Jacobians of a volume at points, as an xarray Dataset.

    The Jacobian is the derivative of the interpolant of ``mode`` itself,
    ``jacobian[c, a] = d value[c] / d axis[a]``, taken along the index axes or the world axes
    (``jacobian_space``).  Points are given as for :func:`sample`: (N, 3), or (..., 3) with a shape
    the result keeps, as NumPy, CuPy or Dask (a lazy Dataset) arrays.

    Parameters
    ----------
    vol : Volume
        The volume to sample.  Integer data is read with ``mode="closest"`` only (Jacobian 0).
    points : array_like, shape (N, 3) or (..., 3)
        Point coordinates (see :func:`sample`): world space (the volume's length units) by default,
        index space (voxels, voxel centres at integer coordinates) with ``space="index"``.
    mode : str, default ``"linear"``
        The interpolation scheme (:func:`sample_grad_arrays` lists them).
    space : {"world", "index"}, default ``"world"``
        The space of ``points``.
    jacobian_space : {"index", "world"}, optional
        The axes of the derivative: ``"index"`` (per voxel) or ``"world"`` (per length unit,
        ``J_index . M^-1`` for the index-to-world matrix ``M``).  Default: ``space``.
    device : {"cpu", "cuda", "auto"}, default ``"cpu"``
        Where the kernels run (see :func:`sample`).
    dims : str or sequence of str, optional
        Names of the points' leading dims (see :func:`sample`).

    Returns
    -------
    xarray.Dataset
        Everything :func:`sample` returns, plus ``vol.name + "_jacobian"`` with dims
        ``dims + ("axis",)`` (scalar data) or ``dims + ("component", "axis")``; the ``axis``
        coordinate is labelled ``i, j, k`` in index space and ``x, y, z`` in world space.  Dtype
        float32 for float32 data, float64 for float64 and integer data.  Units ``vol.units /
        length``, simplified by pint, with length ``vol.length_units`` (world) or ``voxel`` (index)
        (docs/results.md); attrs ``convention`` and ``jacobian_space`` say which derivative it is.

    Raises
    ------
    PointsError
        Points of the wrong shape or dtype, or non-finite points for integer data (see
        :func:`sample`).
    SamplingError
        An unknown ``mode``, ``space`` or ``jacobian_space``, or a mode other than ``"closest"`` for
        integer data.
    DeviceError
        An unknown ``device``, or ``"cuda"`` without CuPy or a GPU.

    See Also
    --------
    sample : values only.
    sample_grad_arrays : values and Jacobians as raw arrays.
    vdbflow.sample_hessian : second derivatives as well.
    vdbflow.analysis.flow : quantities of a velocity gradient (vorticity, Q-criterion, ...).

    Examples
    --------
    The linear field ``2 i + 3 j`` has the index-space Jacobian ``[2, 3, 0]`` wherever the
    trilinear stencil stays inside its 4 x 4 x 4 voxels; with a voxel size of 0.5 m the
    world-space Jacobian is twice that, per metre:

    >>> import numpy as np
    >>> import vdbflow
    >>> ijk = np.array([[i, j, k] for i in range(4) for j in range(4) for k in range(4)])
    >>> vol = vdbflow.Volume.from_voxels(ijk, 2.0 * ijk[:, 0] + 3.0 * ijk[:, 1], voxel_size=0.5)
    >>> vol.units, vol.length_units = "K", "m"
    >>> ds = vdbflow.sample_grad(vol, [[1.5, 1.25, 2.0]], space="index")
    >>> ds["value_jacobian"].dims
    ('point', 'axis')
    >>> ds["axis"].values.tolist(), ds["value_jacobian"].values.tolist(), ds["value_jacobian"].attrs["units"]
    (['i', 'j', 'k'], [[2.0, 3.0, 0.0]], 'K/voxel')
    >>> ds = vdbflow.sample_grad(vol, [[0.75, 0.625, 1.0]])  # the same point, in metres
    >>> ds["axis"].values.tolist(), ds["value_jacobian"].values.tolist(), ds["value_jacobian"].attrs["units"]
    (['x', 'y', 'z'], [[4.0, 6.0, 0.0]], 'K/m')
    >>> ds["value"].values.tolist()
    [6.75]
    """
    return _sample_any(vol, points, mode, space, jacobian_space, device, True, dims)
