"""CPU backend: the kernels compiled into ``vdbflow._core`` (OpenMP over points).  Each function takes the
parameters of its operation in :class:`vdbflow.devices.interface.Backend` (``implements``), NumPy arrays."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from vdbflow import _core
from vdbflow.core import kernel
from vdbflow.devices import checks
from vdbflow.devices.interface import implements, point_spaces

# The kernels' CPU target, chosen at import: the widest compiled one this CPU runs (e.g. x86-64-v3 over the
# portable x86-64 baseline), "native" for a VDBFLOW_NATIVE build; VDBFLOW_CPU_TARGET=baseline|<target>
# picks another.  CPU_TARGETS: every compiled target, baseline first.
CPU_TARGET: str = _core.CPU_TARGET
CPU_TARGETS: tuple[str, ...] = tuple(_core.CPU_TARGETS)

ORDERS = {"auto": _core.ORDER_AUTO, "coherent": _core.ORDER_COHERENT, "scattered": _core.ORDER_SCATTERED}


def _run(operation: str, c: SimpleNamespace, **values: Any) -> None:
    """``operation``'s binding (made from its row of operations.h), its arguments taken by the row's parameter
    names from ``values`` and the call's own arguments ``c``."""
    values = {**vars(c), **values}
    getattr(_core, operation)(*(values[name] for _, name in kernel.OPERATIONS[operation].cpu_parameters))


def _at_points(operation: str, c: SimpleNamespace, n: int, *spaces: bool, **values: Any) -> None:
    """``operation`` at the call's points (N, 3) float32 or float64, with the record of its volume ``c.k``, mode
    and ``spaces`` (held for the call: the record points into the volume's arrays)."""
    rec, record = _record(c, *spaces)
    order = ORDERS[getattr(c, "point_order", "auto")]
    _run(operation, c, k=record, n=n, points_double=c.points.dtype == np.float64, order=order, **values)


def _record(c: SimpleNamespace, *spaces: bool) -> tuple[kernel.KernelRecord, bytes]:
    """The host record of the call's volume ``c.k`` (held by the caller for the call: the record points into
    its arrays) and the call's record bytes for its mode and ``spaces``."""
    rec = kernel.host_record(c.k)
    return rec, rec.call(c.mode, *spaces).tobytes()


@implements
def sample_derived(c: SimpleNamespace) -> None:
    """In one pass (kernels/vdbflow/derived.h)."""
    n, slots = checks.sample_derived(c)
    _at_points("sample_derived", c, n, c.points_world, c.jacobian_world, derived=slots)


@implements
def sample_reduce(c: SimpleNamespace) -> None:
    """(reduce.h) No per-point array is made."""
    rec, record = _record(c, c.points_world, c.jacobian_world)
    _core.sample_reduce(record, c.points, c.spec, c.edges, c.ints, c.reals, ORDERS[c.point_order])


@implements
def reduce_features(c: SimpleNamespace) -> None:
    """Float32 or float64 features, the same accumulation as :func:`sample_reduce`."""
    _core.reduce_features(c.spec, c.features, c.edges, c.ints, c.reals)


@implements
def merge_partials(c: SimpleNamespace) -> None:
    """As the kernels merge blocks."""
    _core.merge_partials(c.spec, c.edges, c.ints, c.reals, c.ints_b, c.reals_b)


@implements
def derive(c: SimpleNamespace) -> None:
    n, slots = checks.derive(c)
    _run("derive", c, jacobian_double=c.jacobian.dtype == np.float64, n=n, derived=slots)


@implements
def grid_gradient(c: SimpleNamespace) -> np.ndarray:
    """Rows in ``active_voxels()`` order (float data only), of the fd2/fd4/fd6/fd8 ``scheme``."""
    k, dtype = c.k, checks.grid_gradient(c)
    counts = np.bitwise_count(k.masks).sum(axis=1).astype(np.int64)
    first_row = np.cumsum(counts) - counts
    rec, record = _record(SimpleNamespace(k=k, mode=c.scheme), False, c.jacobian_world)
    out = np.empty((int(counts.sum()), k.components, 3), dtype)
    origins = np.ascontiguousarray(c.leaf_origins, np.int32)
    _run("grid_gradient", c, k=record, origins=origins, first_row=first_row, leaves=len(first_row), out=out)
    return out


def _tableau(c: SimpleNamespace) -> tuple:
    """The particle bindings' shared arguments: x, the tableau, the step, the steps' slots and the outputs."""
    a, b = np.ascontiguousarray(c.a, np.float64), np.ascontiguousarray(c.b, np.float64)
    slots = np.ascontiguousarray(c.save_slot, np.int64)
    return (c.x, a, b, float(c.h), slots, c.position, c.velocity, c.jacobian, c.F)


