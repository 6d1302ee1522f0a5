"""CUDA backend: the entry points of kernels/sample.cu, built with NVRTC into a cache on disk
(:mod:`vdbflow.devices.cuda_build`: one program per name expression, only those a process calls) and loaded
by CuPy; takes a volume's KernelArrays and CuPy arrays.  Device copies of the kernel arrays and their kernel
records (abi.h) are cached in ``KernelArrays.device_cache``.

With ``VDBFLOW_CUDA_EMULATE=1`` the array module is :mod:`vdbflow.devices.emulation` and the entries are the
same sources compiled for the host: the device code runs on the CPU, through this very module."""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.core.kernel import OPERATIONS, KernelArrays, KernelRecord
from vdbflow.devices import cuda_build, nvrtc
from vdbflow.devices.cuda_build import THREADS_PER_BLOCK, kernel_dir  # noqa: F401 (kernel_dir: re-exported)
from vdbflow.errors import DeviceError
from vdbflow.version import install_hint

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


# The template entries of sample.cu, from the kernels' table of operations (operations.h): the value types
# each takes and the component counts fixed at compile time (None: no component parameter).  Every name
# expression the backend calls comes from this table.
_VALUE_TYPES = {"any": VALUE_DTYPES, "float": FLOAT_DTYPES}
TEMPLATES: dict[str, tuple[str, tuple[np.dtype, ...], tuple[int, ...] | None]] = {
    op: (gpu, _VALUE_TYPES[types], fixed) for op, (gpu, types, fixed) in OPERATIONS.items() if types in _VALUE_TYPES
}


def entry(operation: str, dtype: np.dtype | None = None, components: int | None = None) -> str:
    """Name expression of an operation's entry in sample.cu (``OPERATIONS``): an extern "C" name, or a
    template instance whose component count is fixed at compile time for data (of any value type) with one
    of the template's fixed counts, and read at run time (0) otherwise (the run-time entries keep local
    arrays of MAX_COMPONENTS: kilobytes of stack a thread)."""
    if operation not in OPERATIONS:
        raise DeviceError(f"expected an operation among {', '.join(OPERATIONS)}, got {operation!r}")
    if not OPERATIONS[operation][0]:
        raise DeviceError(f"{operation} has no entry of its own in sample.cu (the backend composes it)")
    if operation not in TEMPLATES:
        return OPERATIONS[operation][0]
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


def emulated() -> bool:
    """Whether ``VDBFLOW_CUDA_EMULATE=1``: the device code runs on the CPU (:mod:`vdbflow.devices.emulation`)."""
    return os.environ.get("VDBFLOW_CUDA_EMULATE", "0") == "1"


def cupy_module() -> Any:
    """CuPy, checked to see a GPU; or its emulation under ``VDBFLOW_CUDA_EMULATE=1``."""
    if emulated():
        from vdbflow.devices import emulation

        return emulation
    try:
        import cupy
    except ImportError as err:  # pragma: no cover - depends on the machine
        raise DeviceError(
            f"device='cuda' needs CuPy: {install_hint('gpu')} (CUDA 12) or {install_hint('gpu-cuda13')}"
        ) from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # pragma: no cover - depends on the machine
        raise DeviceError(f"device='cuda' needs an NVIDIA GPU, CUDA reported: {err}") from err
    if count == 0:  # pragma: no cover
        raise DeviceError("device='cuda' needs an NVIDIA GPU, found none")
    return cupy


_load_lock = threading.Lock()


@functools.cache
def _loaded(device_id: int, name: str, emulate: bool) -> Any:
    """Entry ``name`` on GPU ``device_id``: built (or found in the cache) and loaded once per process."""
    xp = cupy_module()
    if emulate:
        built = _emulated_library()
    else:  # pragma: no cover - needs a GPU
        compiler = nvrtc.load_for(xp.cuda.runtime.runtimeGetVersion() // 1000)  # 12080: CUDA 12
        capability = int(xp.cuda.Device(device_id).compute_capability)  # "90": 9.0
        arch = cuda_build.choose_arch(capability, compiler)
        built = cuda_build.build_nvrtc(name, arch, compiler)
    return _module(device_id, str(built.path)).get_function(built.lowered[name])


@functools.cache
def _emulated_library() -> cuda_build.Built:
    """Every entry compiled for the host (the emulation), built or found once per process."""
    return cuda_build.emulated_library(name_expressions())


@functools.cache
def _module(device_id: int, path: str) -> Any:
    with _load_lock:
        return cupy_module().RawModule(path=path)


def _function(name: str) -> Any:
    return _loaded(cupy_module().cuda.runtime.getDevice(), name, emulated())


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
        # the uploads ran on the current stream: finish them before another stream's kernels read them
        cupy.cuda.get_current_stream().synchronize()
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
        xp = cupy_module()
        made = xp.asarray(raw)
        xp.cuda.get_current_stream().synchronize()  # as _device_record: other streams will read it
        call = rec.arrays.device_cache.setdefault(options, made)
    return rec, call


MAX_BLOCKS = 65535 * 8  # blocks a launch at most; the entries' grid-stride loops take the rest


def _blocks(n: int) -> int:
    return max(1, min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, MAX_BLOCKS))


