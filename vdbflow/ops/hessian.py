"""Second derivatives at points: values, Jacobians and Hessians ``H[c, a, b] = d² value[c] / d a d b``.

Schemes (kernels/vdbflow/hessian.h): the Hessian of each separable interpolant - ``lag4``, ``lag6``,
``lag8``, ``catmull_rom`` (JHTDB's M1Q4), ``bspline3``, ``m2q8`` (JHTDB's M2Q8) and trilinear
``linear`` (mixed terms only: its diagonal is 0) - and, for the node-difference schemes ``fd2``,
``fd4``, ``fd6``, ``fd8`` and ``fd4lag4``, centred second differences at the grid nodes (diagonal-
direction stencils for the mixed terms) interpolated between nodes as the scheme's gradient is.
World-space Hessians are ``M⁻ᵀ · H_index · M⁻¹`` per component, exact for any affine transform.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vdbflow.devices import backend, resolve_device
from vdbflow.errors import SamplingError, ShapeError
from vdbflow.ops.sampling import MODES, SPACES, build_dataset, check_choice, check_out, prepare_points

if TYPE_CHECKING:
    import xarray as xr

    from vdbflow.core.volume import Volume

HESSIAN_MODES = tuple(m for m in MODES if m != "closest")


def check_request(
    value_type: Any, mode: str, space: str, jacobian_space: str | None, hessian_space: str | None
) -> tuple[str, str]:
    """Refuses what has no Hessian (``closest``, integer data); returns the resolved
    ``(jacobian_space, hessian_space)`` (defaults: ``space``, then ``jacobian_space``)."""
    if mode not in HESSIAN_MODES:
        raise SamplingError(
            f"expected a mode with a second derivative, one of {', '.join(map(repr, HESSIAN_MODES))}; got {mode!r}"
        )
    check_choice(space, SPACES, "space")
    jacobian_space = space if jacobian_space is None else check_choice(jacobian_space, SPACES, "jacobian_space")
    hessian_space = jacobian_space if hessian_space is None else check_choice(hessian_space, SPACES, "hessian_space")
    if not value_type.is_float:
        raise SamplingError(
            f"expected float32 or float64 data for Hessians, got {value_type.name} (integers are not interpolated)"
        )
    return jacobian_space, hessian_space


def sample_hessian_arrays(
    vol: Volume,
    points: Any,
    mode: str = "lag4",
    out: tuple[Any, Any, Any] | None = None,
    *,
    space: str = "index",
    jacobian_space: str | None = None,
    hessian_space: str | None = None,
    device: str = "cpu",
) -> tuple[Any, Any, Any]:
    """Values, Jacobians and Hessians at points, as raw arrays.

    The Hessian is ``H[n, c, a, b] = d² value[c] / d a d b`` of the interpolant of ``mode`` (module
    docstring: which schemes, and how the node-difference schemes take it); it is symmetric.

    Parameters
    ----------
    vol : Volume
        A volume of float32 or float64 data (any number of components C).
    points : (N, 3) float32/float64 (integers are taken as float64), NumPy or CuPy
        Point coordinates, in index space (voxels, voxel centres at integers) unless
        ``space="world"`` (the volume's length units).
    mode : str, default ``"lag4"``
        Any sampling mode but ``"closest"`` (``HESSIAN_MODES``).
    out : tuple of three arrays or None, optional
        ``(values, jacobian, hessian)`` buffers to write into; any may be None.  Each must have the
        shape and dtype of the result below, be C-contiguous, and live where the kernels run.
    space : {"index", "world"}, default ``"index"``
        The space of ``points``.
    jacobian_space : {"index", "world"}, optional
        The axes of the Jacobian; default ``space``.
    hessian_space : {"index", "world"}, optional
        The axes of the Hessian: ``"index"`` (per voxel²) or ``"world"`` (per length unit²,
        ``M⁻ᵀ · H_index · M⁻¹``); default ``jacobian_space``.
    device : {"cpu", "cuda", "auto"}, default ``"cpu"``
        Where the kernels run; ``"auto"`` follows the points (CuPy points run on the GPU).

    Returns
    -------
    values : (N,) or (N, C), the volume's dtype
    jacobian : (N, 3) or (N, C, 3)
        The Jacobian dtype: float32 for float data, float64 for double data.
    hessian : (N, 3, 3) or (N, C, 3, 3)
        The Jacobian dtype; symmetric in its last two axes.

    Raises
    ------
    SamplingError
        ``mode="closest"`` or an unknown mode or space, or integer data.
    PointsError
        Points of the wrong shape or dtype.
    ShapeError
        ``out`` that is not a triple, or buffers of the wrong shape, dtype or array type.
    DeviceError
        An unknown ``device``, or ``"cuda"`` without CuPy or a GPU.

    See Also
    --------
    sample_hessian : the same as an xarray Dataset.
    """
    jacobian_space, hessian_space = check_request(vol.value_type, mode, space, jacobian_space, hessian_space)
    vt = vol.value_type
    device = resolve_device(device, points)
    pts = prepare_points(vol, points, device, space)
    if device == "cuda":
        import cupy as xp
    else:
        xp = np
    N, C = pts.shape[0], vol.components
    lead = (N,) if C == 1 else (N, C)
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != 3):
        raise ShapeError("expected out=(values, jacobian, hessian), a triple of arrays or None")
    out_v, out_j, out_h = (None, None, None) if out is None else out
    on_gpu = device == "cuda"
    values = check_out(out_v, lead, vt.dtype, on_gpu, "values")
    jac = check_out(out_j, lead + (3,), vt.jacobian_dtype, on_gpu, "jacobian")
    hess = check_out(out_h, lead + (3, 3), vt.jacobian_dtype, on_gpu, "hessian")
    values = xp.empty(lead, vt.dtype) if values is None else values
    jac = xp.empty(lead + (3,), vt.jacobian_dtype) if jac is None else jac
    hess = xp.empty(lead + (3, 3), vt.jacobian_dtype) if hess is None else hess
    if N == 0:
        return values, jac, hess
    backend(device).sample_hessian(
        vol.kernel_arrays(),
        pts,
        MODES[mode],
        space == "world",
        jacobian_space == "world",
        hessian_space == "world",
        values,
        jac,
        hess,
    )
    return values, jac, hess


def sample_hessian(
    vol: Volume,
    points: Any,
    mode: str = "lag4",
    space: str = "world",
    jacobian_space: str | None = None,
    hessian_space: str | None = None,
    *,
    device: str = "cpu",
) -> xr.Dataset:
    """Values, Jacobians and Hessians of a volume at points, as an xarray Dataset.

    The Hessian ``hessian[c, a, b] = d² value[c] / d a d b`` is the second derivative of the
    interpolant of ``mode`` (module docstring), symmetric in ``a`` and ``b``.

    Parameters
    ----------
    vol : Volume
        A volume of float32 or float64 data.
    points : array_like, shape (N, 3)
        Point coordinates, float32/float64 or integers (taken as float64), NumPy or CuPy: world space
        (the volume's length units) by default, index space (voxels, voxel centres at integers)
        with ``space="index"``.
    mode : str, default ``"lag4"``
        Any sampling mode but ``"closest"``.
    space : {"world", "index"}, default ``"world"``
        The space of ``points``.
    jacobian_space : {"index", "world"}, optional
        The axes of the Jacobian; default ``space``.
    hessian_space : {"index", "world"}, optional
        The axes of the Hessian: per voxel² (index) or per length unit² (world); default
        ``jacobian_space``.
    device : {"cpu", "cuda", "auto"}, default ``"cpu"``
        Where the kernels run (see :func:`vdbflow.sample`).

    Returns
    -------
    xarray.Dataset
        The variables of :func:`vdbflow.sample_grad`, plus ``vol.name + "_hessian"`` with dims
        ``(point, component, axis, axis2)`` (scalar data: ``(point, axis, axis2)``), labelled like
        the Jacobian's axes in ``hessian_space`` (``haxis, haxis2`` instead of ``axis, axis2`` when
        the Hessian and Jacobian spaces differ), in the Jacobian's dtype.  Units
        ``vol.units / length²`` with length ``vol.length_units`` (world) or ``voxel`` (index), where
        both are known.

    Raises
    ------
    SamplingError
        ``mode="closest"``, an unknown mode or space, or integer data.
    PointsError
        Points of the wrong shape or dtype.
    DeviceError
        An unknown ``device``, or ``"cuda"`` without CuPy or a GPU.

    See Also
    --------
    sample_hessian_arrays : the same as raw arrays.
    vdbflow.sample_grad : values and Jacobians only.
    vdbflow.analysis.flow.laplacian : the trace of the Hessian.

    Examples
    --------
    ``f = i² + i j`` (plus 1, so that every voxel differs from the background and is active) has
    the Hessian ``[[2, 1, 0], [1, 0, 0], [0, 0, 0]]``, which the cubic ``lag4`` scheme reproduces:

    >>> import numpy as np
    >>> import vdbflow
    >>> i, j, k = np.meshgrid(np.arange(8), np.arange(8), np.arange(8), indexing="ij")
    >>> vol = vdbflow.Volume.from_dense(1.0 + i * i + i * j)
    >>> ds = vdbflow.sample_hessian(vol, [[3.5, 3.25, 4.0]], space="index")
    >>> ds["value_hessian"].dims
    ('point', 'axis', 'axis2')
    >>> (np.round(ds["value_hessian"].values[0], 6) + 0.0).tolist()
    [[2.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    >>> (np.round(ds["value_jacobian"].values[0], 6) + 0.0).tolist()  # (2 i + j, i, 0)
    [10.25, 3.5, 0.0]
    """
    jacobian_space = space if jacobian_space is None else jacobian_space
    hessian_space = jacobian_space if hessian_space is None else hessian_space
    values, jac, hess = sample_hessian_arrays(
        vol, points, mode, space=space, jacobian_space=jacobian_space, hessian_space=hessian_space, device=device
    )
    ds = build_dataset(vol, points, values, jac, mode, space, jacobian_space)
    return add_hessian(ds, vol, hess, hessian_space)


def add_hessian(ds: xr.Dataset, vol: Volume, hess: Any, hessian_space: str) -> xr.Dataset:
    """``ds`` with the Hessian variable added beside its Jacobian (same leading dims, then axis, axis2)."""
    from vdbflow.ops.sampling import AXIS_LABELS

    jname, hname = f"{vol.name}_jacobian", f"{vol.name}_hessian"
    lead = ds[jname].dims[:-1]
    labels = list(AXIS_LABELS[hessian_space])
    units = getattr(vol, "units", None)
    length = getattr(vol, "length_units", None) if hessian_space == "world" else "voxel"
    attrs = {
        "long_name": f"Hessian of {vol.name}",
        "convention": f"{hname}[{'component, ' if vol.components > 1 else ''}axis, axis2] = "
        f"d2 {vol.name}{'[component]' if vol.components > 1 else ''} / d axis d axis2",
        "hessian_space": hessian_space,
        "sampling_mode": ds.attrs.get("sampling_mode"),
    }
    if units and length:
        from vdbflow.core.units import divide, power

        attrs["units"] = divide(units, power(length, 2))
    shape = tuple(ds[jname].shape[:-1]) + (3, 3)
    hvar = (lead + ("axis", "axis2"), hess.reshape(shape), attrs)
    coords = {"axis2": labels}
    if "axis" not in ds.coords or list(ds["axis"].values) != labels:  # Jacobian and Hessian spaces differ
        hvar = (lead + ("haxis", "haxis2"), hess.reshape(shape), attrs)
        coords = {"haxis": labels, "haxis2": labels}
    return ds.assign_coords(coords).assign({hname: hvar})
