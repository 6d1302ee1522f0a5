"""Points on lattices, planes and lines: the generators that the public API (``vdbflow.points.plane``,
``vdbflow.points.line``) and the jobs' lazy point sets (:mod:`vdbflow.jobs.points`) share.

A ``*_block(block, start, stop, ...)`` function gives rows ``[start, stop)`` (N, 3) float64 of its point
set: a Dask chunk of a job's points, or the whole set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.errors import PointsError


def lattice_block(block: int, start: int, stop: int, lo: np.ndarray, hi: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Rows [start, stop) of a lattice of ``shape`` points from ``lo`` to ``hi`` (both included), C order."""
    idx = np.unravel_index(np.arange(start, stop), tuple(shape))
    steps = np.where(shape > 1, (hi - lo) / np.maximum(shape - 1, 1), 0.0)
    return lo + np.stack(idx, axis=1) * steps


def plane_block(
    block: int, start: int, stop: int, origin: np.ndarray, axes: np.ndarray, shape: np.ndarray
) -> np.ndarray:
    """Rows [start, stop) of a plane ``origin + s axes[0] + t axes[1]`` of ``shape`` (ns, nt) points, s-major."""
    s, t = np.unravel_index(np.arange(start, stop), tuple(shape))
    fs = s / max(shape[0] - 1, 1)
    ft = t / max(shape[1] - 1, 1)
    return origin + fs[:, None] * axes[0] + ft[:, None] * axes[1]


def line_block(block: int, start: int, stop: int, a: np.ndarray, b: np.ndarray, count: int) -> np.ndarray:
    """Rows [start, stop) of ``count`` points evenly spaced from ``a`` to ``b`` (both included)."""
    f = np.arange(start, stop) / max(count - 1, 1)
    return a + f[:, None] * (b - a)


def plane(origin: Any, u: Any, v: Any, resolution: tuple[int, int], *, keep_shape: bool = False) -> np.ndarray:
    """(ns * nt, 3) points ``origin + s u + t v``, s and t evenly in [0, 1], s-major; with
    ``keep_shape`` (ns, nt, 3), which ``sample``/``sample_grad`` keep as two dims of the result."""
    shape = np.asarray(resolution, np.int64)
    if shape.shape != (2,) or shape.min() < 1:
        raise PointsError(f"expected a plane resolution (ns, nt) of positive counts, got {resolution}")
    axes = np.asarray([u, v], np.float64)
    if axes.shape != (2, 3) or not np.isfinite(axes).all() or not np.cross(axes[0], axes[1]).any():
        raise PointsError(f"expected u and v to span a plane (two finite, non-parallel 3-vectors), got u={u}, v={v}")
    pts = plane_block(0, 0, int(shape.prod()), np.asarray(origin, np.float64), axes, shape)
    return pts.reshape(int(shape[0]), int(shape[1]), 3) if keep_shape else pts


def line(start: Any, end: Any, count: int) -> np.ndarray:
    """(count, 3) points evenly spaced from ``start`` to ``end`` (both included)."""
    if count < 1:
        raise PointsError(f"expected a positive point count, got {count}")
    return line_block(0, 0, count, np.asarray(start, np.float64), np.asarray(end, np.float64), count)
