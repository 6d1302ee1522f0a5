"""CUDA backend: kernels/sample.cu compiled at run time by CuPy (NVRTC); takes and returns CuPy
arrays.  Device copies of a volume's arrays are cached on the volume."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from vdbflow.core.volume import Volume
from vdbflow.errors import DeviceError

THREADS_PER_BLOCK = 256
NULL = np.uint64(0)  # a null device pointer as a kernel argument
_TYPE_TAGS = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
              np.dtype(np.int64): "i64", np.dtype(np.uint32): "u32"}


def kernel_dir() -> Path:
    """The kernels/ folder: installed inside the package, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / "sample.cu").is_file():
            return candidate
    raise DeviceError(f"expected kernels/sample.cu next to the vdbflow package, found none under {here}")


def entry_name(dtype: np.dtype, components: int) -> str:
    """Name of the extern "C" entry point in sample.cu for this value type."""
    tag = _TYPE_TAGS[np.dtype(dtype)]
    if tag in ("f32", "f64") and components in (1, 3, 4):
        return f"vdbflow_sample_{tag}_c{components}"
    return f"vdbflow_sample_{tag}_cn"


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
    return cupy.RawModule(code=source, options=nvrtc_options(), backend="nvrtc")


def _device_arrays(vol: Volume) -> tuple:
    cupy = cupy_module()
    key = ("cuda", cupy.cuda.runtime.getDevice())
    cached = vol.device_cache.get(key)
    if cached is None:
        k = vol.kernel_arrays()
        tables = tuple(cupy.asarray(t) if len(t) else NULL for t in k.tables)
        masks_for = tuple(np.uint32(len(t) - 1) if len(t) else np.uint32(0) for t in k.tables)
        one = lambda a: cupy.asarray(a if a.size else np.zeros(1, a.dtype))  # noqa: E731
        at = NULL if k.leaf_values_at is None else cupy.asarray(k.leaf_values_at)
        cached = (tables, masks_for, one(k.masks), one(k.prefix), one(k.leaf_offset), at, one(k.values),
                  one(k.tile_values), one(k.background))
        vol.device_cache[key] = cached
    return cached


def sample(vol: Volume, points: Any, mode: int, xform: np.ndarray, points_world: bool,
           jacobian_world: bool, out_values: Any, out_jacobian: Any | None, point_order: str = "auto") -> None:
    """Fills CuPy ``out_values`` (N, C) and optional ``out_jacobian`` (N, C, 3) for CuPy points.
    (``point_order`` is a CPU hint; the GPU hides latency with its many threads.)"""
    cupy = cupy_module()
    n = points.shape[0]
    if n == 0:
        return
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    tables, tmasks, masks, prefix, leaf_offset, leaf_values_at, values, tile_values, background = _device_arrays(vol)
    kernel = _raw_module(cupy.cuda.runtime.getDevice()).get_function(entry_name(vol.dtype, vol.components))
    blocks = min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 65535 * 8)
    kernel(
        (blocks,), (THREADS_PER_BLOCK,),
        (tables[0], tmasks[0], tables[1], tmasks[1], tables[2], tmasks[2], masks, prefix, leaf_offset,
         leaf_values_at, values, tile_values, background, np.int32(vol.components), np.int32(vol.index_layout),
         pts, np.int64(n),
         cupy.asarray(xform), np.int32(points_world), np.int32(jacobian_world), np.int32(mode), out_values,
         NULL if out_jacobian is None else out_jacobian),
    )


def hessian_entry_name(dtype: np.dtype, components: int) -> str:
    """Name of the Hessian entry point in sample.cu (float data only)."""
    tag = _TYPE_TAGS[np.dtype(dtype)]
    return f"vdbflow_hessian_{tag}_c{components}" if components in (1, 3) else f"vdbflow_hessian_{tag}_cn"