@implements
def advect(c: SimpleNamespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kernels/vdbflow/advect.h.  ``x`` (N, 3) float64 start positions in world space, moved in place (a
    stopped particle's stays at its last valid position); ``a`` (s, s) and ``b`` (s,) the Runge-Kutta
    tableau, ``h`` the signed step, ``save_slot`` (n + 1,) int64 the output slot of step k or -1.  Fills the
    NaN-filled outputs ``position``/``velocity`` (N, S, 3) and ``jacobian`` (N, S, 3, 3) (any may be None but
    position); ``F`` (N, 3, 3), when given, holds each particle's flow-map gradient at its start (the identity
    at t0) and receives it at x on exit (for a stopped particle, at the start of the step it stopped in: the
    step can resume elsewhere, as a distributed advection's does).  With ``validate_end`` False the last
    position x_n is left unchecked (one step of many: the next call checks it).  Returns ``status`` (N,)
    int8, ``last_step`` (N,) int64 (-1: none valid) and ``evaluations`` (N,) int32, the stage points each
    particle sampled."""
    n = len(c.x)
    status, last_step, evaluations = np.empty(n, np.int8), np.empty(n, np.int64), np.empty(n, np.int32)
    rec, record = _record(c, True, True)
    _core.advect(record, *_tableau(c), status, last_step, evaluations, c.validate_end)
    return status, last_step, evaluations


@implements
def advect_series(c: SimpleNamespace) -> None:
    """kernels/vdbflow/advect.h ``advect_series_points``, as :func:`advect` with each stage interpolated in
    time.  ``ks`` the window's G grids (one transform), ``topology`` (G,) int32 the first grid sharing each
    grid's topology, ``time_kind`` 2 (linear) or 4 (pchip), ``stage_grid`` (m + 1, s, 4) int32 the grids each
    stage reads (-1: none) and ``stage_coef`` (m + 1, s, 8) their time coefficients
    (:mod:`vdbflow.temporal.series_kernels`), ``first_step`` the series run's step of local step 0.
    ``status`` (N,) int8 (particles not active are skipped), ``last_step`` (N,) int64 (set where a step is
    validated) and ``evaluations`` (N,) int64 (added to) are updated in place."""
    recs = [kernel.host_record(k) for k in c.ks]  # held for the call: the records point into their arrays
    window = (
        [rec.call(c.mode, True, True).tobytes() for rec in recs],
        np.ascontiguousarray(c.topology, np.int32),
        int(c.time_kind),
        np.ascontiguousarray(c.stage_grid, np.int32),
        np.ascontiguousarray(c.stage_coef, np.float64),
        int(c.first_step),
    )
    _core.advect_series(*window, *_tableau(c), c.status, c.last_step, c.evaluations, c.validate_end)


@implements
def route(c: SimpleNamespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In one pass (route.h ``route_point``): ``order`` stable, ``bounds`` int64 (group 0: background-only
    points, group p + 1: partition p)."""
    pts = np.ascontiguousarray(c.points)
    if pts.dtype not in (np.float32, np.float64):
        pts = pts.astype(np.float64)
    return _core.route_points(
        pts.reshape(-1, 3),
        np.ascontiguousarray(c.xform, np.float64),
        bool(c.points_world),
        np.ascontiguousarray(c.origin, np.int64),
        int(c.shift),
        np.ascontiguousarray(c.boundaries, np.uint64),
        np.zeros((0, 4), np.int32) if c.near is None else c.near,
        np.zeros(6, np.int64) if c.period is None else np.ascontiguousarray(c.period, np.int64),
    )


@implements
def stencil_inside(c: SimpleNamespace) -> np.ndarray:
    """coverage.h ``stencil_inside_point``, through the topology's own kernel record."""
    pts = np.ascontiguousarray(c.points, np.float64)
    checks.points(pts)
    out = np.empty(len(pts), bool)
    rec, record = _record(SimpleNamespace(k=c.topology.kernel_arrays(), mode=int(c.mode)), c.points_world)
    _run("stencil_inside", c, k=record, points=pts, n=len(pts), out=out)
    return out


@implements
def defined_voxels(c: SimpleNamespace) -> np.ndarray:
    """coverage.h ``voxel_defined``."""
    ijk = np.ascontiguousarray(np.asarray(c.ijk, np.int64).reshape(-1, 3))
    out = np.empty(len(ijk), bool)
    rec, record = _record(SimpleNamespace(k=c.topology.kernel_arrays(), mode=kernel.MODES["closest"]))
    _run("defined_voxels", c, k=record, ijk=ijk, n=len(ijk), out=out)
    return out


@implements
def scatter_rows(c: SimpleNamespace) -> None:
    """In parallel; ``src`` is cast to ``dst``'s dtype."""
    m = checks.scatter_rows(c.dst, c.index, src := np.ascontiguousarray(c.src, c.dst.dtype))
    row = c.dst.itemsize * int(np.prod(c.dst.shape[1:], dtype=np.int64))
    _run("scatter_rows", c, index=np.ascontiguousarray(c.index, np.int64), src=src, m=m, row=row)


@implements
def active_voxels_at(c: SimpleNamespace) -> np.ndarray:
    """Leaves at ``origins`` (L, 3) with ``masks`` (L, 8) and cumulative active counts ``leaf_end`` (L,)
    (grid.h rank-select)."""
    origins, masks = np.ascontiguousarray(c.origins, np.int32), np.ascontiguousarray(c.masks, np.uint64)
    leaf_end, ranks = np.ascontiguousarray(c.leaf_end, np.int64), np.ascontiguousarray(c.ranks, np.int64)
    n = checks.active_voxels_at(origins, masks, leaf_end, ranks)
    out = np.empty((n, 3), np.int32)
    values = {"origins": origins, "masks": masks, "leaf_end": leaf_end, "leaves": len(origins), "rank": ranks}
    _run("active_voxels_at", c, **values, n=n, ijk=out)
    return out


def _point_operation(operation: str) -> Any:
    """The function of an operation at points made from its row and its interface: its checks
    (``checks.<operation>``, which return N), then its binding with the record of the call's mode and spaces."""
    check, spaces = getattr(checks, operation), point_spaces(operation)

    def body(c: SimpleNamespace) -> None:
        _at_points(operation, c, check(c), *(getattr(c, space) for space in spaces))

    body.__name__ = body.__qualname__ = operation  # pickled by reference, as a module function
    return implements(body)


# every other operation is one at points (sample, sample_hessian, sample_vjp): a new one needs no code here
for _name in [name for name in kernel.OPERATIONS if name not in globals()]:
    globals()[_name] = _point_operation(_name)
