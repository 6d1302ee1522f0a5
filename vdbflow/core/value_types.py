"""The value types a volume can hold: one table, the single source of truth.

Each NanoVDB-style value type maps to a NumPy scalar dtype and a component count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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

SCALAR_DTYPES = tuple(np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.float32, np.float64))

# Upper bound of components per voxel for the index layout (kernels' MAX_COMPONENTS).
MAX_COMPONENTS = 64


def value_type_for(dtype: np.dtype, components: int) -> ValueType:
    """The value type of ``components`` values of ``dtype`` per voxel.

    The nine named types cover 1, 3 and 4 components; the index layout may carry any count up to
    ``MAX_COMPONENTS`` (named like ``"float32x9"``).
    """
    dtype = np.dtype(dtype)
    if dtype not in SCALAR_DTYPES:
        raise VolumeError(f"expected values of dtype int32, int64, uint32, float32 or float64, got {dtype}")
    for vt in VALUE_TYPES.values():
        if vt.dtype == dtype and vt.components == components:
            return vt
    if not 1 <= components <= MAX_COMPONENTS:
        raise VolumeError(f"expected 1 to {MAX_COMPONENTS} components per voxel, got {components}")
    return ValueType(f"{dtype.name}x{components}", dtype, components)
