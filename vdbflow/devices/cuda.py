"""CUDA backend: kernels/sample.cu compiled at run time by CuPy (NVRTC), its template entry points
instantiated through name expressions; takes a volume's KernelArrays and CuPy arrays.  Device
copies of the kernel arrays and their kernel records (abi.h) are cached in ``KernelArrays.device_cache``."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.core.kernel import KernelArrays, KernelRecord
from vdbflow.errors import DeviceError

THREADS_PER_BLOCK = 256
NULL = np.uint64(0)  # a null device pointer as a kernel argument
# C++ types of the value dtypes, as the name expressions of the templates in sample.cu spell them
_CTYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long long",
    np.dtype(np.uint32): "unsigned int",
}
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
VALUE_DTYPES = tuple(_CTYPES)


def kernel_dir() -> Path:
    """The kernels/ folder: installed inside the package, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / "sample.cu").is_file():
            return candidate
    raise DeviceError(f"expected kernels/sample.cu next to the vdbflow package, found none under {here}")


def _instance(template: str, dtype: np.dtype, components: int, fixed: tuple[int, ...]) -> str:
    """Name expression of a template instance in sample.cu: the component count is fixed at compile
    time for float data with one of ``fixed`` components, and read at run time (0) otherwise."""
    dt = np.dtype(dtype)
    nc = components if dt in FLOAT_DTYPES and components in fixed else 0
    return f"vdbflow::{template}<{_CTYPES[dt]}, {nc}>"


def entry_name(dtype: np.dtype, components: int) -> str:
    """Name expression of the sampling entry point (values and Jacobians) for this value type."""
    return _instance("sample_kernel", dtype, components, (1, 3, 4))


def hessian_entry_name(dtype: np.dtype, components: int) -> str:
    """Name expression of the Hessian entry point (float data only)."""
    return _instance("hessian_kernel", dtype, components, (1, 3))


def vjp_entry_name(dtype: np.dtype, components: int) -> str:
    """Name expression of the reverse-mode entry point (float data only)."""
    return _instance("vjp_kernel", dtype, components, (1, 3, 4))


def advect_entry_name(dtype: np.dtype) -> str:
    """Name expression of the particle entry point (vec3 float data)."""
    return f"vdbflow::advect_kernel<{_CTYPES[np.dtype(dtype)]}>"


def name_expressions() -> tuple[str, ...]:
    """Every template instance the backend may call, compiled together by NVRTC."""
    names = {entry_name(dt, c) for dt in VALUE_DTYPES for c in (1, 3, 4, 0)}
    names |= {advect_entry_name(dt) for dt in FLOAT_DTYPES}
    names |= {hessian_entry_name(dt, c) for dt in FLOAT_DTYPES for c in (1, 3, 0)}
    names |= {vjp_entry_name(dt, c) for dt in FLOAT_DTYPES for c in (1, 3, 4, 0)}
    return tuple(sorted(names))


def nvrtc_options() -> tuple[str, ...]:
    return ("-std=c++17", f"-I{kernel_dir()}")


def cupy_module() -> Any:
    try:
        import cupy
    except ImportError as err:  # pragma: no cover - depends on the machine
        raise DeviceError("device='cuda' needs CuPy: pip install 'vdbflow[gpu]'") from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # pragma: no cover - depends on the machine
        raise DeviceError(f"device='cuda' needs an NVIDIA GPU, CUDA reported: {err}") from err
    if count == 0:  # pragma: no cover
        raise DeviceError("device='cuda' needs an NVIDIA GPU, found none")
    return cupy


@functools.cache
def _raw_module(device_id: int) -> Any:
    cupy = cupy_module()
    source = (kernel_dir() / "sample.cu").read_text()
    return cupy.RawModule(code=source, options=nvrtc_options(), backend="nvrtc", name_expressions=name_expressions())


def _function(name: str) -> Any:
    return _raw_module(cupy_module().cuda.runtime.getDevice()).get_function(name)