def _launch(name: str, threads: int, args: tuple) -> None:
    """Entry ``name`` over ``threads`` work items: at most ``MAX_BLOCKS`` blocks of ``THREADS_PER_BLOCK``
    (the entries' grid-stride loops take the rest), on the current stream."""
    _function(name)((_blocks(threads),), (THREADS_PER_BLOCK,), args)


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
    _launch(
        entry_name(rec.arrays.values.dtype, k.components),
        n,
        (call, pts, np.int64(n), out_values, NULL if out_jacobian is None else out_jacobian),
    )


def _derived_pointers(derived: dict[str, Any]) -> Any:
    """A device array of the kernels' DERIVED_COUNT output pointers (0 where not asked)."""
    ptrs = [0 if a is None else a.data.ptr for a in kernel.derived_slots(derived)]
    return cupy_module().asarray(np.array(ptrs, np.uint64))


def sample_derived(
    k: KernelArrays,
    points: Any,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    out_values: Any | None,
    out_jacobian: Any | None,
    derived: dict[str, Any],
    point_order: str = "auto",
) -> None:
    """CuPy values (N, 3) and Jacobians (N, 3, 3) where given, and the ``derived`` quantities, in one launch."""
    cupy = cupy_module()
    n = points.shape[0]
    if n == 0:
        return
    pts = cupy.ascontiguousarray(points, dtype=cupy.float64)
    rec, call = _call_record(k, mode, points_world, jacobian_world)
    pointers = _derived_pointers(derived)
    _launch(
        entry("sample_derived", rec.arrays.values.dtype),
        n,
        (
            call,
            pts,
            np.int64(n),
            NULL if out_values is None else out_values,
            NULL if out_jacobian is None else out_jacobian,
            pointers,
        ),
    )


REDUCE_CHUNK_BLOCKS = 256  # REDUCE_BLOCKs of points a launch (1M points): the features' scratch on the device


