"""Sampling at points: the two doors of a :class:`~vdbflow.ops.request.SampleRequest` -
:func:`sample_arrays` (raw arrays) and :func:`sample_dataset` (an xarray Dataset, lazy for Dask
points) - and the entry points that make one: :func:`sample_grad_arrays`, :func:`sample`,
:func:`sample_grad`.  The math runs in kernels/ through a backend (:mod:`vdbflow.devices`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core import kernel, schema
from vdbflow.core.volume import Volume
from vdbflow.devices import array_module, is_cupy_array, run
from vdbflow.devices.pipeline import host_pipeline
from vdbflow.errors import PointsError, ShapeError
from vdbflow.ops.chunk_graph import map_chunks, stack_chunks
from vdbflow.ops.coverage import counts_tiles, stencil_inside_flags
from vdbflow.ops.request import POINT_ORDERS, SPACES, SampleRequest, check_choice
from vdbflow.ops.results import as_numpy, is_dask, points_in, result_dataset

__all__ = [
    "POINT_ORDERS",
    "SPACES",
    "SampleRequest",
    "check_choice",
    "is_dask",
    "points_in",
]  # re-exported: importable from here too

# Facts of the kernels (vdbflow.core.kernel, read from kernels/vdbflow/schemes.h): the mode codes, and
# each mode's reach in voxels on the positive side of the base cell; importable from here as well.
MODES: dict[str, int] = kernel.MODES
STENCIL_RADIUS: dict[str, int] = kernel.STENCIL_RADIUS
AXIS_LABELS = schema.AXIS_LABELS


def prepare_points(vol: Volume, points: Any, device: str, space: str = "index") -> Any:
    """(N, 3) C-contiguous float32/float64 points on the device's array module.  Integer data has no
    NaN to return, so its points must map to finite index coordinates (checked after the world map)."""
    on_gpu = is_cupy_array(points)
    if device == "cuda" and not on_gpu:
        points = array_module("cuda").asarray(np.asarray(points))
        on_gpu = True
    if device == "cpu" and on_gpu:
        points = points.get()
        on_gpu = False
    if on_gpu:
        xp = array_module("cuda")
    else:
        xp = np
        points = as_numpy(points)
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
    request = SampleRequest(
        mode,
        ("value", "jacobian") if jacobian else ("value",),
        space,
        jacobian_space,
        device=device,
        point_order=point_order,
    )
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != 2):
        raise ShapeError(
            f"expected out=(values, jacobian), a pair of arrays or None, got {type(out).__name__}"
            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        )
    given = {} if out is None else {"value": out[0], "jacobian": out[1] if jacobian else None}
    arrays = sample_arrays(vol, request, uvw, given)
    return arrays["value"], arrays.get("jacobian")


def sample_arrays(
    vol: Volume, request: SampleRequest, points: Any, out: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The one array-level door: each of ``request.outputs`` at points (N, 3), as a dict of arrays
    (values (N,) / (N, C), Jacobians (N[, C], 3), Hessians (N[, C], 3, 3)) on the request's device.

    ``out`` may give buffers for some outputs (checked: shape, dtype, array type, layout, no
    overlap with each other or the points); the others are made here.  Raises as
    :func:`sample_grad_arrays` and :func:`vdbflow.sample_hessian_arrays`.
    """
    device = request.device_for(points)
    request.for_value_type(vol.value_type)
    vt = vol.value_type
    pts = prepare_points(vol, points, device, request.space)
    on_gpu = device == "cuda"
    if on_gpu:
        xp = array_module("cuda")
    else:
        xp = np
    N, C = pts.shape[0], vol.components
    shapes, dtypes = request.shapes((N,), C), request.dtypes(vt)
    out = out or {}
    arrays: dict[str, Any] = {}
    for name in request.outputs:
        transposed = (N, 3, C) if name == "jacobian" and C > 1 and not request.hessian else None
        arrays[name] = check_out(out.get(name), shapes[name], dtypes[name], on_gpu, _plural(name), transposed)
    given = [(name, a) for name, a in arrays.items() if a is not None]
    for i, (name, a) in enumerate(given):
        for other, b in given[i + 1 :]:
            if xp.may_share_memory(a, b):
                raise ShapeError(
                    f"expected separate {_plural(name)} and {_plural(other)} buffers, got two that overlap in memory"
                )
        if xp.may_share_memory(a, pts):
            raise ShapeError(
                f"expected a {_plural(name)} buffer apart from the points, got one that overlaps them in memory "
                "(the kernels would overwrite points before reading them)"
            )
    for name in request.outputs:
        if arrays[name] is None:
            arrays[name] = xp.empty(shapes[name], dtypes[name])
    if N == 0:
        return arrays
    points_world, jacobian_world = request.space == "world", request.jacobian_space == "world"
    derived = {name: arrays[name] for name in request.derived}
    if request.hessian:
        run(
            "sample_hessian",
            vol.kernel_arrays(),
            pts,
            request.mode_code,
            points_world,
            jacobian_world,
            request.hessian_space == "world",
            arrays["value"],
            arrays["jacobian"],
            arrays["hessian"],
            device=device,
        )
        if derived:  # from the Jacobian just sampled, by the same function the fused pass runs
            run("derive", arrays["jacobian"], arrays["value"], derived, device=device)
        return arrays
    if derived:  # one pass: only the asked outputs are written
        run(
            "sample_derived",
            vol.kernel_arrays(),
            pts,
            request.mode_code,
            points_world,
            jacobian_world,
            arrays.get("value"),
            arrays.get("jacobian"),
            derived,
            request.point_order,
            device=device,
        )
        return arrays
    kernel_jac = arrays["jacobian"] if (request.jacobian and vt.is_float) else None
    if request.jacobian and not vt.is_float:
        arrays["jacobian"][...] = 0
    values = arrays.get("value")  # the Jacobian alone: the kernel writes the values to scratch
    run(
        "sample",
        vol.kernel_arrays(),
        pts,
        request.mode_code,
        points_world,
        jacobian_world,
        xp.empty((N,) if C == 1 else (N, C), vt.dtype) if values is None else values,
        kernel_jac,
        request.point_order,
        device=device,
    )
    return arrays