def _device_record(k: KernelArrays) -> KernelRecord:
    """The record of ``k`` on the current GPU: device copies of the (checked) host arrays and a record
    pointing into them, made once and kept in ``k.device_cache``."""
    cupy = cupy_module()
    key = ("cuda", cupy.cuda.runtime.getDevice())
    rec = k.device_cache.get(key)
    if rec is None:
        host = kernel.host_record(k).arrays
        dev = dataclasses.replace(
            host,
            tables=tuple(cupy.asarray(t) for t in host.tables),
            masks=cupy.asarray(host.masks),
            prefix=cupy.asarray(host.prefix),
            leaf_offset=cupy.asarray(host.leaf_offset),
            values=cupy.asarray(host.values),
            tile_values=cupy.asarray(host.tile_values),
            background=cupy.asarray(host.background),
            leaf_values_at=None if host.leaf_values_at is None else cupy.asarray(host.leaf_values_at),
            device_cache={},
        )
        rec = k.device_cache.setdefault(key, KernelRecord(dev, kernel.make_record(dev)))  # one, if threads race
    return rec


def _call_record(
    k: KernelArrays, mode: int, points_world: bool, jacobian_world: bool, hessian_world: bool = False
) -> tuple[KernelRecord, Any]:
    """The device record and a device copy of one call's record bytes (kept per option set)."""
    rec = _device_record(k)
    options = (int(mode), bool(points_world), bool(jacobian_world), bool(hessian_world))
    call = rec.arrays.device_cache.get(options)
    if call is None:
        raw = np.frombuffer(rec.call(*options).tobytes(), np.uint8)
        call = rec.arrays.device_cache.setdefault(options, cupy_module().asarray(raw))
    return rec, call


def _blocks(n: int) -> int:
    return min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 65535 * 8)


def sample(
    k: KernelArrays,
    points: Any,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    out_values: Any,
    out_jacobian: Any | None,
    point_order: str = "auto",
) -> None:
    """Fills CuPy ``out_values`` (N, C) and optional ``out_jacobian`` (N, C, 3) for CuPy points.
    (``point_order`` is a CPU hint; the GPU hides latency with its many threads.)"""
    cupy = cupy_module()
    n = points.shape[0]
    if n == 0:
        return
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    rec, call = _call_record(k, mode, points_world, jacobian_world)
    kernel_fn = _function(entry_name(rec.arrays.values.dtype, k.components))
    kernel_fn(
        (_blocks(n),),
        (THREADS_PER_BLOCK,),
        (call, pts, np.int64(n), out_values, NULL if out_jacobian is None else out_jacobian),
    )


def sample_hessian(
    k: KernelArrays,
    points: Any,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    hessian_world: bool,
    out_values: Any,
    out_jacobian: Any | None,
    out_hessian: Any,
) -> None:
    """Fills CuPy ``out_values`` (N, C), ``out_jacobian`` (N, C, 3) and ``out_hessian`` (N, C, 3, 3)."""
    cupy = cupy_module()
    n = points.shape[0]
    if n == 0:
        return
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    rec, call = _call_record(k, mode, points_world, jacobian_world, hessian_world)
    kernel_fn = _function(hessian_entry_name(rec.arrays.values.dtype, k.components))
    kernel_fn(
        (_blocks(n),),
        (THREADS_PER_BLOCK,),
        (call, pts, np.int64(n), out_values, NULL if out_jacobian is None else out_jacobian, out_hessian),
    )


def sample_vjp(
    k: KernelArrays,
    points: Any,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    adj_values: Any,
    adj_jacobian: Any | None,
    accumulator: Any,
    adj_points: Any,
) -> None:
    """Reverse mode on the GPU: float64 atomics into ``accumulator`` (rows, C); ``adj_points`` (N, 3).
    ``k`` holds contiguous values (the accumulator's rows follow them)."""
    if k.leaf_values_at is not None:
        raise DeviceError("expected the kernel arrays of a contiguous volume for reverse mode (Volume.contiguous())")
    cupy = cupy_module()
    n = points.shape[0]
    if n == 0:
        return
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    rec, call = _call_record(k, mode, points_world, jacobian_world)
    kernel_fn = _function(vjp_entry_name(rec.arrays.values.dtype, k.components))
    kernel_fn(
        (_blocks(n),),
        (THREADS_PER_BLOCK,),
        (call, pts, np.int64(n), adj_values, NULL if adj_jacobian is None else adj_jacobian, accumulator, adj_points),
    )


