"""The checks of an operation's arguments, once for both backends: shapes, dtypes, component counts, modes and
index ranges (NumPy and CuPy arrays alike give ``ndim``, ``shape``, ``size`` and ``dtype``).  The CPU module's
bindings are made from the table of operations (kernels/vdbflow/operations.h) and check what the row's types
say (a record's own fields, each array's element type); what the arrays must hold is an operation's meaning,
checked here before either backend runs it.  ``c`` is one call's arguments, as
:class:`vdbflow.devices.interface.Backend` names them; each check returns what a backend needs of it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.errors import DeviceError, SamplingError, ShapeError

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
NODE_SCHEMES = tuple(kernel.MODES[f"fd{r}"] for r in (2, 4, 6, 8))  # what grid_gradient takes


def _require(ok: bool, message: str, error: type[Exception] = SamplingError) -> None:
    if not ok:
        raise error(message)


def _array(arr: Any, name: str, dtype: Any, size: int, optional: bool = False) -> None:
    """``arr`` holds ``size`` entries of ``dtype`` (or is None, if ``optional``)."""
    if not (arr is None and optional or arr is not None and np.dtype(arr.dtype) == dtype and arr.size == size):
        got = "None" if arr is None else f"{arr.size} of {arr.dtype}"
        raise ShapeError(f"expected {name} of {size} {np.dtype(dtype)} entries, got {got}")


def real_of(dtype: Any) -> np.dtype:
    """The accumulation (Jacobian) dtype of a value dtype: float64 for float64 values, else float32."""
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def points(pts: Any) -> int:
    """N of points (N, 3) float32 or float64."""
    ok = pts.ndim == 2 and pts.shape[1] == 3 and np.dtype(pts.dtype) in FLOATS
    _require(ok, f"expected points (N, 3) float32 or float64, got {pts.shape} {pts.dtype}", ShapeError)
    return int(pts.shape[0])


def value_dtype(k: kernel.KernelArrays, what: str = "") -> np.dtype:
    """The dtype of the values the kernels read (``k``'s checked host copy); float32 or float64 if ``what``
    (the operation that needs them) is given."""
    dtype = np.dtype(kernel.host_record(k).arrays.values.dtype)
    _require(not what or dtype in FLOATS, f"{what} need float32 or float64 data, got {dtype}")
    return dtype


def _values_and_jacobian(c: SimpleNamespace, dtype: np.dtype, n: int, C: int) -> None:
    _array(c.out_values, "out_values", dtype, n * C)
    _array(c.out_jacobian, "out_jacobian", real_of(dtype), n * C * 3, optional=True)


def sample(c: SimpleNamespace) -> int:
    """Values (N, C) of the volume's dtype, Jacobians (N, C, 3) float or None (float data only); returns N."""
    n, dtype = points(c.points), value_dtype(c.k)
    _values_and_jacobian(c, dtype, n, c.k.components)
    closest = c.mode == kernel.MODES["closest"] and c.out_jacobian is None
    _require(dtype in FLOATS or closest, "integer data supports closest values only")
    return n


def derived(buffers: dict[str, Any], n: int, dtype: np.dtype) -> list[Any]:
    """The buffers of ``derived`` in the kernels' order (None: not asked), each (n, width) of ``dtype``."""
    slots = kernel.derived_slots(buffers)
    for name, buf in zip(kernel.DERIVED, slots, strict=True):
        _array(buf, name, dtype, n * kernel.DERIVED_WIDTHS[name], optional=True)
    return slots


def sample_derived(c: SimpleNamespace) -> tuple[int, list[Any]]:
    """A vec3 float volume, values (N, 3) and Jacobians (N, 3, 3) or None; returns N and the derived slots."""
    n, dtype = points(c.points), value_dtype(c.k, "derived quantities")
    _require(c.k.components == 3, "derived quantities need a vec3 float32 or float64 grid")
    _array(c.out_values, "out_values", dtype, n * 3, optional=True)
    _array(c.out_jacobian, "out_jacobian", real_of(dtype), n * 9, optional=True)
    return n, derived(c.derived, n, real_of(dtype))


def derive(c: SimpleNamespace) -> tuple[int, list[Any]]:
    """Jacobians (N, 3, 3) float, velocities (N, 3) of their dtype or None; returns N and the derived slots."""
    J = c.jacobian
    ok = J.ndim == 3 and J.shape[1:] == (3, 3) and np.dtype(J.dtype) in FLOATS
    _require(ok, f"expected a jacobian (N, 3, 3) float32 or float64, got {J.shape} {J.dtype}", ShapeError)
    n = int(J.shape[0])
    _array(c.velocity, "velocity", J.dtype, n * 3, optional=True)
    slots = derived(c.derived, n, np.dtype(J.dtype))
    _require(slots[kernel.DERIVED.index("helicity")] is None or c.velocity is not None, "helicity needs the velocity")
    return n, slots


def sample_hessian(c: SimpleNamespace) -> int:
    """Float data, a mode with second derivatives; Hessians (N, C, 3, 3) of the Jacobian dtype; returns N."""
    n, dtype = points(c.points), value_dtype(c.k, "Hessians")
    _require(c.mode != kernel.MODES["closest"], "this mode has no second derivative")
    _values_and_jacobian(c, dtype, n, c.k.components)
    _array(c.out_hessian, "out_hessian", real_of(dtype), n * c.k.components * 9)
    return n


def sample_vjp(c: SimpleNamespace) -> int:
    """Contiguous float values, closest or linear; adjoints of the Jacobian dtype, the accumulator (value rows
    + tile rows + 1, C) float64; returns N."""
    if c.k.leaf_values_at is not None:
        raise DeviceError("expected the kernel arrays of a contiguous volume for reverse mode (Volume.contiguous())")
    n, real, C = points(c.points), real_of(value_dtype(c.k, "reverse mode")), c.k.components
    _require(c.mode <= kernel.MODES["linear"], "reverse mode supports closest and linear")
    _array(c.adj_values, "adj_values", real, n * C)
    _array(c.adj_jacobian, "adj_jacobian", real, n * C * 3, optional=True)
    _array(c.adj_points, "adj_points", real, n * 3)
    host = kernel.host_record(c.k).arrays  # the record's rows are its checked copy's
    rows = (host.values.size + host.tile_values.size) // C + 1
    _array(c.accumulator, "accumulator", np.float64, rows * C)
    _require(c.accumulator.shape == (rows, C), f"expected accumulator ({rows}, {C}) (value rows + tiles + 1, C)")
    return n


def grid_gradient(c: SimpleNamespace) -> np.dtype:
    """An fd2, fd4, fd6 or fd8 scheme of float data, origins (L, 3) of the volume's leaves; returns the dtype."""
    _require(
        int(c.scheme) in NODE_SCHEMES, f"expected an fd2, fd4, fd6 or fd8 scheme for grid gradients, got {c.scheme}"
    )
    dtype = value_dtype(c.k, "grid gradients")
    _require(np.shape(c.leaf_origins) == (len(c.k.masks), 3), "expected leaf origins (L, 3) of the volume's leaves")
    return dtype


def _within(index: Any, size: int, what: str) -> None:
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= size):
        raise IndexError(f"{what} {int(index.min() if index.min() < 0 else index.max())} outside [0, {size})")


