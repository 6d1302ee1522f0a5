"""CPU backend: the kernels compiled into ``vdbflow._core`` (OpenMP over points)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow import _core
from vdbflow.core import kernel
from vdbflow.core.kernel import KernelArrays
from vdbflow.errors import DeviceError

# The kernels' CPU target, chosen at import: the widest compiled one this CPU runs (e.g. x86-64-v3 over the
# portable x86-64 baseline), "native" for a VDBFLOW_NATIVE build; VDBFLOW_CPU_TARGET=baseline|<target>
# picks another.  CPU_TARGETS: every compiled target, baseline first.
CPU_TARGET: str = _core.CPU_TARGET
CPU_TARGETS: tuple[str, ...] = tuple(_core.CPU_TARGETS)

ORDERS = {"auto": _core.ORDER_AUTO, "coherent": _core.ORDER_COHERENT, "scattered": _core.ORDER_SCATTERED}


def sample(
    k: KernelArrays,
    points: np.ndarray,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    out_values: np.ndarray,
    out_jacobian: np.ndarray | None,
    point_order: str = "auto",
) -> None:
    """Fills ``out_values`` (N, C) and, when given, ``out_jacobian`` (N, C, 3) for ``points`` (N, 3).

    ``point_order`` picks the loop: ``coherent`` (plain), ``scattered`` (prefetching, streaming
    stores) or ``auto`` (measured on a sample of neighbouring points).  Results are identical.
    """
    rec = kernel.host_record(k)  # held for the call: the record points into its arrays
    _core.sample(
        rec.call(mode, points_world, jacobian_world).tobytes(), points, out_values, out_jacobian, ORDERS[point_order]
    )


def sample_derived(
    k: KernelArrays,
    points: np.ndarray,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    out_values: np.ndarray | None,
    out_jacobian: np.ndarray | None,
    derived: dict[str, np.ndarray],
    point_order: str = "auto",
) -> None:
    """Values (N, 3) and Jacobians (N, 3, 3) where given, and the ``derived`` quantities (name -> buffer),
    of a vec3 float volume in one pass (kernels/vdbflow/derived.h)."""
    rec = kernel.host_record(k)  # held for the call: the record points into its arrays
    _core.sample_derived(
        rec.call(mode, points_world, jacobian_world).tobytes(),
        points,
        out_values,
        out_jacobian,
        kernel.derived_slots(derived),
        ORDERS[point_order],
    )


def sample_reduce(
    k: KernelArrays,
    points: np.ndarray,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    spec: bytes,
    edges: np.ndarray,
    ints: np.ndarray,
    reals: np.ndarray,
    point_order: str = "auto",
) -> None:
    """The statistics of ``spec`` (reduce.h) of the quantities sampled at points (N, 3), added into ``ints``
    (int64 counts) and ``reals`` (float64 sums and moments); no per-point array is made."""
    rec = kernel.host_record(k)  # held for the call: the record points into its arrays
    _core.sample_reduce(
        rec.call(mode, points_world, jacobian_world).tobytes(), points, spec, edges, ints, reals, ORDERS[point_order]
    )


def reduce_features(spec: bytes, features: np.ndarray, edges: np.ndarray, ints: np.ndarray, reals: np.ndarray) -> None:
    """The statistics of ``spec`` of given features (N, channels) float32 or float64, added into ``ints``
    and ``reals`` (the same accumulation as :func:`sample_reduce`)."""
    _core.reduce_features(spec, features, edges, ints, reals)


def merge_partials(
    spec: bytes, edges: np.ndarray, ints: np.ndarray, reals: np.ndarray, ints_b: np.ndarray, reals_b: np.ndarray
) -> None:
    """Partial ``(ints_b, reals_b)`` merged into ``(ints, reals)`` in place, as the kernels merge blocks."""
    _core.merge_partials(spec, edges, ints, reals, ints_b, reals_b)


def derive(jacobian: np.ndarray, velocity: np.ndarray | None, derived: dict[str, np.ndarray]) -> None:
    """The ``derived`` quantities of Jacobians (N, 3, 3) and velocities (N, 3) (helicity) into their buffers."""
    _core.derive(jacobian, velocity, kernel.derived_slots(derived))


def sample_hessian(
    k: KernelArrays,
    points: np.ndarray,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    hessian_world: bool,
    out_values: np.ndarray,
    out_jacobian: np.ndarray | None,
    out_hessian: np.ndarray,
) -> None:
    """Fills ``out_values`` (N, C), ``out_jacobian`` (N, C, 3) when given and ``out_hessian`` (N, C, 3, 3)."""
    rec = kernel.host_record(k)  # held for the call: the record points into its arrays
    _core.sample_hessian(
        rec.call(mode, points_world, jacobian_world, hessian_world).tobytes(),
        points,
        out_values,
        out_jacobian,
        out_hessian,
    )


def sample_vjp(
    k: KernelArrays,
    points: np.ndarray,
    mode: int,
    points_world: bool,
    jacobian_world: bool,
    adj_values: np.ndarray,
    adj_jacobian: np.ndarray | None,
    accumulator: np.ndarray,
    adj_points: np.ndarray,
) -> None:
    """Reverse mode: corner shares added to ``accumulator`` (value rows + tile rows + 1, C) float64 in
    point order (deterministic), point adjoints into ``adj_points`` (N, 3).  ``k`` holds contiguous values."""
    if k.leaf_values_at is not None:
        raise DeviceError("expected the kernel arrays of a contiguous volume for reverse mode (Volume.contiguous())")
    rec = kernel.host_record(k)  # held for the call: the record points into its arrays
    _core.sample_vjp(
        rec.call(mode, points_world, jacobian_world).tobytes(),
        points,
        adj_values,
        adj_jacobian,
        accumulator,
        adj_points,
    )


def grid_gradient(k: KernelArrays, leaf_origins: np.ndarray, scheme: int, jacobian_world: bool) -> np.ndarray:
    """(n_active, C, 3) Jacobians of an fd2/fd4/fd6/fd8 ``scheme`` at every active voxel of the leaves
    at ``leaf_origins`` (L, 3), rows in ``active_voxels()`` order (float data only)."""
    counts = np.bitwise_count(k.masks).sum(axis=1).astype(np.int64)
    first_row = np.cumsum(counts) - counts
    rec = kernel.host_record(k)
    out = np.empty((int(counts.sum()), k.components, 3), rec.arrays.values.dtype)
    record = rec.call(scheme, False, jacobian_world)
    _core.grid_gradient(record.tobytes(), np.ascontiguousarray(leaf_origins, np.int32), first_row, out)
    return out


def advect(
    k: KernelArrays,
    mode: int,
    x: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    h: float,
    save_slot: np.ndarray,
    position: np.ndarray,
    velocity: np.ndarray | None,
    jacobian: np.ndarray | None,
    F: np.ndarray | None,
    validate_end: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Particle trajectories through a steady vec3 float volume (kernels/vdbflow/advect.h).

    ``x`` (N, 3) float64 start positions in world space, moved in place (a stopped particle's stays at
    its last valid position); ``a`` (s, s) and ``b`` (s,) the Runge-Kutta tableau, ``h`` the signed step,
    ``save_slot`` (n + 1,) int64 the output slot of step k or -1.  Fills the NaN-filled outputs
    ``position``/``velocity`` (N, S, 3) and ``jacobian`` (N, S, 3, 3) (any may be None but position);
    ``F`` (N, 3, 3), when given, holds each particle's flow-map gradient at its start (the identity at
    t0) and receives it at x on exit (for a stopped particle, at the start of the step it stopped in:
    the step can resume elsewhere, as a distributed advection's does).  With ``validate_end`` False the
    last position x_n is left unchecked (one step of many: the next call checks it).  Returns
    ``status`` (N,) int8, ``last_step`` (N,) int64 (-1: none valid) and
    ``evaluations`` (N,) int32, the stage points each particle sampled.
    """
    n = len(x)
    status = np.empty(n, np.int8)
    last_step = np.empty(n, np.int64)
    evaluations = np.empty(n, np.int32)
    rec = kernel.host_record(k)  # held for the call: the record points into its arrays
    _core.advect(
        rec.call(mode, True, True).tobytes(),
        x,
        np.ascontiguousarray(a, np.float64),
        np.ascontiguousarray(b, np.float64),
        float(h),
        np.ascontiguousarray(save_slot, np.int64),
        position,
        velocity,
        jacobian,
        F,
        status,
        last_step,
        evaluations,
        validate_end,
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
    x: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    h: float,
    save_slot: np.ndarray,
    position: np.ndarray,
    velocity: np.ndarray | None,
    jacobian: np.ndarray | None,
    F: np.ndarray | None,
    status: np.ndarray,
    last_step: np.ndarray,
    evaluations: np.ndarray,
    validate_end: bool = True,
) -> None:
    """Particle trajectories through a window of a series' steps (kernels/vdbflow/advect.h
    ``advect_series_points``), as :func:`advect` with each stage interpolated in time.

    ``ks`` the window's G grids (one transform), ``topology`` (G,) int32 the first grid sharing each
    grid's topology, ``time_kind`` 2 (linear) or 4 (pchip), ``stage_grid`` (m + 1, s, 4) int32 the grids
    each stage reads (-1: none) and ``stage_coef`` (m + 1, s, 8) their time coefficients
    (:mod:`vdbflow.temporal.series_kernels`), ``first_step`` the series run's step of local step 0.
    ``status`` (N,) int8 (particles not active are skipped), ``last_step`` (N,) int64 (set where a step is
    validated) and ``evaluations`` (N,) int64 (added to) are updated in place.
    """
    recs = [kernel.host_record(k) for k in ks]  # held for the call: the records point into their arrays
    _core.advect_series(
        [rec.call(mode, True, True).tobytes() for rec in recs],
        np.ascontiguousarray(topology, np.int32),
        int(time_kind),
        np.ascontiguousarray(stage_grid, np.int32),
        np.ascontiguousarray(stage_coef, np.float64),
        int(first_step),
        x,
        np.ascontiguousarray(a, np.float64),
        np.ascontiguousarray(b, np.float64),
        float(h),
        np.ascontiguousarray(save_slot, np.int64),
        position,
        velocity,
        jacobian,
        F,
        status,
        last_step,
        evaluations,
        validate_end,
    )