def sample_host_arrays(vol: Volume, request: SampleRequest, points: np.ndarray) -> dict[str, np.ndarray]:
    """Each output of ``request`` at host points (N, 3), as host arrays: on the CPU as
    :func:`sample_arrays`; with ``device="cuda"`` through this process's
    :class:`~vdbflow.devices.pipeline.HostPipeline` (pinned buffers reused from call to call, copies of
    one piece overlapped with the kernel of the next, only the asked outputs copied back)."""
    if request.device != "cuda":
        return sample_arrays(vol, request.replace(device="cpu"), points)

    request.for_value_type(vol.value_type)
    pts = prepare_points(vol, points, "cpu", request.space)
    pipe = host_pipeline(array_module("cuda").cuda.runtime.getDevice())
    shapes, dtypes = request.shapes((), vol.components), request.dtypes(vol.value_type)
    on_device = request.replace(device="cuda")

    def launch(device_points: Any, device_out: dict[str, Any]) -> None:
        sample_arrays(vol, on_device, device_points, out=device_out)

    return pipe.run(pts, {name: (shapes[name], dtypes[name]) for name in request.outputs}, launch)


def _plural(name: str) -> str:
    return "values" if name == "value" else name


def _sample_block(block: np.ndarray, vol: Volume, request: SampleRequest) -> tuple:
    """Each output of ``request`` at one block of points (..., 3), shaped like the block."""
    lead = block.shape[:-1]
    arrays = sample_arrays(vol, request, block.reshape(-1, 3))
    return tuple(arrays[name].reshape(lead + arrays[name].shape[1:]) for name in request.outputs)


# task-key prefixes of the lazy graph of one volume's sampling
LAZY_SAMPLE_KEY = "vdbflow-sample-local"
LAZY_OUTPUT_KEYS = {
    "value": "vdbflow-values-local",
    "jacobian": "vdbflow-jacobian-local",
    "hessian": "vdbflow-hessian-local",
}


def _sample_lazy(vol: Volume, request: SampleRequest, points: Any) -> dict[str, Any]:
    """Dask arrays of each output (values (*lead[, C]), Jacobians (*lead[, C], 3), ...): one task per
    block of the points (chunked along the leading dims), nothing computed here."""
    import dask

    request.for_value_type(vol.value_type)
    if points.dtype.kind not in "iuf":
        raise PointsError(f"expected float16/32/64 or integer points, got dtype {points.dtype}")
    lead = points.ndim - 1
    shared = dask.delayed(vol, name=f"vdbflow-volume-{id(vol):x}-{dask.base.tokenize(vol.name, vol.leaf_count)}")
    parts = map_chunks(_sample_block, points, shared, request, name=LAZY_SAMPLE_KEY, lead=lead)
    shapes, dtypes = request.shapes((), vol.components), request.dtypes(vol.value_type)
    token = dask.base.tokenize(*parts)
    names = [f"{LAZY_OUTPUT_KEYS.get(name, f'vdbflow-{name}-local')}-{token}" for name in request.outputs]
    outputs = [(shapes[name], dtypes[name]) for name in request.outputs]
    return dict(zip(request.outputs, stack_chunks(parts, points.chunks[:lead], outputs, names), strict=True))


