"""The value types a volume can hold: one table, the single source of truth.

Each NanoVDB-style value type maps to a NumPy scalar dtype and a component count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.errors import VolumeError


@dataclass(frozen=True)
class ValueType:
    """A volume value type: ``name`` (e.g. ``"vec3f"``), scalar ``dtype`` and ``components``."""

    name: str
    dtype: np.dtype
    components: int

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f"

    @property
    def jacobian_dtype(self) -> np.dtype:
        """Jacobian dtype: float64 for double data, float32 for float data, float64 for integers."""
        return self.dtype if self.is_float else np.dtype(np.float64)


VALUE_TYPES: dict[str, ValueType] = {
    vt.name: vt
    for vt in (
        ValueType("int32", np.dtype(np.int32), 1),
        ValueType("int64", np.dtype(np.int64), 1),
        ValueType("uint32", np.dtype(np.uint32), 1),
        ValueType("float32", np.dtype(np.float32), 1),
        ValueType("float64", np.dtype(np.float64), 1),
        ValueType("vec3f", np.dtype(np.float32), 3),
        ValueType("vec3d", np.dtype(np.float64), 3),
        ValueType("vec4f", np.dtype(np.float32), 4),
        ValueType("vec4d", np.dtype(np.float64), 4),
    )
}

# the scalar dtypes the kernels read (abi.h ValueKind), in the kernels' order
SCALAR_DTYPES = tuple(np.dtype(name) for name in kernel.VALUE_KINDS)

# Upper bound of components per voxel for the index layout: the kernels' (abi.h), re-exported here.
MAX_COMPONENTS = kernel.MAX_COMPONENTS


def value_type_for(dtype: np.dtype, components: int) -> ValueType:
    """The value type of ``components`` values of ``dtype`` per voxel.

    The nine named types cover 1, 3 and 4 components; the index layout may carry any count up to
    ``MAX_COMPONENTS`` (named like ``"float32x9"``).
    """
    dtype = np.dtype(dtype)
    if dtype not in SCALAR_DTYPES:
        names = [d.name for d in sorted(SCALAR_DTYPES, key=lambda d: (d.kind == "f", d.kind == "u", d.itemsize))]
        raise VolumeError(f"expected values of dtype {', '.join(names[:-1])} or {names[-1]}, got {dtype}")
    for vt in VALUE_TYPES.values():
        if vt.dtype == dtype and vt.components == components:
            return vt
    if not 1 <= components <= MAX_COMPONENTS:
        raise VolumeError(f"expected 1 to {MAX_COMPONENTS} components per voxel, got {components}")
    return ValueType(f"{dtype.name}x{components}", dtype, components)


def cast_values(values: Any, vt: ValueType, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """``values`` broadcast to ``shape`` in the volume's dtype, refusing lossy casts."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iufb":
        raise VolumeError(f"expected numeric {what}, got dtype {arr.dtype}")
    if shape[-1] == 1 and arr.ndim == len(shape) - 1 + 0 and arr.shape == shape[:-1]:
        arr = arr[..., None]
    try:
        arr = np.broadcast_to(arr, shape)
    except ValueError:
        raise VolumeError(f"expected {what} of shape {shape} (or broadcastable), got {np.shape(values)}") from None
    out = arr.astype(vt.dtype)
    with np.errstate(invalid="ignore"):
        same = (out == arr) | (np.isnan(arr) if arr.dtype.kind == "f" else False)
        if arr.dtype.kind == "f" and vt.dtype.kind == "f":
            same = same | np.isclose(out, arr, rtol=1e-6, atol=0)  # float64 -> float32 rounding is fine
    if not np.all(same):
        raise VolumeError(f"expected {what} representable as {vt.dtype}, got {arr.ravel()[~np.ravel(same)][0]!r}")
    return np.ascontiguousarray(out)