def sample_reduce(
    k: KernelArrays,
    points: Any,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    spec: bytes,
    edges: np.ndarray,
    ints: np.ndarray,
    reals: np.ndarray,
    point_order: str = "auto",
) -> None:
    """Statistics of quantities sampled on the GPU, reduced there: a million points a ``reduce_kernel`` launch,
    each block of threads sampling one ``REDUCE_BLOCK`` of points and counting through shared memory, then
    the blocks' partials merged in block order on the device (``vdbflow_reduce_merge``); host ``ints`` and
    ``reals`` get the result once.  The CPU's accumulation in its order, block for block: for the same
    samples, equal counts and floats to rounding."""
    from vdbflow.devices import cpu

    cupy = cupy_module()
    s = np.frombuffer(spec, kernel.REDUCE_SPEC_DTYPE)[0]
    F = int(s["channels"])
    rec, call = _call_record(k, mode, points_world, jacobian_world)
    R = np.float64 if np.dtype(rec.arrays.values.dtype) == np.float64 else np.float32
    # the spec's offsets checked by the CPU binding (no points: nothing else runs)
    cpu.reduce_features(spec, np.zeros((0, F), R), edges, ints, reals)
    n_ints, n_reals, moments = len(ints), len(reals), int(s["moments"])
    name = entry("sample_reduce", rec.arrays.values.dtype, k.components)
    block, chunk = kernel.REDUCE_BLOCK, REDUCE_CHUNK_BLOCKS * kernel.REDUCE_BLOCK
    spec_d, edges_d = cupy.asarray(np.frombuffer(spec, np.uint8)), cupy.asarray(edges)
    ints_d, reals_d = cupy.zeros(n_ints, cupy.uint64), cupy.asarray(reals)
    blocks_max = min(REDUCE_CHUNK_BLOCKS, -(-points.shape[0] // block))
    features = cupy.empty(blocks_max * F * block, R)
    block_moments = cupy.empty(max(1, blocks_max * moments * kernel.MOMENT_FIELDS), cupy.float64)
    dense, mark = (
        cupy.zeros(max(1, blocks_max * n_reals), cupy.float64),
        cupy.zeros(max(1, blocks_max * n_reals), cupy.uint8),
    )
    sizes = (np.int64(n_ints), np.int64(n_reals))
    for first in range(0, points.shape[0], chunk):
        pts = cupy.ascontiguousarray(cupy.asarray(points[first : first + chunk]), dtype=cupy.float64)
        blocks = -(-pts.shape[0] // block)
        _function(name)(
            (blocks,),
            (THREADS_PER_BLOCK,),
            (call, pts, np.int64(pts.shape[0]), spec_d, edges_d, *sizes, ints_d, features, block_moments, dense, mark),
        )
        _launch(
            entry("merge_partials"),
            moments + n_reals,
            (spec_d, np.int64(blocks), np.int64(n_reals), reals_d, block_moments, dense, mark),
        )
    ints += ints_d.get().astype(np.int64)
    reals[:] = reals_d.get()


def reduce_features(spec: bytes, features: Any, edges: np.ndarray, ints: np.ndarray, reals: np.ndarray) -> None:
    """The statistics of CuPy features (N, channels), reduced on the host (the CPU's accumulation)."""
    from vdbflow.devices import cpu

    cpu.reduce_features(spec, np.ascontiguousarray(cupy_module().asnumpy(features)), edges, ints, reals)


def merge_partials(
    spec: bytes, edges: np.ndarray, ints: np.ndarray, reals: np.ndarray, ints_b: np.ndarray, reals_b: np.ndarray
) -> None:
    """Partials live on the host: the CPU's merge."""
    from vdbflow.devices import cpu

    cpu.merge_partials(spec, edges, ints, reals, ints_b, reals_b)


def derive(jacobian: Any, velocity: Any | None, derived: dict[str, Any]) -> None:
    """The ``derived`` quantities of CuPy Jacobians (N, 3, 3) and velocities (N, 3) into their buffers."""
    n = jacobian.shape[0]
    if n == 0:
        return
    pointers = _derived_pointers(derived)
    _launch(
        entry("derive", jacobian.dtype),
        n,
        (jacobian, NULL if velocity is None else velocity, np.int64(n), pointers),
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
    _launch(
        entry("sample_hessian", rec.arrays.values.dtype, k.components),
        n,
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
    _launch(
        entry("sample_vjp", rec.arrays.values.dtype, k.components),
        n,
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
    period: np.ndarray | None = None,
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
        _launch(
            entry("route"),
            n,
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
                cupy.asarray(np.zeros(6, np.int64) if period is None else np.asarray(period, np.int64)),
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
    _launch(
        entry("advect", rec.arrays.values.dtype),
        n,
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


def advect_series(
    ks: list[KernelArrays],
    topology: np.ndarray,
    time_kind: int,
    stage_grid: np.ndarray,
    stage_coef: np.ndarray,
    first_step: int,
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
    status: Any,
    last_step: Any,
    evaluations: Any,
    validate_end: bool = True,
) -> None:
    """Particle trajectories through a window of a series' steps on the GPU (kernels/vdbflow/advect.h), as
    :func:`vdbflow.devices.cpu.advect_series` with CuPy arrays (``x``, the outputs, ``status``,
    ``last_step`` and ``evaluations`` int64 updated in place)."""
    cupy = cupy_module()
    n = x.shape[0]
    if n == 0:
        return
    calls = [_call_record(k, mode, True, True) for k in ks]  # the records stay cached with their arrays
    raw = np.concatenate([np.frombuffer(rec.call(mode, True, True).tobytes(), np.uint8) for rec, _ in calls])
    records = cupy.asarray(raw)
    b = np.ascontiguousarray(b, np.float64)
    _launch(
        entry("advect_series", calls[0][0].arrays.values.dtype),
        n,
        (
            records,
            np.int32(len(ks)),
            cupy.asarray(np.ascontiguousarray(topology, np.int32)),
            np.int32(time_kind),
            cupy.asarray(np.ascontiguousarray(stage_grid, np.int32)),
            cupy.asarray(np.ascontiguousarray(stage_coef, np.float64)),
            np.int64(first_step),
            cupy.asarray(np.ascontiguousarray(a, np.float64)),
            cupy.asarray(b),
            np.int32(len(b)),
            np.float64(h),
            cupy.asarray(np.ascontiguousarray(save_slot, np.int64)),
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


def _through_device(host: tuple, run: Any) -> tuple:
    """``run(device copies of host)`` with the host arrays (None: absent) copied to the GPU and back in place."""
    xp = cupy_module()
    on_gpu = [None if arr is None else xp.asarray(arr) for arr in host]
    out = run(on_gpu)
    for h, d in zip(host, on_gpu, strict=True):
        if h is not None:
            h[...] = d.get()
    return out


def host_advect(k: KernelArrays, mode: int, x: np.ndarray, a: np.ndarray, b: np.ndarray, h: float,
                save_slot: np.ndarray, position: np.ndarray, velocity: np.ndarray | None,
                jacobian: np.ndarray | None, F: np.ndarray | None,
                validate_end: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`advect` for host arrays (as :func:`vdbflow.devices.cpu.advect` takes them): copied to the GPU,
    integrated there, copied back in place; returns host ``status``, ``last_step`` and ``evaluations``."""
    moved = (x, position, velocity, jacobian, F)
    out = _through_device(moved, lambda d: advect(k, mode, d[0], a, b, h, save_slot, *d[1:], validate_end))
    return tuple(arr.get() for arr in out)


def host_advect_series(ks: list[KernelArrays], topology: np.ndarray, time_kind: int, stage_grid: np.ndarray,
                       stage_coef: np.ndarray, first_step: int, mode: int, x: np.ndarray, a: np.ndarray,
                       b: np.ndarray, h: float, save_slot: np.ndarray, position: np.ndarray,
                       velocity: np.ndarray | None, jacobian: np.ndarray | None, F: np.ndarray | None,
                       status: np.ndarray, last_step: np.ndarray, evaluations: np.ndarray,
                       validate_end: bool = True) -> None:  # fmt: skip
    """:func:`advect_series` for host arrays (as :func:`vdbflow.devices.cpu.advect_series` takes them),
    through the GPU and back in place."""
    lead = (ks, topology, time_kind, stage_grid, stage_coef, first_step, mode)
    moved = (x, position, velocity, jacobian, F, status, last_step, evaluations)
    _through_device(moved, lambda d: advect_series(*lead, d[0], a, b, h, save_slot, *d[1:], validate_end))


# --- coverage, gradient fields and the assembly helpers (the CPU extension's stencil_inside,
# defined_voxels, grid_gradient, scatter_rows and active_voxels_at), from the same headers ---

NODE_SCHEMES = tuple(kernel.MODES[f"fd{r}"] for r in (2, 4, 6, 8))  # what grid_gradient takes


def stencil_inside(topology: Any, points: Any, mode: int, points_world: bool) -> Any:
    """(N,) CuPy bool: whether each point's ``mode`` stencil reads only defined voxels of ``topology``
    (coverage.h), as :func:`vdbflow.devices.cpu.stencil_inside`."""
    k = topology.kernel_arrays()
    cupy = cupy_module()
    pts = cupy.ascontiguousarray(cupy.asarray(points), dtype=cupy.float64)
    n = pts.shape[0]
    out = cupy.zeros(n, cupy.bool_)
    if n:
        _, call = _call_record(k, mode, points_world, False)
        _launch(entry("stencil_inside"), n, (call, pts, np.int64(n), out))
    return out


def defined_voxels(topology: Any, ijk: Any) -> Any:
    """(M,) CuPy bool: whether each voxel ``ijk`` (M, 3) of ``topology`` is active in a leaf or inside a
    tile (coverage.h), as :func:`vdbflow.devices.cpu.defined_voxels`."""
    k = topology.kernel_arrays()
    cupy = cupy_module()
    voxels = cupy.ascontiguousarray(cupy.asarray(ijk).reshape(-1, 3), dtype=cupy.int64)
    n = voxels.shape[0]
    out = cupy.zeros(n, cupy.bool_)
    if n:
        _, call = _call_record(k, kernel.MODES["closest"], False, False)
        _launch(entry("defined_voxels"), n, (call, voxels, np.int64(n), out))
    return out


def grid_gradient(k: KernelArrays, leaf_origins: np.ndarray, scheme: int, jacobian_world: bool) -> Any:
    """(n_active, C, 3) CuPy Jacobians of an fd2/fd4/fd6/fd8 ``scheme`` at every active voxel of the leaves
    at ``leaf_origins`` (L, 3), rows in ``active_voxels()`` order, as :func:`vdbflow.devices.cpu.grid_gradient`
    (one thread per voxel, found by its rank)."""
    if int(scheme) not in NODE_SCHEMES:
        raise DeviceError(f"expected an fd2, fd4, fd6 or fd8 scheme for grid gradients, got mode {scheme}")
    cupy = cupy_module()
    leaf_end = np.cumsum(np.bitwise_count(k.masks).sum(axis=1).astype(np.int64))
    rows = int(leaf_end[-1]) if len(leaf_end) else 0
    rec, call = _call_record(k, scheme, False, jacobian_world)
    dtype = rec.arrays.values.dtype
    if dtype not in FLOAT_DTYPES:
        raise DeviceError(f"expected float32 or float64 values for grid gradients, got {dtype}")
    out = cupy.empty((rows, k.components, 3), dtype)
    if rows:
        origins = cupy.asarray(np.ascontiguousarray(leaf_origins, np.int32))
        _launch(
            entry("grid_gradient", dtype, k.components),
            rows,
            (call, origins, cupy.asarray(leaf_end), np.int64(len(leaf_end)), np.int64(rows), out),
        )
    return out


def scatter_rows(dst: Any, index: Any, src: Any) -> None:
    """``dst[index[r]] = src[r]`` for CuPy arrays, rows of any dtype (``_core.scatter_rows``)."""
    cupy = cupy_module()
    at = cupy.ascontiguousarray(cupy.asarray(index), dtype=cupy.int64)
    rows = cupy.ascontiguousarray(cupy.asarray(src), dtype=dst.dtype)
    m = at.shape[0]
    if not dst.flags.c_contiguous or rows.shape != (m, *dst.shape[1:]):
        raise DeviceError(f"expected a C-contiguous dst and src of shape ({m}, {dst.shape[1:]}), got {rows.shape}")
    if m == 0:
        return
    lo, hi = int(at.min()), int(at.max())
    if lo < 0 or hi >= dst.shape[0]:
        raise IndexError(f"scatter index {lo if lo < 0 else hi} outside [0, {dst.shape[0]})")
    row_bytes = dst.dtype.itemsize * int(np.prod(dst.shape[1:], dtype=np.int64))
    _launch(entry("scatter_rows"), m * row_bytes, (dst, at, rows, np.int64(m), np.int64(row_bytes)))


def active_voxels_at(origins: Any, masks: Any, leaf_end: Any, ranks: Any) -> Any:
    """(n, 3) CuPy int32 voxels of the active voxels of global ranks ``ranks`` (OnIndex order), with
    ``leaf_end`` the running count of active voxels at the end of each leaf (``_core.active_voxels_at``)."""
    cupy = cupy_module()
    o = cupy.ascontiguousarray(cupy.asarray(origins), dtype=cupy.int32)
    m = cupy.ascontiguousarray(cupy.asarray(masks), dtype=cupy.uint64)
    end = cupy.ascontiguousarray(cupy.asarray(leaf_end), dtype=cupy.int64)
    r = cupy.ascontiguousarray(cupy.asarray(ranks), dtype=cupy.int64)
    L, n = o.shape[0], r.shape[0]
    if o.shape != (L, 3) or m.shape != (L, 8) or end.shape != (L,):
        raise DeviceError("expected origins (L, 3), masks (L, 8) and leaf_end (L,)")
    out = cupy.empty((n, 3), cupy.int32)
    if n == 0:
        return out
    total = int(end[-1]) if L else 0
    lo, hi = int(r.min()), int(r.max())
    if lo < 0 or hi >= total:
        raise IndexError(f"voxel rank {lo if lo < 0 else hi} outside [0, {total})")
    _launch(entry("active_voxels_at"), n, (o, m, end, np.int64(L), r, np.int64(n), out))
    return out