def scatter_rows(dst: Any, index: Any, src: Any) -> int:
    """A C-contiguous ``dst``, ``index`` (m,) integers within its rows and ``src`` (m, *dst rows); returns m."""
    m = int(index.shape[0])
    ok = index.ndim == 1 and np.issubdtype(index.dtype, np.integer) and dst.flags.c_contiguous
    expected = f"a C-contiguous dst, index (m,) integers and src ({m}, {dst.shape[1:]})"
    _require(
        ok and src.shape == (m, *dst.shape[1:]), f"expected {expected}, got {index.shape}, {src.shape}", ShapeError
    )
    _within(index, dst.shape[0], "scatter index")
    return m


def active_voxels_at(origins: Any, masks: Any, leaf_end: Any, ranks: Any) -> int:
    """Leaves' ``origins`` (L, 3), ``masks`` (L, 8) and ``leaf_end`` (L,), ``ranks`` (n,) below the active count;
    returns n."""
    L = origins.shape[0]
    ok = origins.shape == (L, 3) and masks.shape == (L, 8) and leaf_end.shape == (L,)
    _require(ok, "expected origins (L, 3), masks (L, 8) and leaf_end (L,)", ShapeError)
    _within(ranks, int(leaf_end[-1]) if L else 0, "voxel rank")
    return int(ranks.shape[0])