def sample_hessian(vol: Volume, points: Any, mode: int, xform: np.ndarray, points_world: bool, jacobian_world: bool,
                   hessian_world: bool, out_values: Any, out_jacobian: Any, out_hessian: Any) -> None:
    """Fills CuPy ``out_values`` (N, C), ``out_jacobian`` (N, C, 3) and ``out_hessian`` (N, C, 3, 3)."""
    cupy = cupy_module()
    n = points.shape[0]
    if n == 0:
        return
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    tables, tmasks, masks, prefix, leaf_offset, leaf_values_at, values, tile_values, background = _device_arrays(vol)
    name = hessian_entry_name(vol.dtype, vol.components)
    kernel = _raw_module(cupy.cuda.runtime.getDevice()).get_function(name)
    blocks = min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 65535 * 8)
    kernel(
        (blocks,), (THREADS_PER_BLOCK,),
        (tables[0], tmasks[0], tables[1], tmasks[1], tables[2], tmasks[2], masks, prefix, leaf_offset,
         leaf_values_at, values, tile_values, background, np.int32(vol.components), np.int32(vol.index_layout),
         pts, np.int64(n), cupy.asarray(xform), np.int32(points_world), np.int32(jacobian_world),
         np.int32(hessian_world), np.int32(mode), out_values, out_jacobian, out_hessian),
    )


def vjp_entry_name(dtype: np.dtype, components: int) -> str:
    """Name of the reverse-mode entry point in sample.cu (float data only)."""
    tag = _TYPE_TAGS[np.dtype(dtype)]
    return f"vdbflow_vjp_{tag}_c{components}" if components in (1, 3, 4) else f"vdbflow_vjp_{tag}_cn"


def sample_vjp(vol: Volume, points: Any, mode: int, xform: np.ndarray, points_world: bool, jacobian_world: bool,
               adj_values: Any, adj_jacobian: Any | None, accumulator: Any, adj_points: Any) -> None:
    """Reverse mode on the GPU: float64 atomics into ``accumulator`` (rows, C); ``adj_points`` (N, 3)."""
    cupy = cupy_module()
    n = points.shape[0]
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    vol = vol.contiguous()  # reverse mode accumulates into contiguous rows
    tables, tmasks, masks, prefix, leaf_offset, _, values, tile_values, background = _device_arrays(vol)
    k = vol.kernel_arrays()
    kernel = _raw_module(cupy.cuda.runtime.getDevice()).get_function(vjp_entry_name(vol.dtype, vol.components))
    blocks = min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 65535 * 8)
    kernel(
        (blocks,), (THREADS_PER_BLOCK,),
        (tables[0], tmasks[0], tables[1], tmasks[1], tables[2], tmasks[2], masks, prefix, leaf_offset, values,
         tile_values, background, np.int32(vol.components), np.int32(vol.index_layout), np.int64(len(k.values)),
         np.int64(len(k.tile_values)), pts, np.int64(n), cupy.asarray(xform), np.int32(points_world),
         np.int32(jacobian_world), np.int32(mode), adj_values, NULL if adj_jacobian is None else adj_jacobian,
         accumulator, adj_points),
    )


def route(points: Any, origin: np.ndarray, shift: int, boundaries: np.ndarray, xform: np.ndarray,
          points_world: bool, near: np.ndarray | None) -> tuple[Any, Any, Any]:
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
        kernel = _raw_module(cupy.cuda.runtime.getDevice()).get_function("vdbflow_route_partition")
        blocks = min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, 65535 * 8)
        kernel((blocks,), (THREADS_PER_BLOCK,),
               (pts, np.int64(n), cupy.asarray(xform), np.int32(points_world), cupy.asarray(origin, cupy.int64),
                np.int32(shift), bounds_dev, np.int32(P), table, mask, part))
    group = part[:n] + 1  # 0: background-only, p + 1: partition p
    order = cupy.argsort(group, kind="stable")
    counts = cupy.bincount(group, minlength=P + 1)
    bounds = cupy.concatenate([cupy.zeros(1, cupy.int64), cupy.cumsum(counts)])
    return order.astype(cupy.int64), bounds, pts[order]
