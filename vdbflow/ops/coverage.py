"""Which voxels hold data, and which points have their whole stencil on them.

Next to the boundary of the active region a stencil reads background for the missing voxels, so
values and gradients there mix data and background (docs/design.md). :func:`stencil_inside` finds the
points whose result is free of that: every voxel their scheme reads is an active voxel of a leaf or
lies inside a tile.  Both questions are answered by the kernels (kernels/vdbflow/coverage.h), with
the sampler's own index mapping and rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow import _core
from vdbflow.core import kernel
from vdbflow.core.kernel import MODES, STENCIL_RADIUS, KernelArrays
from vdbflow.errors import PointsError, SamplingError
from vdbflow.ops.sampling import SPACES


def _topology_kernel(topology: Any) -> KernelArrays:
    """The kernel arrays of a topology alone: coverage reads its tables, masks and transform, never
    values (a one-component float32 background stands in for them)."""
    none = np.zeros(0, np.float32)
    return KernelArrays(
        topology.tables,
        topology.masks,
        topology.prefix,
        topology.leaf_offset,
        none,
        none,
        np.zeros(1, np.float32),
        1,
        True,
        None,
        topology.transform.kernel_parameters(),
    )


def defined_voxels(topology: Any, ijk: np.ndarray) -> np.ndarray:
    """(M,) bool: voxels ``ijk`` (M, 3) that are active in a leaf or inside a tile of any level
    (the kernels' ``voxel_defined``, kernels/vdbflow/coverage.h)."""
    ijk = np.ascontiguousarray(np.asarray(ijk, np.int64).reshape(-1, 3))
    rec = kernel.host_record(_topology_kernel(getattr(topology, "topology", topology)))  # held for the call
    return _core.defined_voxels(rec.call(MODES["closest"]).tobytes(), ijk)


def stencil_inside(vol: Any, points: Any, mode: str = "linear", space: str = "world") -> np.ndarray:
    """(N,) bool: points (N, 3) of a Volume or Topology ``vol`` whose ``mode`` stencil reads only defined voxels (see
    :func:`defined_voxels`); False for non-finite points. ``closest`` reads the nearest voxel (rounding
    half away from zero), ``linear`` the 2^3 corners of the cell, wider schemes ``STENCIL_RADIUS``
    voxels each way.  Decided by the kernels themselves (coverage.h ``stencil_inside_point``): the
    point is mapped to index space and rounded exactly as the sampler does."""
    if mode not in STENCIL_RADIUS:
        raise SamplingError(f"expected a mode in {sorted(STENCIL_RADIUS)}, got {mode!r}")
    if space not in SPACES:
        raise SamplingError(f"expected space in {SPACES}, got {space!r}")
    pts = np.asarray(points, np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise PointsError(f"expected points of shape (N, 3), got {pts.shape}")
    rec = kernel.host_record(_topology_kernel(getattr(vol, "topology", vol)))  # held for the call
    return _core.stencil_inside(rec.call(MODES[mode], space == "world").tobytes(), np.ascontiguousarray(pts))


class InsideCheck:
    """:func:`stencil_inside` of one topology and mode, for points checked again and again (particles).
    The topology's kernel arrays and record are built once."""

    def __init__(self, topology: Any, mode: str):
        if mode not in STENCIL_RADIUS:
            raise SamplingError(f"expected a mode in {sorted(STENCIL_RADIUS)}, got {mode!r}")
        self.topology = getattr(topology, "topology", topology)
        self.mode = mode
        self.kernel = _topology_kernel(self.topology)

    def __call__(self, points: np.ndarray, space: str = "world") -> np.ndarray:
        """(N,) bool for points (N, 3) in ``space``."""
        if space not in SPACES:
            raise SamplingError(f"expected space in {SPACES}, got {space!r}")
        pts = np.ascontiguousarray(points, np.float64)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise PointsError(f"expected points of shape (N, 3), got {pts.shape}")
        rec = kernel.host_record(self.kernel)  # built once, kept in self.kernel; held for the call
        return _core.stencil_inside(rec.call(MODES[self.mode], space == "world").tobytes(), pts)
