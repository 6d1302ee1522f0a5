"""Sampling backends: ``cpu`` (the compiled extension) and ``cuda`` (CuPy + NVRTC), both running
the kernels in kernels/."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy

from vdbflow.core.kernel import OPERATIONS
from vdbflow.errors import DeviceError

DEVICES = ("cpu", "cuda", "auto")


def is_cupy_array(x: Any) -> bool:
    """Whether ``x`` is a CuPy array (or an array of CuPy's emulation, ``VDBFLOW_CUDA_EMULATE=1``)."""
    return type(x).__module__.split(".")[0] == "cupy" or getattr(type(x), "__cuda_emulated__", False)


def backend(device: str) -> ModuleType:
    """The backend module of a resolved device: ``vdbflow.devices.cpu`` or ``vdbflow.devices.cuda``
    (imported on first use: the CUDA backend needs CuPy only when called)."""
    if device == "cuda":
        from vdbflow.devices import cuda

        return cuda
    from vdbflow.devices import cpu

    return cpu


def array_module(device: str) -> ModuleType:
    """The array module of a resolved device: NumPy, or CuPy (its emulation under ``VDBFLOW_CUDA_EMULATE=1``);
    a ``DeviceError`` that says why when the GPU's is not there."""
    if device == "cuda":
        from vdbflow.devices import cuda

        return cuda.cupy_module()

    return numpy


def run(operation: str, *args: Any, device: str = "auto", **kwargs: Any) -> Any:
    """Run one operation of the kernels' table (``vdbflow.core.kernel.OPERATIONS``: ``"sample"``,
    ``"derive"``, ``"scatter_rows"``, ...) on a device with the backend's parameters for it
    (:class:`vdbflow.devices.interface.Backend`).  ``device="auto"`` follows the arrays: any CuPy array
    among the arguments runs it on the GPU, else on the CPU.  Code outside this package runs the kernels
    through here (or a sampling request), never through a backend module."""
    if operation not in OPERATIONS:
        raise DeviceError(f"expected an operation of the kernels among {', '.join(OPERATIONS)}, got {operation!r}")
    if device == "auto":
        arrays = (*args, *kwargs.values())
        device = "cuda" if any(is_cupy_array(a) for a in arrays) else "cpu"
    return getattr(backend(resolve_device(device, None)), operation)(*args, **kwargs)


def particle_kernels(device: str) -> tuple[Any, Any]:
    """``(advect, advect_series)`` of a resolved device for host (NumPy) arrays, with the parameters of
    :func:`vdbflow.devices.cpu.advect` and :func:`vdbflow.devices.cpu.advect_series`: the CPU's, or the
    GPU's with the particle arrays copied there and back."""
    if device == "cuda":
        from vdbflow.devices import cuda

        return cuda.host_advect, cuda.host_advect_series
    from vdbflow.devices import cpu

    return cpu.advect, cpu.advect_series


def resolve_device(device: str, points: Any) -> str:
    """``"cpu"`` or ``"cuda"``. ``"auto"`` follows the points: CuPy arrays run on the GPU."""
    if device not in DEVICES:
        raise DeviceError(f"expected device 'cpu', 'cuda' or 'auto', got {device!r}")
    if device == "auto":
        return "cuda" if is_cupy_array(points) else "cpu"
    return device
