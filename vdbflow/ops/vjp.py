"""Reverse mode of sampling: vector-Jacobian products to voxel data, tiles, background and points.

The adjoint math lives in kernels/vdbflow/adjoint.h (CPU and GPU from the same source).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core.volume import Volume
from vdbflow.devices import array_module, resolve_device, run
from vdbflow.errors import PointsError, SamplingError
from vdbflow.ops.sampling import MODES, SPACES, check_choice, prepare_points  # noqa: F401


@dataclass(frozen=True)
class SampleGradVJP:
    """Adjoints of ``sum(adj_value * value + adj_jacobian * jacobian)`` with respect to the inputs.

    Attributes
    ----------
    voxel_data : like ``vol.voxel_data`` ((n,) or (n, C), the volume's float dtype)
    tile_values : (T,) or (T, C)
    background : scalar or (C,)
    points : (N, 3), in the points' space
    """

    voxel_data: Any
    tile_values: Any
    background: Any
    points: Any

    def get(self) -> SampleGradVJP:
        """The same adjoints as host (NumPy) arrays: copied from the GPU where they are CuPy arrays."""
        host = {k: getattr(self, k) for k in ("voxel_data", "tile_values", "background", "points")}
        return SampleGradVJP(
            **{k: a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a for k, a in host.items()}
        )

    def __repr__(self) -> str:
        """Shapes and dtypes, not the arrays: ``SampleGradVJP(voxel_data (n, 3) float32, ...)``."""

        def brief(a: Any) -> str:
            shape = tuple(getattr(a, "shape", ()))
            where = "" if isinstance(a, (np.ndarray, np.generic)) else f" {type(a).__module__.split('.')[0]}"
            return f"{shape} {getattr(a, 'dtype', type(a).__name__)}{where}"

        fields = ("voxel_data", "tile_values", "background", "points")
        return f"SampleGradVJP({', '.join(f'{k} {brief(getattr(self, k))}' for k in fields)})"


def _adjoint_array(xp: Any, arr: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> Any:
    a = xp.asarray(arr)
    if a.dtype.kind not in "iuf":
        raise PointsError(f"expected a numeric {what}, got dtype {a.dtype}")
    if tuple(a.shape) != shape:
        hint = " [component, axis]" if what == "adj_jacobian" else ""
        raise PointsError(f"expected {what} of shape {shape}{hint}, got {tuple(a.shape)}")
    return xp.ascontiguousarray(a, dtype=dtype)


def sample_grad_vjp(
    vol: Volume,
    points: Any,
    adj_value: Any,
    adj_jacobian: Any = None,
    mode: str = "linear",
    space: str = "index",
    jacobian_space: str | None = None,
    *,
    device: str = "cpu",
) -> SampleGradVJP:
    """Reverse mode of :func:`vdbflow.sample_grad_arrays`: vector-Jacobian products at points.

    Given upstream adjoints of the sampled values and Jacobians, returns the adjoints of
    ``sum(adj_value * value + adj_jacobian * jacobian)`` with respect to the voxel data, the tile
    values, the background and the points.  Each cell corner sends
    ``W_o adj_value + adj_jacobian . grad W_o`` to what it read (a voxel, a tile or the
    background); the point adjoint includes the second-order term through the Jacobian.  With
    ``space="world"`` the point adjoint is mapped by the transpose of the inverse transform.

    Determinism: on the CPU the result does not depend on the thread count (shares are summed in
    point order); on the GPU they are added with float64 atomics, whose order may vary in the last
    bits from run to run.

    Parameters
    ----------
    vol : Volume
        A volume of float32 or float64 data, C components.
    points : (N, 3) float32/float64 (integers are taken as float64), NumPy or CuPy
        Point coordinates, in index space (voxels, voxel centres at integers) unless
        ``space="world"`` (the volume's length units).
    adj_value : array_like, (N,) or (N, C)
        Upstream adjoint of the values (numeric; cast to the Jacobian dtype).
    adj_jacobian : array_like, (N, 3) or (N, C, 3), optional
        Upstream adjoint of the Jacobians, ``[point, component, axis]``, in ``jacobian_space``;
        None when only the values feed the loss.
    mode : {"linear", "closest"}, default ``"linear"``
        The sampling mode (reverse mode has these two).
    space : {"index", "world"}, default ``"index"``
        The space of ``points``.
    jacobian_space : {"index", "world"}, optional
        The axes of the Jacobian being differentiated; default ``space``.
    device : {"cpu", "cuda", "auto"}, default ``"cpu"``
        Where the kernels run; ``"auto"`` follows the points (CuPy points run on the GPU).

    Returns
    -------
    SampleGradVJP
        ``voxel_data`` shaped like ``vol.voxel_data`` ((n,) or (n, C)), ``tile_values`` (T,) or
        (T, C) and ``background`` (a scalar or (C,)), all in the volume's dtype and summed in
        float64; ``points`` (N, 3) in the Jacobian dtype, in the points' space.

    Raises
    ------
    SamplingError
        A mode other than ``"linear"`` or ``"closest"``, an unknown space, or integer data.
    PointsError
        Points, ``adj_value`` or ``adj_jacobian`` of the wrong shape or a non-numeric dtype.
    DeviceError
        An unknown ``device``, or ``"cuda"`` without CuPy or a GPU.

    See Also
    --------
    vdbflow.sample_grad_arrays : the forward mode.
    vdbflow.ops.autograd : sampling as a differentiable PyTorch function, built on this.
    """
    check_choice(mode, ("closest", "linear"), "mode (reverse mode)")
    check_choice(space, SPACES, "space")
    jacobian_space = space if jacobian_space is None else check_choice(jacobian_space, SPACES, "jacobian_space")
    vt = vol.value_type
    if not vt.is_float:
        raise SamplingError(f"expected float32 or float64 data for reverse mode, got {vt.name}")
    device = resolve_device(device, points)
    vol = vol.contiguous()  # adjoint rows follow the contiguous value array
    pts = prepare_points(vol, points, device, space)
    if device == "cuda":
        xp = array_module("cuda")
    else:
        xp = np
    N, C = pts.shape[0], vol.components
    R = vt.jacobian_dtype
    vshape = (N,) if C == 1 else (N, C)
    jshape = (N, 3) if C == 1 else (N, C, 3)
    a_val = _adjoint_array(xp, adj_value, vshape, R, "adj_value")
    a_jac = None if adj_jacobian is None else _adjoint_array(xp, adj_jacobian, jshape, R, "adj_jacobian")
    k = vol.kernel_arrays()
    value_rows, tile_rows = len(k.values), len(k.tile_values)
    accumulator = xp.zeros((value_rows + tile_rows + 1, C), np.float64)
    adj_points = xp.zeros((N, 3), R)
    if N:
        run(
            "sample_vjp",
            k,
            pts,
            MODES[mode],
            space == "world",
            jacobian_space == "world",
            a_val,
            a_jac,
            accumulator,
            adj_points,
            device=device,
        )
    acc = accumulator.astype(vt.dtype)
    data = acc[:value_rows]
    tiles = acc[value_rows : value_rows + tile_rows]
    bg = acc[-1]
    if C == 1:
        data, tiles, bg = data[:, 0], tiles[:, 0], bg[0]
    return SampleGradVJP(voxel_data=data, tile_values=tiles, background=bg, points=adj_points)


__all__ = ["SampleGradVJP", "sample_grad_vjp"]