def route(
    points: Any,
    origin: np.ndarray,
    shift: int,
    boundaries: np.ndarray,
    xform: np.ndarray,
    points_world: bool,
    near: np.ndarray | None,
) -> tuple[Any, Any, Any]:
    """Routing on the GPU (``vdbflow_route_partition``, route.h) and a stable grouping by partition
    with CuPy: ``(order, bounds (P + 2,), grouped points)`` as CuPy arrays, as the CPU's ``route_points``."""
    cupy = cupy_module()
    pts = cupy.ascontiguousarray(cupy.asarray(points), dtype=cupy.float64)
    n = pts.shape[0]
    P = len(boundaries) + 1
    part = cupy.empty(max(n, 1), cupy.int32)
    if n:
        table = NULL if near is None or len(near) == 0 else cupy.asarray(near)
        mask = np.uint32(0) if near is None or len(near) == 0 else np.uint32(len(near) - 1)
        bounds_dev = cupy.asarray(boundaries if len(boundaries) else np.zeros(1, np.uint64))
        route_fn = _function("vdbflow_route_partition")
        route_fn(
            (_blocks(n),),
            (THREADS_PER_BLOCK,),
            (
                pts,
                np.int64(n),
                cupy.asarray(xform),
                np.int32(points_world),
                cupy.asarray(origin, cupy.int64),
                np.int32(shift),
                bounds_dev,
                np.int32(P),
                table,
                mask,
                part,
            ),
        )
    group = part[:n] + 1  # 0: background-only, p + 1: partition p
    order = cupy.argsort(group, kind="stable")
    counts = cupy.bincount(group, minlength=P + 1)
    bounds = cupy.concatenate([cupy.zeros(1, cupy.int64), cupy.cumsum(counts)])
    return order.astype(cupy.int64), bounds, pts[order]


def advect(
    k: KernelArrays,
    mode: int,
    x: Any,
    a: np.ndarray,
    b: np.ndarray,
    h: float,
    save_slot: np.ndarray,
    position: Any,
    velocity: Any | None,
    jacobian: Any | None,
    F: Any | None,
    validate_end: bool = True,
) -> tuple[Any, Any, Any]:
    """Particle trajectories on the GPU (kernels/vdbflow/advect.h), as :func:`vdbflow.devices.cpu.advect`
    with CuPy arrays: ``x`` (N, 3) float64 moved in place, NaN-filled outputs; returns CuPy ``status``
    (N,) int8, ``last_step`` (N,) int64 and ``evaluations`` (N,) int32."""
    cupy = cupy_module()
    n = x.shape[0]
    status = cupy.empty(n, cupy.int8)
    last_step = cupy.empty(n, cupy.int64)
    evaluations = cupy.empty(n, cupy.int32)
    if n == 0:
        return status, last_step, evaluations
    rec, call = _call_record(k, mode, True, True)
    A = cupy.asarray(np.ascontiguousarray(a, np.float64))
    B = cupy.asarray(np.ascontiguousarray(b, np.float64))
    slots = cupy.asarray(np.ascontiguousarray(save_slot, np.int64))
    kernel_fn = _function(advect_entry_name(rec.arrays.values.dtype))
    kernel_fn(
        (_blocks(n),),
        (THREADS_PER_BLOCK,),
        (
            call,
            A,
            B,
            np.int32(len(B)),
            np.float64(h),
            slots,
            np.int64(len(save_slot) - 1),
            np.int64(position.shape[1]),
            x,
            np.int64(n),
            position,
            NULL if velocity is None else velocity,
            NULL if jacobian is None else jacobian,
            NULL if F is None else F,
            status,
            last_step,
            evaluations,
            np.int32(validate_end),
        ),
    )
    return status, last_step, evaluations
