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

from vdbflow.devices import resolve_device
from vdbflow.errors import SamplingError, ShapeError
from vdbflow.ops.sampling import MODES, SPACES, build_dataset, check_choice, check_out, prepare_points

if TYPE_CHECKING:
    import xarray as xr

    from vdbflow.core.volume import Volume

HESSIAN_MODES = tuple(m for m in MODES if m != "closest")


def check_request(value_type: Any, mode: str, space: str, jacobian_space: str | None,
                  hessian_space: str | None) -> tuple[str, str]:
    """Refuses what has no Hessian (``closest``, integer data); returns the resolved
    ``(jacobian_space, hessian_space)`` (defaults: ``space``, then ``jacobian_space``)."""
    if mode not in HESSIAN_MODES:
        raise SamplingError(f"expected a mode with a second derivative, one of {', '.join(map(repr, HESSIAN_MODES))}; "
                            f"got {mode!r}")
    check_choice(space, SPACES, "space")
    jacobian_space = space if jacobian_space is None else check_choice(jacobian_space, SPACES, "jacobian_space")
    hessian_space = jacobian_space if hessian_space is None else check_choice(hessian_space, SPACES, "hessian_space")
    if not value_type.is_float:
        raise SamplingError(f"expected float32 or float64 data for Hessians, got {value_type.name} (integers are not "
                            "interpolated)")
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
    """Values (N[, C]), Jacobians (N[, C], 3) and Hessians (N[, C], 3, 3) at ``points`` (N, 3), as arrays.

    ``out`` is an optional ``(values, jacobian, hessian)`` triple of buffers (any may be None).
    Hessians have the Jacobian dtype (float32 for float data, float64 for double data) and are
    symmetric; ``hessian_space`` (default: ``jacobian_space``, itself defaulting to ``space``) is
    ``"index"`` (per voxel²) or ``"world"`` (per length unit²).
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
    xform = vol.transform.kernel_parameters()
    if on_gpu:
        from vdbflow.devices import cuda

        cuda.sample_hessian(vol, pts, MODES[mode], xform, space == "world", jacobian_space == "world",
                            hessian_space == "world", values, jac, hess)
    else:
        from vdbflow import _core

        k = vol.kernel_arrays()
        _core.sample_hessian(list(k.tables), k.masks, k.prefix, k.leaf_offset, k.values, k.tile_values, k.background,
                             k.components, k.index_layout, pts, xform, space == "world", jacobian_space == "world",
                             hessian_space == "world", MODES[mode], values, jac, hess, k.leaf_values_at)
    return values, jac, hess


def sample_hessian(vol: Volume, points: Any, mode: str = "lag4", space: str = "world",
                   jacobian_space: str | None = None, hessian_space: str | None = None, *,
                   device: str = "cpu") -> xr.Dataset:
    """Values, Jacobians and Hessians at ``points`` (N, 3) as a Dataset.

    Variables as :func:`vdbflow.sample_grad`, plus ``vol.name + "_hessian"`` with dims
    ``(point, component, axis, axis2)`` (scalar data: ``(point, axis, axis2)``),
    ``hessian[c, a, b] = d² value[c] / d a d b``, labelled like the Jacobian's axes in
    ``hessian_space`` (default: ``jacobian_space``, itself defaulting to ``space``).
    """
    jacobian_space = space if jacobian_space is None else jacobian_space
    hessian_space = jacobian_space if hessian_space is None else hessian_space
    values, jac, hess = sample_hessian_arrays(vol, points, mode, space=space, jacobian_space=jacobian_space,
                                              hessian_space=hessian_space, device=device)
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
