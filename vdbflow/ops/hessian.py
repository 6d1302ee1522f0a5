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

from vdbflow.errors import ShapeError
from vdbflow.ops.request import HESSIAN_MODES, OUTPUTS, SampleRequest
from vdbflow.ops.sampling import sample_arrays, sample_dataset

__all__ = ["HESSIAN_MODES"]  # re-exported: importable from here too

if TYPE_CHECKING:
    import xarray as xr

    from vdbflow.core.volume import Volume


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
    request = SampleRequest(mode, OUTPUTS, space, jacobian_space, hessian_space, device=device)
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != 3):
        raise ShapeError("expected out=(values, jacobian, hessian), a triple of arrays or None")
    given = {} if out is None else dict(zip(OUTPUTS, out, strict=True))
    arrays = sample_arrays(vol, request, points, given)
    return arrays["value"], arrays["jacobian"], arrays["hessian"]


def sample_hessian(
    vol: Volume,
    points: Any,
    mode: str = "lag4",
    space: str = "world",
    jacobian_space: str | None = None,
    hessian_space: str | None = None,
    *,
    device: str = "cpu",
    dims: Any = None,
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
    dims : str or sequence of str, optional
        Names of the points' leading dims (see :func:`vdbflow.sample`).

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
    request = SampleRequest(mode, OUTPUTS, space, jacobian_space, hessian_space, device=device)
    return sample_dataset(vol, request, points, dims)
