"""CUDA backend: the entry points of kernels/sample.cu, built with NVRTC into a cache on disk
(:mod:`vdbflow.devices.cuda_build`: one program per name expression, only those a process calls) and loaded
by CuPy; takes a volume's KernelArrays and CuPy arrays (:mod:`vdbflow.devices.cuda_arrays`: their device copies
and records).

With ``VDBFLOW_CUDA_EMULATE=1`` the array module is :mod:`vdbflow.devices.emulation` and the entries are the
same sources compiled for the host: the device code runs on the CPU, through this very module."""

from __future__ import annotations

import functools
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.devices import checks, cpu, cuda_build, is_cupy_array, nvrtc
from vdbflow.devices.cuda_arrays import call_record, cupy_module, device_record, emulated  # noqa: F401 (re-exported)
from vdbflow.devices.cuda_build import THREADS_PER_BLOCK, kernel_dir  # noqa: F401 (kernel_dir: re-exported)
from vdbflow.devices.cuda_launch import arguments, entry, name_expressions
from vdbflow.devices.interface import implements, point_spaces
from vdbflow.errors import DeviceError

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


MAX_BLOCKS = 65535 * 8  # blocks a launch at most; the entries' grid-stride loops take the rest


def _blocks(n: int) -> int:
    return max(1, min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, MAX_BLOCKS))


def _launch(
    operation: str, threads: int, values: dict, dtype: Any = None, components: int | None = None, blocks: int = 0
) -> None:
    """``operation``'s entry (its instance for ``dtype`` and ``components``) over ``threads`` work items, its
    arguments taken by name from ``values`` (:func:`vdbflow.devices.cuda_launch.arguments`): ``blocks`` blocks
    of ``THREADS_PER_BLOCK``, or at most ``MAX_BLOCKS`` (the entries' grid-stride loops take the rest), on the
    current stream."""
    name = entry(operation, dtype, components)
    _function(name)((blocks or _blocks(threads),), (THREADS_PER_BLOCK,), arguments(operation, values))


def _at_points(operation: str, c: SimpleNamespace, *spaces: bool, **values: Any) -> None:
    """``operation`` at the call's CuPy points (N, 3) (made float64), with the record of its volume ``c.k``,
    mode and ``spaces``; its other GPU parameters from ``values`` and the call's arguments, by name."""
    cupy = cupy_module()
    pts = cupy.ascontiguousarray(cupy.asarray(c.points), dtype=cupy.float64)
    if pts.shape[0]:
        rec, call = call_record(c.k, c.mode, *spaces)
        values = {**vars(c), **values, "abi": call, "points": pts, "n": pts.shape[0]}
        _launch(operation, pts.shape[0], values, rec.arrays.values.dtype, c.k.components)


def _derived_pointers(slots: list[Any]) -> Any:
    """A device array of the kernels' DERIVED_COUNT output pointers (0 where not asked)."""
    ptrs = [0 if a is None else a.data.ptr for a in slots]
    return cupy_module().asarray(np.array(ptrs, np.uint64))


@implements
def sample_derived(c: SimpleNamespace) -> None:
    """CuPy arrays, in one launch."""
    slots = checks.sample_derived(c)[1]
    _at_points("sample_derived", c, c.points_world, c.jacobian_world, derived=_derived_pointers(slots))


REDUCE_CHUNK_BLOCKS = 256  # REDUCE_BLOCKs of points a launch (1M points): the features' scratch on the device


