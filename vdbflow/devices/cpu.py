"""CPU backend: the kernels compiled into ``vdbflow._core`` (OpenMP over points)."""

from __future__ import annotations

import numpy as np

from vdbflow import _core
from vdbflow.core.volume import Volume

# The kernels' CPU target, chosen at import: the widest compiled one this CPU runs (e.g. x86-64-v3 over the
# portable x86-64 baseline), "native" for a VDBFLOW_NATIVE build; VDBFLOW_CPU_TARGET=baseline|<target>
# picks another.  CPU_TARGETS: every compiled target, baseline first.
CPU_TARGET: str = _core.CPU_TARGET
CPU_TARGETS: tuple[str, ...] = tuple(_core.CPU_TARGETS)

ORDERS = {"auto": _core.ORDER_AUTO, "coherent": _core.ORDER_COHERENT, "scattered": _core.ORDER_SCATTERED}


def sample(vol: Volume, points: np.ndarray, mode: int, xform: np.ndarray, points_world: bool,
           jacobian_world: bool, out_values: np.ndarray, out_jacobian: np.ndarray | None,
           point_order: str = "auto") -> None:
    """Fills ``out_values`` (N, C) and, when given, ``out_jacobian`` (N, C, 3) for ``points`` (N, 3).

    ``point_order`` picks the loop: ``coherent`` (plain), ``scattered`` (prefetching, streaming
    stores) or ``auto`` (measured on a sample of neighbouring points).  Results are identical.
    """
    k = vol.kernel_arrays()
    _core.sample(list(k.tables), k.masks, k.prefix, k.leaf_offset, k.values, k.tile_values, k.background,
                 k.components, k.index_layout, points, xform, points_world, jacobian_world, mode,
                 out_values, out_jacobian, ORDERS[point_order], k.leaf_values_at)


def grid_gradient(vol: Volume, scheme: int, xform: np.ndarray, jacobian_world: bool) -> np.ndarray:
    """(n_active, C, 3) Jacobians of an fd2/fd4/fd6 ``scheme`` at every active voxel, rows in
    ``active_voxels()`` order."""
    k = vol.kernel_arrays()
    t = vol.topology
    counts = np.bitwise_count(t.masks).sum(axis=1).astype(np.int64)
    first_row = np.cumsum(counts) - counts
    out = np.empty((int(counts.sum()), vol.components, 3), vol.value_type.jacobian_dtype)
    _core.grid_gradient(list(k.tables), k.masks, k.prefix, k.leaf_offset, k.values, k.tile_values, k.background,
                        k.components, k.index_layout, t.leaf_origins, first_row, xform, jacobian_world, scheme, out,
                        k.leaf_values_at)
    return out
