"""CPU backend: the kernels compiled into ``vdbflow._core`` (OpenMP over points)."""

from __future__ import annotations

import numpy as np

from .. import _core
from ..volume import Volume

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
