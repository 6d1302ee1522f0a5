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

from vdbflow.core.kernel import MODES, STENCIL_RADIUS
from vdbflow.devices import is_cupy_array, resolve_device, run
from vdbflow.errors import PointsError, SamplingError
from vdbflow.ops.request import SPACES
from vdbflow.ops.results import as_numpy

LEVEL_SET = "level set"  # the grid class (OpenVDB metadata "class", NanoVDB GridClass) of signed distances


def counts_tiles(vol: Any) -> bool:
    """Whether tiles count as data in ``vol``'s stencil checks by default: yes, except for a level set (a
    grid of class ``level set``, as OpenVDB and NanoVDB mark them), whose tiles are the constant inside of
    its narrow band (at minus the background), not data: a gradient there is zero by construction."""
    for obj in (vol, getattr(vol, "template", None), getattr(vol, "topology", None)):
        if getattr(obj, "grid_class", None) == LEVEL_SET:
            return False
    return True


def checked_topology(vol: Any, tiles: bool | None = None) -> Any:
    """The topology whose defined voxels a stencil check of ``vol`` reads: its own, or (``tiles`` False; None:
    :func:`counts_tiles`) its leaves alone, so that a point whose stencil reads a tile is not inside."""
    topology = getattr(vol, "topology", vol)
    return topology if (counts_tiles(vol) if tiles is None else tiles) else topology.without_tiles()


def defined_voxels(topology: Any, ijk: Any) -> Any:
    """(M,) bool: voxels ``ijk`` (M, 3) that are active in a leaf or inside a tile of any level
    (the kernels' ``voxel_defined``, kernels/vdbflow/coverage.h); CuPy voxels are checked on the GPU."""
    ijk = as_numpy(ijk) if not is_cupy_array(ijk) else ijk
    return run("defined_voxels", getattr(topology, "topology", topology), ijk)


def stencil_inside(vol: Any, points: Any, mode: str = "linear", space: str = "world", tiles: bool | None = None) -> Any:
    """(N,) bool: points (N, 3) of a Volume or Topology ``vol`` whose ``mode`` stencil reads only defined voxels (see
    :func:`defined_voxels`); False for non-finite points. ``closest`` reads the nearest voxel (rounding
    half away from zero), ``linear`` the 2^3 corners of the cell, wider schemes ``STENCIL_RADIUS``
    voxels each way.  Decided by the kernels themselves (coverage.h ``stencil_inside_point``): the
    point is mapped to index space and rounded exactly as the sampler does.  ``tiles``: whether voxels of
    tiles count as data (None: yes, except for a level set, :func:`counts_tiles`)."""
    if mode not in STENCIL_RADIUS:
        raise SamplingError(f"expected a mode in {sorted(STENCIL_RADIUS)}, got {mode!r}")
    if space not in SPACES:
        raise SamplingError(f"expected space in {SPACES}, got {space!r}")
    device = resolve_device("auto", points)  # CuPy points are checked on the GPU
    pts = points if device == "cuda" else np.asarray(points, np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise PointsError(f"expected points of shape (N, 3), got {tuple(pts.shape)}")
    return run("stencil_inside", checked_topology(vol, tiles), pts, MODES[mode], space == "world", device=device)


def _inside_block(block: Any, topology: Any, mode: str, space: str) -> Any:
    return stencil_inside(topology, block.reshape(-1, 3), mode, space, tiles=True).reshape(block.shape[:-1])


def stencil_inside_flags(
    vol: Any, points: Any, mode: str = "linear", space: str = "world", tiles: bool | None = None
) -> Any:
    """:func:`stencil_inside` of points (..., 3), shaped (...): NumPy, CuPy, or Dask points (a lazy
    result, one task a block, the topology sent once)."""
    topology = checked_topology(vol, tiles)
    if not hasattr(points, "dask"):
        return _inside_block(points, topology, mode, space)
    import dask
    import dask.array as da

    shared = dask.delayed(topology, name=f"vdbflow-topology-{id(topology):x}-{dask.base.tokenize(topology.leaf_count)}")
    lead = points.ndim - 1
    return da.map_blocks(
        _inside_block,
        points.rechunk({lead: 3}),
        shared,
        mode,
        space,
        drop_axis=lead,
        dtype=bool,
        meta=np.empty((0,) * lead, bool),
    )


class InsideCheck:
    """:func:`stencil_inside` of one topology and mode, for points checked again and again (particles).
    The topology's kernel record is made once."""

    def __init__(self, topology: Any, mode: str, tiles: bool | None = None):
        if mode not in STENCIL_RADIUS:
            raise SamplingError(f"expected a mode in {sorted(STENCIL_RADIUS)}, got {mode!r}")
        self.topology = checked_topology(topology, tiles)
        self.mode = mode
        self.topology.kernel_arrays()  # the topology's kernel record, made once

    def __call__(self, points: np.ndarray, space: str = "world") -> np.ndarray:
        """(N,) bool for points (N, 3) in ``space``."""
        if space not in SPACES:
            raise SamplingError(f"expected space in {SPACES}, got {space!r}")
        pts = np.ascontiguousarray(points, np.float64)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise PointsError(f"expected points of shape (N, 3), got {pts.shape}")
        return run("stencil_inside", self.topology, pts, MODES[self.mode], space == "world", device="cpu")