def route(
    points: np.ndarray,
    origin: np.ndarray,
    shift: int,
    boundaries: np.ndarray,
    xform: np.ndarray,
    points_world: bool,
    near: np.ndarray | None,
    period: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points (N, 3) grouped by partition in one pass (route.h ``route_point``): ``order`` (N,) int64
    (input index of each grouped point, stable), ``bounds`` (P + 2,) int64 (group 0: background-only
    points, group p + 1: partition p) and the grouped points (N, 3).  ``period`` (6,): the volume's
    periods (a point goes where its wrapped base cell is), None for none."""
    pts = np.ascontiguousarray(points)
    if pts.dtype not in (np.float32, np.float64):
        pts = pts.astype(np.float64)
    return _core.route_points(
        pts.reshape(-1, 3),
        np.ascontiguousarray(xform, np.float64),
        bool(points_world),
        np.ascontiguousarray(origin, np.int64),
        int(shift),
        np.ascontiguousarray(boundaries, np.uint64),
        np.zeros((0, 4), np.int32) if near is None else near,
        np.zeros(6, np.int64) if period is None else np.ascontiguousarray(period, np.int64),
    )


def stencil_inside(topology: Any, points: np.ndarray, mode: int, points_world: bool) -> np.ndarray:
    """(N,) bool: points (N, 3) whose ``mode`` stencil reads only defined voxels of ``topology``
    (coverage.h ``stencil_inside_point``, through the topology's own kernel record)."""
    rec = kernel.host_record(topology.kernel_arrays())  # held for the call: the record points into its arrays
    return _core.stencil_inside(rec.call(int(mode), points_world).tobytes(), np.ascontiguousarray(points, np.float64))


def defined_voxels(topology: Any, ijk: np.ndarray) -> np.ndarray:
    """(M,) bool: voxels ``ijk`` (M, 3) active in a leaf or inside a tile (coverage.h ``voxel_defined``)."""
    ijk = np.ascontiguousarray(np.asarray(ijk, np.int64).reshape(-1, 3))
    rec = kernel.host_record(topology.kernel_arrays())  # held for the call
    return _core.defined_voxels(rec.call(kernel.MODES["closest"]).tobytes(), ijk)


def scatter_rows(dst: np.ndarray, index: np.ndarray, src: np.ndarray) -> None:
    """``dst[index] = src`` row by row, in parallel (``src`` is cast to ``dst``'s dtype)."""
    _core.scatter_rows(dst, index, np.ascontiguousarray(src, dst.dtype))


def active_voxels_at(origins: np.ndarray, masks: np.ndarray, leaf_end: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """(M, 3) coordinates of the active voxels of tree-order ranks ``ranks`` (M,): leaves at ``origins``
    (L, 3) with ``masks`` (L, 8) and cumulative active counts ``leaf_end`` (L,) (grid.h rank-select)."""
    return _core.active_voxels_at(
        np.ascontiguousarray(origins, np.int32), np.ascontiguousarray(masks, np.uint64), leaf_end, ranks
    )
