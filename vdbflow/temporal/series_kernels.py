"""Series runs in the kernels: the windows of a particle run through a :class:`~vdbflow.VolumeSeries`.

A window is a run of consecutive steps whose stages read at most :func:`window_span` consecutive
series steps (an interval's two or four and the next one); one kernel call
(``kernels/vdbflow/advect.h`` ``advect_series_points``) integrates every particle through it, each
stage reading the two (``time="linear"``) or four (``time="pchip"``) steps around its time and
interpolating them as :meth:`VolumeSeries.sample_arrays` does.  Here the stage times, the steps each
stage reads and the coefficients that depend on time only are computed with the same NumPy
expressions as :mod:`vdbflow.temporal.series` and :mod:`vdbflow.temporal.interpolation`, so that
the kernels' results equal the stage-by-stage integration bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core.topology import same_topology

WINDOW_GRIDS = 8  # series steps one call reads at most (advect.h MAX_SERIES_GRIDS)
SERIES_COEFS = 8  # doubles of a stage's time coefficients (advect.h SERIES_COEFS)
PLAN_STEPS = 65536  # steps planned at once
TIME_KINDS = {"linear": 2, "pchip": 4}  # advect.h TimeKind: the steps a stage reads


def window_span(time: str) -> int:
    """The series steps a window reads at most: those of one interval and the next (a step whose stages
    straddle two intervals), so that the values a call reads stay few (in cache) - measured faster than
    wider windows - and never more than ``WINDOW_GRIDS``."""
    return min(WINDOW_GRIDS, TIME_KINDS[time] + 1)


def stage_times(t0: float, t1: float, h: float, n: int, nodes: tuple[float, ...], first: int, stop: int) -> np.ndarray:
    """(stop - first, s) the stage times of steps ``first .. stop - 1`` as the stage-by-stage run computes
    them: ``t_k = t0 + k h`` (``t1`` at k = n), stage ``t_k + c_s h``, clamped to [min, max] of (t0, t1)
    with Python's ``min(max(t, lo), hi)``."""
    k = np.arange(first, stop)
    tk = np.where(k == n, t1, t0 + k.astype(np.float64) * h)
    t = np.empty((len(k), len(nodes)))
    t[:, 0] = tk
    for s in range(1, len(nodes)):
        t[:, s] = tk + nodes[s] * h
    lo, hi = min(t0, t1), max(t0, t1)
    t = np.where(lo > t, lo, t)  # max(t, lo)
    return np.where(hi < t, hi, t)  # min(., hi)


def stage_coefficients(times: np.ndarray, steps: np.ndarray, t: np.ndarray, time: str) -> np.ndarray:
    """(M, SERIES_COEFS) the time coefficients of stages at times ``t`` (M,) reading ``steps`` (M, K) of a
    series at ``times``: linear ``(1 - w, w)``; pchip ``(h0, h1, h2, b00, b10 h1, b01, b11 h1, has_left +
    2 has_right)``, each as ``_interpolate`` and ``pchip_combine`` compute it."""
    coef = np.zeros((len(t), SERIES_COEFS))
    if time == "linear":
        t0, t1 = times[steps[:, 0]], times[steps[:, 1]]
        w = (t - t0) / (t1 - t0)
        coef[:, 0], coef[:, 1] = 1 - w, w
        return coef
    tk = np.where(steps >= 0, times[np.maximum(steps, 0)], np.nan)
    with np.errstate(invalid="ignore"):
        h = np.diff(tk, axis=1)
    s = (t - tk[:, 1]) / (tk[:, 2] - tk[:, 1])
    s2, s3 = s * s, s * s * s
    b00, b10, b01, b11 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s, -2 * s3 + 3 * s2, s3 - s2
    h1 = h[:, 1]
    coef[:, :3] = h
    coef[:, 3], coef[:, 4], coef[:, 5], coef[:, 6] = b00, b10 * h1, b01, b11 * h1
    coef[:, 7] = np.isfinite(tk[:, 0]) + 2 * np.isfinite(tk[:, 3])
    return coef