@implements
def sample_reduce(c: SimpleNamespace) -> None:
    """Reduced on the GPU: a million points a ``reduce_kernel`` launch, each block of threads sampling one
    ``REDUCE_BLOCK`` of points and counting through shared memory, then the blocks' partials merged in block
    order on the device (the step ``reduce_merge_blocks``); host ``ints`` and ``reals`` get the result once.
    The CPU's accumulation in its order, block for block: for the same samples, equal counts and floats to
    rounding."""
    cupy = cupy_module()
    s = np.frombuffer(c.spec, kernel.REDUCE_SPEC_DTYPE)[0]
    F, moments = int(s["channels"]), int(s["moments"])
    rec, call = call_record(c.k, c.mode, c.points_world, c.jacobian_world)
    R = np.float64 if np.dtype(rec.arrays.values.dtype) == np.float64 else np.float32
    # the spec's offsets checked by the CPU binding (no points: nothing else runs)
    cpu.reduce_features(c.spec, np.zeros((0, F), R), c.edges, c.ints, c.reals)
    block, chunk = kernel.REDUCE_BLOCK, REDUCE_CHUNK_BLOCKS * kernel.REDUCE_BLOCK
    blocks_max = min(REDUCE_CHUNK_BLOCKS, -(-c.points.shape[0] // block))
    scratch = max(1, blocks_max * len(c.reals))
    v = {"abi": call, "spec": cupy.asarray(np.frombuffer(c.spec, np.uint8)), "edges": cupy.asarray(c.edges)}
    v |= {"n_ints": len(c.ints), "n_reals": len(c.reals), "ints": cupy.zeros(len(c.ints), cupy.uint64)}
    v |= {"reals": cupy.asarray(c.reals), "features": cupy.empty(blocks_max * F * block, R)}
    v["block_moments"] = cupy.empty(max(1, blocks_max * moments * kernel.MOMENT_FIELDS), cupy.float64)
    v |= {"dense": cupy.zeros(scratch, cupy.float64), "mark": cupy.zeros(scratch, cupy.uint8)}
    for first in range(0, c.points.shape[0], chunk):
        v["points"] = cupy.ascontiguousarray(cupy.asarray(c.points[first : first + chunk]), dtype=cupy.float64)
        v["n"] = v["points"].shape[0]
        v["blocks"] = -(-v["n"] // block)
        _launch("sample_reduce", v["n"], v, rec.arrays.values.dtype, c.k.components, blocks=v["blocks"])
        _launch("reduce_merge_blocks", moments + len(c.reals), v)
    c.ints += v["ints"].get().astype(np.int64)
    c.reals[:] = v["reals"].get()


def _on_the_host(operation: str) -> Any:
    """A host row (operations.h OPERATION_HOST), made from the row: the CPU's function, CuPy inputs copied to the
    host; what the row writes (a pointer not to const) must be a host array already, as the partials are."""
    written = {name for ctype, name in kernel.OPERATIONS[operation].cpu_parameters if not ctype.startswith("const")}

    def body(c: SimpleNamespace) -> Any:
        if bad := [name for name, v in vars(c).items() if name in written and is_cupy_array(v)]:
            raise DeviceError(f"{operation} runs on the host and writes {bad[0]}: expected a NumPy array, got CuPy")
        to_host = cupy_module().asnumpy
        host = {n: np.ascontiguousarray(to_host(v)) if is_cupy_array(v) else v for n, v in vars(c).items()}
        return getattr(cpu, operation)(**host)

    body.__name__ = operation
    return implements(body)


for _name in (name for name, row in kernel.OPERATIONS.items() if row.value_types == "host"):
    globals()[_name] = _on_the_host(_name)  # reduce_features, merge_partials


@implements
def derive(c: SimpleNamespace) -> None:
    """CuPy arrays."""
    n, slots = checks.derive(c)
    if n:
        _launch("derive", n, {**vars(c), "n": n, "derived": _derived_pointers(slots)}, c.jacobian.dtype)


@implements
def route(c: SimpleNamespace) -> tuple[Any, Any, Any]:
    """On the GPU (``vdbflow_route_partition``, route.h), then a stable grouping by partition with CuPy: CuPy
    arrays, as the CPU's ``route_points``."""
    cupy = cupy_module()
    pts = cupy.ascontiguousarray(cupy.asarray(c.points), dtype=cupy.float64)
    n, P = pts.shape[0], len(c.boundaries) + 1
    part = cupy.empty(max(n, 1), cupy.int32)
    if n:
        table = None if c.near is None or len(c.near) == 0 else cupy.asarray(c.near)
        frame = {"xform": c.xform, "origin": cupy.asarray(c.origin, cupy.int64), "boundaries": c.boundaries}
        if not len(c.boundaries):
            frame["boundaries"] = np.zeros(1, np.uint64)
        frame["period"] = np.zeros(6, np.int64) if c.period is None else np.asarray(c.period, np.int64)
        values = {**vars(c), **{name: cupy.asarray(a) for name, a in frame.items()}, "points": pts, "n": n}
        values |= {"partitions": P, "near_table": table, "near_mask": 0 if table is None else len(table) - 1}
        _launch("route", n, {**values, "out_partition": part})
    group = part[:n] + 1  # 0: background-only, p + 1: partition p
    order = cupy.argsort(group, kind="stable")
    counts = cupy.bincount(group, minlength=P + 1)
    bounds = cupy.concatenate([cupy.zeros(1, cupy.int64), cupy.cumsum(counts)])
    return order.astype(cupy.int64), bounds, pts[order]


def _particles(operation: str, dtype: Any, values: dict) -> None:
    """A particle entry (advect.h) with the tableau ``a``, ``b`` and the steps' ``save_slot`` of ``values`` on
    the device, and the rest of its parameters taken from ``values`` (the backends name them as the entries)."""
    cupy = cupy_module()
    b, slots = np.ascontiguousarray(values["b"], np.float64), np.ascontiguousarray(values["save_slot"], np.int64)
    tableau = {"a_coef": cupy.asarray(np.ascontiguousarray(values["a"], np.float64)), "b_coef": cupy.asarray(b)}
    steps = {"stages": len(b), "save_slot": cupy.asarray(slots), "steps": len(slots) - 1}
    n = values["x"].shape[0]
    _launch(operation, n, {**values, **tableau, **steps, "slots": values["position"].shape[1], "n": n}, dtype)


@implements
def advect(c: SimpleNamespace) -> tuple[Any, Any, Any]:
    """On the GPU (kernels/vdbflow/advect.h), as :func:`vdbflow.devices.cpu.advect` with CuPy arrays: ``x``
    (N, 3) float64 moved in place, NaN-filled outputs; CuPy ``status`` (N,) int8, ``last_step`` (N,) int64
    and ``evaluations`` (N,) int32."""
    cupy = cupy_module()
    n = c.x.shape[0]
    out = {"status": cupy.empty(n, cupy.int8), "last_step": cupy.empty(n, cupy.int64)}
    out["evaluations"] = cupy.empty(n, cupy.int32)
    if n:
        rec, abi = call_record(c.k, c.mode, True, True)
        _particles("advect", rec.arrays.values.dtype, {**vars(c), **out, "abi": abi})
    return out["status"], out["last_step"], out["evaluations"]


@implements
def advect_series(c: SimpleNamespace) -> None:
    """On the GPU (kernels/vdbflow/advect.h), as :func:`vdbflow.devices.cpu.advect_series` with CuPy arrays
    (``x``, the outputs, ``status``, ``last_step`` and ``evaluations`` int64 updated in place)."""
    if c.x.shape[0] == 0:
        return
    cupy = cupy_module()
    calls = [call_record(k, c.mode, True, True) for k in c.ks]  # the records stay cached with their arrays
    raw = np.concatenate([np.frombuffer(rec.call(c.mode, True, True).tobytes(), np.uint8) for rec, _ in calls])
    window = {
        "abis": cupy.asarray(raw),
        "grids": len(c.ks),
        "topology": cupy.asarray(np.ascontiguousarray(c.topology, np.int32)),
        "stage_grid": cupy.asarray(np.ascontiguousarray(c.stage_grid, np.int32)),
        "stage_coef": cupy.asarray(np.ascontiguousarray(c.stage_coef, np.float64)),
    }
    _particles("advect_series", calls[0][0].arrays.values.dtype, {**vars(c), **window})


def _on_host(operation: str, *moved: str) -> Any:
    """``operation`` for host arrays (as :mod:`vdbflow.devices.cpu` takes them): the arrays named ``moved``
    (None: absent) copied to the GPU, run there, copied back in place; returns host arrays."""

    def body(c: SimpleNamespace) -> Any:
        xp = cupy_module()
        on_gpu = {name: None if getattr(c, name) is None else xp.asarray(getattr(c, name)) for name in moved}
        out = globals()[operation](**{**vars(c), **on_gpu})
        for name, arr in on_gpu.items():
            if arr is not None:
                getattr(c, name)[...] = arr.get()
        return None if out is None else tuple(arr.get() for arr in out)

    body.__name__ = operation
    return implements(body)


host_advect = _on_host("advect", "x", "position", "velocity", "jacobian", "F")
host_advect_series = _on_host(
    "advect_series", "x", "position", "velocity", "jacobian", "F", "status", "last_step", "evaluations"
)


@implements
def stencil_inside(c: SimpleNamespace) -> Any:
    """CuPy arrays (coverage.h), as :func:`vdbflow.devices.cpu.stencil_inside`."""
    out = cupy_module().zeros(len(c.points), bool)
    _at_points(
        "stencil_inside", SimpleNamespace(**vars(c), k=c.topology.kernel_arrays()), c.points_world, False, out=out
    )
    return out


@implements
def defined_voxels(c: SimpleNamespace) -> Any:
    """CuPy arrays (coverage.h), as :func:`vdbflow.devices.cpu.defined_voxels`."""
    cupy = cupy_module()
    voxels = cupy.ascontiguousarray(cupy.asarray(c.ijk).reshape(-1, 3), dtype=cupy.int64)
    n = voxels.shape[0]
    out = cupy.zeros(n, cupy.bool_)
    if n:
        _, call = call_record(c.topology.kernel_arrays(), kernel.MODES["closest"], False, False)
        _launch("defined_voxels", n, {"abi": call, "ijk": voxels, "n": n, "out": out})
    return out


@implements
def grid_gradient(c: SimpleNamespace) -> Any:
    """CuPy Jacobians, rows in ``active_voxels()`` order, as :func:`vdbflow.devices.cpu.grid_gradient` (one
    thread per voxel, found by its rank)."""
    cupy, k, dtype = cupy_module(), c.k, checks.grid_gradient(c)
    leaf_end = np.cumsum(np.bitwise_count(k.masks).sum(axis=1).astype(np.int64))
    rows = int(leaf_end[-1]) if len(leaf_end) else 0
    _, call = call_record(k, c.scheme, False, c.jacobian_world)
    out = cupy.empty((rows, k.components, 3), dtype)
    if rows:
        origins = cupy.asarray(np.ascontiguousarray(c.leaf_origins, np.int32))
        values = {"abi": call, "origins": origins, "leaf_end": cupy.asarray(leaf_end), "leaves": len(leaf_end)}
        _launch("grid_gradient", rows, {**values, "rows": rows, "out_jacobian": out}, dtype, k.components)
    return out


@implements
def scatter_rows(c: SimpleNamespace) -> None:
    """CuPy arrays, rows of any dtype (``_core.scatter_rows``)."""
    cupy, dst = cupy_module(), c.dst
    at = cupy.ascontiguousarray(cupy.asarray(c.index))
    rows = cupy.ascontiguousarray(cupy.asarray(c.src), dtype=dst.dtype)
    m = checks.scatter_rows(dst, at, rows)
    if m == 0:
        return
    at = at.astype(cupy.int64, copy=False)
    row_bytes = dst.dtype.itemsize * int(np.prod(dst.shape[1:], dtype=np.int64))
    _launch("scatter_rows", m * row_bytes, {"dst": dst, "index": at, "src": rows, "m": m, "row_bytes": row_bytes})


@implements
def active_voxels_at(c: SimpleNamespace) -> Any:
    """CuPy int32 voxels (OnIndex order), ``leaf_end`` the running count of active voxels at the end of each
    leaf (``_core.active_voxels_at``)."""
    cupy = cupy_module()
    o = cupy.ascontiguousarray(cupy.asarray(c.origins), dtype=cupy.int32)
    m = cupy.ascontiguousarray(cupy.asarray(c.masks), dtype=cupy.uint64)
    end = cupy.ascontiguousarray(cupy.asarray(c.leaf_end), dtype=cupy.int64)
    r = cupy.ascontiguousarray(cupy.asarray(c.ranks), dtype=cupy.int64)
    n = checks.active_voxels_at(o, m, end, r)
    out = cupy.empty((n, 3), cupy.int32)
    if n:
        values = {"origins": o, "masks": m, "leaf_end": end, "leaves": o.shape[0], "rank": r, "n": n, "ijk": out}
        _launch("active_voxels_at", n, values)
    return out


def _point_operation(operation: str) -> Any:
    """The function of an operation at points made from its row and its interface, CuPy arrays: its checks
    (``checks.<operation>``), then one launch of its entry with the record of the call's mode and spaces."""
    check, spaces = getattr(checks, operation), point_spaces(operation)

    def body(c: SimpleNamespace) -> None:
        check(c)
        _at_points(operation, c, *(getattr(c, space) for space in spaces))

    body.__name__ = body.__qualname__ = operation  # pickled by reference, as a module function
    return implements(body)


# every other operation is one at points (sample, sample_hessian, sample_vjp): a new one needs no code here
for _name in [name for name in kernel.OPERATIONS if name not in globals()]:
    globals()[_name] = _point_operation(_name)