def split_inside(outputs: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """``outputs`` without ``"inside"``, and whether it was asked (the flag is not a kernel output)."""
    outputs = tuple(outputs)
    return tuple(o for o in outputs if o != schema.INSIDE), schema.INSIDE in outputs


@dataclass(frozen=True)
class Executor:
    """How a source answers a request at points shaped (*lead, 3): ``arrays(request, points, lead)`` gives
    the points the result records and each output shaped ``lead + (...)``; ``inside(request, points, lead)``
    the ``lead``-shaped flags of points whose stencil reads only defined voxels.  :func:`eager` and
    :func:`lazy` serve a :class:`~vdbflow.core.volume.Volume`; a distributed volume routes
    (:mod:`vdbflow.distribution.forward`), a series interpolates in time (:mod:`vdbflow.temporal.series`)."""

    arrays: Callable[[SampleRequest, Any, tuple], tuple[Any, dict[str, Any]]]
    inside: Callable[[SampleRequest, Any, tuple], Any]


def eager(vol: Volume) -> Executor:
    """A volume's NumPy or CuPy points, sampled now in one call of the kernels."""

    def arrays(request: SampleRequest, pts: Any, lead: tuple) -> tuple[Any, dict[str, Any]]:
        flat = sample_arrays(vol, request, pts.reshape(-1, 3))
        return pts, {name: a.reshape(lead + a.shape[1:]) for name, a in flat.items()}

    return Executor(arrays, lambda request, pts, lead: stencil_inside_flags(vol, pts, request.mode, request.space))


def lazy(vol: Volume) -> Executor:
    """A volume's Dask points: one task a block of points, nothing computed here."""
    return Executor(
        lambda request, pts, lead: (pts, _sample_lazy(vol, request, pts)),
        lambda request, pts, lead: stencil_inside_flags(vol, pts, request.mode, request.space),
    )


def sample_dataset(
    source: Any, request: SampleRequest, points: Any, dims: Any = None, inside: bool = False, executor: Any = None
) -> xr.Dataset:
    """The Dataset of ``request`` at points (N, 3) or (..., 3) - NumPy, CuPy, Dask (a lazy result) or a
    DataArray of points - shaped like the points: the one door of every volume-like class's ``sample``,
    ``sample_grad`` and ``sample_hessian`` (and :func:`sample`, :func:`sample_grad`,
    :func:`vdbflow.sample_hessian`).  ``source`` is a Volume, or anything with a ``template`` Volume that
    names its results (a distributed volume, a series) with its ``executor``; a Volume's executor is
    :func:`eager` or, for Dask points, :func:`lazy`.  ``inside`` adds the bool variable ``stencil_inside``:
    whether each point's stencil reads only active voxels (where not, the result mixes in the background)."""
    pts, lead, dims, coords = points_in(points, dims)
    if executor is None:
        executor = lazy(source) if is_dask(pts) else eager(source)
    recorded, arrays = executor.arrays(request, pts, lead)
    template = getattr(source, "template", source)
    ds = result_dataset(template, request, recorded, arrays, dims=dims, point_coords=coords)
    if inside:
        ds[schema.STENCIL_INSIDE] = xr.DataArray(
            executor.inside(request, recorded, lead),
            dims=dims,
            attrs=schema.stencil_inside_attrs(request.mode, template.name, counts_tiles(template)),
        )
    return ds


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
    return sample_dataset(vol, SampleRequest(mode, ("value",), space, device=device), points, dims)


def sample_grad(
    vol: Volume,
    points: Any,
    mode: str = "linear",
    space: str = "world",
    jacobian_space: str | None = None,
    *,
    device: str = "cpu",
    dims: Any = None,
    outputs: Sequence[str] = ("value", "jacobian"),
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
    outputs : sequence of str, default ``("value", "jacobian")``
        What to compute: ``value`` and ``jacobian``, and for vec3 float fields the quantities the
        kernels derive from the Jacobian in the same pass (``vdbflow.core.kernel.DERIVED``:
        ``divergence``, ``vorticity``, ``vorticity_magnitude``, ``q_criterion``, ``lambda2``,
        ``swirling_strength``, ``helicity``, ``strain_rate_magnitude``, ``r_invariant``), alone or with either field;
        only what is asked is written.  ``"inside"`` adds the bool variable ``stencil_inside``: True
        where the point's stencil reads only active voxels, False where it reaches the background or a
        tile (the edge of the data, where values and derivatives are not those of the field; plots
        mask those points).

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

    Derived quantities variables of their own (attrs ``long_name``, ``units``, ``formula``), each the
    same bits as :mod:`vdbflow.analysis.flow` on the Jacobian (lambda2 and swirling strength within the
    bounds docs/design.md states):

    >>> u = np.stack([-ijk[:, 1], ijk[:, 0], 0 * ijk[:, 2]], axis=1).astype(np.float32)  # rotation about z
    >>> spin = vdbflow.Volume.from_voxels(ijk, u)
    >>> q = vdbflow.sample_grad(spin, [[1.5, 1.5, 1.5]], space="index", outputs=["q_criterion", "vorticity"])
    >>> sorted(q.data_vars), q["q_criterion"].values.tolist(), q["vorticity"].values.tolist()
    (['q_criterion', 'vorticity'], [1.0], [[0.0, 0.0, 2.0]])
    """
    kernel_outputs, inside = split_inside(outputs)
    request = SampleRequest(mode, kernel_outputs, space, jacobian_space, device=device)
    return sample_dataset(vol, request, points, dims, inside)
