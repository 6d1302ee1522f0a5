"""Which voxels hold data, and which points have their whole stencil on them.

Next to the boundary of the active region a stencil reads background for the missing voxels, so
values and gradients there mix data and background (DESIGN.md). :func:`stencil_inside` finds the
points whose result is free of that: every voxel their scheme reads is an active voxel of a leaf or
lies inside a tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core, tree
from .errors import PointsError, SamplingError


def defined_voxels(topology: Any, ijk: np.ndarray) -> np.ndarray:
    """(M,) bool: voxels ``ijk`` (M, 3) that are active in a leaf or inside a tile of any level."""
    ijk = np.asarray(ijk, np.int64)
    out = np.zeros(len(ijk), bool)
    if len(ijk) == 0:
        return out
    tables = topology.tables
    if len(tables[0]):
        slot = _core.table_lookup(tables[0], np.ascontiguousarray((ijk >> 3).astype(np.int32)))
        leaf = slot >= 0
        n = ((ijk[leaf, 0] & 7) << 6) | ((ijk[leaf, 1] & 7) << 3) | (ijk[leaf, 2] & 7)
        words = topology.masks[slot[leaf], n >> 6]
        out[leaf] = ((words >> (n & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)
        out |= slot <= -2  # an 8^3 tile
    for level in (1, 2):
        if len(tables[level]):
            key = np.ascontiguousarray((ijk >> tree.LEVEL_SHIFTS[level]).astype(np.int32))
            out |= _core.table_lookup(tables[level], key) != -1
    return out


def stencil_inside(vol: Any, points: Any, mode: str = "linear", space: str = "world") -> np.ndarray:
    """(N,) bool: points (N, 3) of a Volume or Topology ``vol`` whose ``mode`` stencil reads only defined voxels (see
    :func:`defined_voxels`); False for non-finite points. ``closest`` reads the nearest voxel,
    ``linear`` the 2^3 corners of the cell, wider schemes ``STENCIL_RADIUS`` voxels each way."""
    from .sampling import SPACES, STENCIL_RADIUS

    if mode not in STENCIL_RADIUS:
        raise SamplingError(f"expected a mode in {sorted(STENCIL_RADIUS)}, got {mode!r}")
    if space not in SPACES:
        raise SamplingError(f"expected space in {SPACES}, got {space!r}")
    pts = np.asarray(points, np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise PointsError(f"expected points of shape (N, 3), got {pts.shape}")
    topology = getattr(vol, "topology", vol)
    idx = topology.transform.apply_inverse(pts) if space == "world" else pts
    ok = np.isfinite(idx).all(axis=1) & (np.abs(idx) < 2**30).all(axis=1)
    safe = np.where(ok[:, None], idx, 0.0)
    if mode == "closest":  # the kernels round half away from zero (std::round), exactly
        whole = np.trunc(safe)
        base = (whole + np.where(np.abs(safe - whole) >= 0.5, np.sign(safe), 0.0)).astype(np.int64)
        reach = range(0, 1)
    else:
        r = STENCIL_RADIUS[mode]
        base, reach = np.floor(safe).astype(np.int64), range(1 - r, r + 1)
    inside = ok.copy()
    for di in reach:
        for dj in reach:
            for dk in reach:
                live = np.nonzero(inside)[0]
                if len(live) == 0:
                    return inside
                inside[live] = defined_voxels(topology, base[live] + (di, dj, dk))
    return inside