@dataclass
class Window:
    """Steps ``first .. first + steps`` of a run (the last one checked only when ``validate_end``),
    reading series steps ``low .. low + grids - 1``: the stages' grids (steps + 1, s, 4) int32, local
    to the window, -1 where none) and coefficients (steps + 1, s, SERIES_COEFS)."""

    first: int
    steps: int
    validate_end: bool
    low: int
    grids: int
    stage_grid: np.ndarray
    stage_coef: np.ndarray


class SeriesPlan:
    """The windows of a run from ``t0`` to ``t1`` in ``n`` steps of ``h`` with nodes ``c`` through
    ``series`` interpolated with ``time`` (``"linear"`` or ``"pchip"``)."""

    def __init__(self, series: Any, time: str, t0: float, t1: float, h: float, n: int, nodes: tuple[float, ...]):
        self.series, self.time = series, time
        self.t0, self.t1, self.h, self.n, self.nodes = t0, t1, h, n, nodes

    def windows(self):
        """Yields each :class:`Window` in step order, or an int k: step k does not fit in a window
        (its stages read more than :func:`window_span` steps) and is to be integrated stage by stage."""
        n, stages, K, W = self.n, len(self.nodes), TIME_KINDS[self.time], window_span(self.time)
        for block in range(0, n + 1, PLAN_STEPS):
            stop = min(block + PLAN_STEPS, n + 1)
            t = stage_times(self.t0, self.t1, self.h, n, self.nodes, block, stop)  # (B, s)
            steps = self.series.steps_at(t.reshape(-1), self.time).reshape(len(t), stages, K)
            coef = stage_coefficients(self.series.times, steps.reshape(-1, K), t.reshape(-1), self.time)
            coef = coef.reshape(len(t), stages, SERIES_COEFS)
            used = steps >= 0
            if block + len(t) - 1 == n:  # the end position: its first stage only
                used[-1, 1:] = False
            big = np.iinfo(np.int64).max
            lo = np.where(used, steps, big).min(axis=(1, 2))
            hi = np.where(used, steps, -1).max(axis=(1, 2))
            i = 0
            while i < len(t):
                if hi[i] - lo[i] + 1 > W:
                    yield block + i
                    i += 1
                    continue
                span = np.maximum.accumulate(hi[i:]) - np.minimum.accumulate(lo[i:]) + 1
                j = i + int(np.argmax(span > W)) if (span > W).any() else len(t)
                low, high = int(lo[i:j].min()), int(hi[i:j].max())
                ends = block + j - 1 == n  # the window holds the end position
                m = j - i - 1 if ends else j - i
                local = np.full((m + 1, stages, 4), -1, np.int32)
                rows = slice(i, i + m + 1) if ends else slice(i, j)
                sub = np.where(steps[rows] >= 0, steps[rows] - low, -1)
                local[: sub.shape[0], :, :K] = sub
                table = np.zeros((m + 1, stages, SERIES_COEFS))
                table[: sub.shape[0]] = coef[rows]
                yield Window(block + i, m, ends, low, high - low + 1, local, table)
                i = j


class TopologyGroups:
    """For a window's grids, the first grid sharing each one's topology (the kernels walk the tree
    once for each group); comparisons are remembered for the run."""

    def __init__(self) -> None:
        self._same: dict[tuple[int, int], bool] = {}

    def of(self, low: int, vols: list[Any]) -> np.ndarray:
        groups = np.arange(len(vols), dtype=np.int32)
        for q in range(1, len(vols)):
            for p in range(q):
                if groups[p] != p:
                    continue
                key = (low + p, low + q)
                same = self._same.get(key)
                if same is None:
                    same = self._same[key] = same_topology(vols[p].topology, vols[q].topology)
                if same:
                    groups[q] = p
                    break
        return groups
