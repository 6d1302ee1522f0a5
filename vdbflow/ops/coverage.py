"""Which voxels hold data, and which points have their whole stencil on them.

Next to the boundary of the active region a stencil reads background for the missing voxels, so
values and gradients there mix data and background (DESIGN.md). :func:`stencil_inside` finds the
points whose result is free of that: every voxel their scheme reads is an active voxel of a leaf or
lies inside a tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow import _core
from vdbflow.core import tree
from vdbflow.errors import PointsError, SamplingError
from vdbflow.ops.sampling import SPACES, STENCIL_RADIUS


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


class InsideCheck:
    """:func:`stencil_inside` of one topology and mode, for points checked again and
    again (particles): which base cells of a leaf have their whole stencil on active voxels is worked
    out once per leaf, on first touch, and kept as a 512-bit mask; a point then costs one leaf
    lookup.  Points in tiles or outside leaves, and ``closest``, go to ``stencil_inside`` itself."""

    def __init__(self, topology: Any, mode: str):
        if mode not in STENCIL_RADIUS:
            raise SamplingError(f"expected a mode in {sorted(STENCIL_RADIUS)}, got {mode!r}")
        self.topology = getattr(topology, "topology", topology)
        self.mode = mode
        L = self.topology.leaf_count
        self._masks = np.zeros((L, 8), np.uint64)
        self._known = np.zeros(L, bool)
        inverse = self.topology.transform.world_to_index
        # axis-aligned: a scale and an offset per axis, equal to apply_inverse's product with zeros
        self._diagonal = (np.diag(np.diag(inverse[:3, :3])), inverse[:3, 3]) \
            if self.topology.transform.is_axis_aligned else None

    def _to_index(self, pts: np.ndarray) -> np.ndarray:
        if self._diagonal is None:
            return self.topology.transform.apply_inverse(pts)
        scale, offset = self._diagonal
        out = np.empty_like(pts)
        for a in range(3):
            np.multiply(pts[:, a], scale[a, a], out=out[:, a])
            out[:, a] += offset[a]
        return out

    def _learn(self, leaves: np.ndarray) -> None:
        cells = np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), axis=-1).reshape(512, 3)  # bit order
        for at in range(0, len(leaves), 2048):  # at most 1M cells at a time
            part = leaves[at:at + 2048]
            ijk = (self.topology.leaf_origins[part][:, None, :] + cells[None]).reshape(-1, 3).astype(np.float64)
            inside = stencil_inside(self.topology, ijk, self.mode, space="index").reshape(len(part), 8, 64)
            weights = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))
            self._masks[part] = (inside.astype(np.uint64) * weights).sum(axis=2, dtype=np.uint64)
        self._known[leaves] = True

    def __call__(self, points: np.ndarray, space: str = "world") -> np.ndarray:
        pts = np.asarray(points, np.float64)
        if self.mode == "closest" or len(pts) == 0 or len(self.topology.tables[0]) == 0:
            return stencil_inside(self.topology, pts, self.mode, space)
        idx = self._to_index(pts) if space == "world" else pts
        ok = (np.abs(idx) < 2**30).all(axis=1)  # False for NaN too
        if not ok.all():
            idx = np.where(ok[:, None], idx, 0.0)
        base = np.floor(idx).astype(np.int32)  # |idx| < 2^30
        slot = _core.table_lookup(self.topology.tables[0], np.ascontiguousarray(base >> 3))
        in_leaf = ok & (slot >= 0)
        every = bool(in_leaf.all())
        leaves = slot if every else slot[in_leaf]
        unknown = ~self._known[leaves]
        if unknown.any():
            self._learn(np.unique(leaves[unknown]))
        b = (base if every else base[in_leaf]) & 7
        n = (b[:, 0] << 6) | (b[:, 1] << 3) | b[:, 2]
        words = self._masks[leaves, n >> 6]
        bits = ((words >> (n & 63).astype(np.uint64)) & np.uint64(1)).astype(bool)
        if every:
            return bits
        out = np.zeros(len(pts), bool)
        out[in_leaf] = bits
        rest = np.nonzero(ok & (slot < 0))[0]  # tiles of any level, or nothing: checked voxel by voxel
        if len(rest):
            out[rest] = stencil_inside(self.topology, pts[rest], self.mode, space)
        return out
