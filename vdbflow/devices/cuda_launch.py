"""The CUDA entries of the kernels' table of operations (operations.h), as the backend calls them: the name
expression of each entry (a template instance of sample.cu, or an extern "C" name) and the argument list of
a launch, built from the row's typed, named GPU parameters (``vdbflow.core.kernel.Operation.gpu_parameters``):
the backend names its values as the entry names its parameters, and nothing else spells a launch's
argument order or C types."""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.core.kernel import GPU_STEPS, OPERATIONS
from vdbflow.errors import DeviceError

NULL = np.uint64(0)  # a null device pointer as a kernel argument
# C++ types of the value dtypes, as the name expressions of the templates in sample.cu spell them
_CTYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long long",
    np.dtype(np.uint32): "unsigned int",
}
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
VALUE_DTYPES = tuple(_CTYPES)
# a scalar parameter's C type (operations.h) -> its NumPy type as a launch argument
SCALARS = {"i64": np.int64, "int": np.int32, "unsigned": np.uint32, "double": np.float64}

# The template entries of sample.cu: the value types each takes and the component counts fixed at compile time
# (None: no component parameter).  Every name expression the backend calls comes from this table.
_VALUE_TYPES: dict[str, tuple[np.dtype, ...]] = {"any": VALUE_DTYPES, "float": FLOAT_DTYPES}
TEMPLATES: dict[str, tuple[str, tuple[np.dtype, ...], tuple[int, ...] | None]] = {
    name: (op.gpu_entry, _VALUE_TYPES[op.value_types], op.gpu_components)
    for name, op in OPERATIONS.items()
    if op.value_types in _VALUE_TYPES
}
ENTRIES = {**OPERATIONS, **GPU_STEPS}  # every row with an entry in sample.cu, or none (host operations)


def entry(operation: str, dtype: np.dtype | None = None, components: int | None = None) -> str:
    """Name expression of an operation's entry in sample.cu (``OPERATIONS``, ``GPU_STEPS``): an extern "C"
    name, or a template instance whose component count is fixed at compile time for data (of any value type)
    with one of the template's fixed counts, and read at run time (0) otherwise (the run-time entries keep
    local arrays of MAX_COMPONENTS: kilobytes of stack a thread)."""
    if operation not in ENTRIES:
        raise DeviceError(f"expected an operation among {', '.join(ENTRIES)}, got {operation!r}")
    if not ENTRIES[operation].gpu_entry:
        raise DeviceError(f"{operation} has no entry of its own in sample.cu (the backend runs it on the host)")
    if operation not in TEMPLATES:
        return ENTRIES[operation].gpu_entry
    template, dtypes, fixed = TEMPLATES[operation]
    dt = np.dtype(dtype)
    if dt not in dtypes:
        raise DeviceError(f"expected {operation} data of {', '.join(map(str, dtypes))}, got {dt}")
    if fixed is None:
        return f"vdbflow::{template}<{_CTYPES[dt]}>"
    nc = components if components in fixed else 0
    return f"vdbflow::{template}<{_CTYPES[dt]}, {nc}>"


def entry_name(dtype: np.dtype, components: int) -> str:
    """Name expression of the sampling entry point (values and Jacobians) for this value type."""
    return entry("sample", dtype, components)


def name_expressions() -> tuple[str, ...]:
    """Every template instance the backend may call (each its own NVRTC program)."""
    names = set()
    for op, (_, dtypes, fixed) in TEMPLATES.items():
        for dt in dtypes:
            names |= {entry(op, dt, c) for c in (*(fixed or ()), 0)}
    return tuple(sorted(names))


def arguments(operation: str, values: dict[str, Any]) -> tuple:
    """The launch arguments of ``operation``'s entry, in its parameters' order (operations.h), from ``values``
    (parameter name -> value; other names are ignored): a pointer is a device array, or null for None; a
    scalar is cast to its parameter's C type."""
    params = ENTRIES[operation].gpu_parameters
    missing = [name for _, name in params if name not in values]
    if missing:
        raise DeviceError(f"{operation}'s GPU entry needs {', '.join(missing)}, which the call lacks")
    return tuple(
        (NULL if values[name] is None else values[name]) if ctype.endswith("*") else SCALARS[ctype](values[name])
        for ctype, name in params
    )
