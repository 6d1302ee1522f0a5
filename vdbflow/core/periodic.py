"""Periodic domains: which index axes of a volume wrap, from which voxel and with what period.

Along a periodic axis voxel ``i`` reads voxel ``lo + (i - lo) mod size`` (kernels/vdbflow/grid.h
``Period``): stencils wrap across the faces, a point any number of periods away reads what its image in
the box reads, and the axis has no edge.  Periods are whole voxels, so the wrap is integer arithmetic and
exact.  By default a periodic axis' period is the extent of the active bounding box along it, starting at
its first voxel: a 96³ box of voxels 0 .. 95 has period 96 (voxel 96 is voxel 0 again).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.errors import VolumeError

AXES = "xyz"
WHOLE_COORDINATE = 2.0**52  # beyond it every float64 is a whole number (kernels/vdbflow/sample.h)


@dataclass(frozen=True)
class Periodicity:
    """The periods of index space: axis ``a`` wraps every ``size[a]`` voxels from voxel ``lo[a]``;
    ``size[a] == 0`` where the axis does not wrap.

    Attributes
    ----------
    lo : tuple of 3 int
        First voxel of each axis' period (index space).
    size : tuple of 3 int
        Period of each axis in voxels (0: not periodic).
    """

    lo: tuple[int, int, int]
    size: tuple[int, int, int]

    def __post_init__(self) -> None:
        lo, size = tuple(int(v) for v in self.lo), tuple(int(v) for v in self.size)
        if len(lo) != 3 or len(size) != 3:
            raise VolumeError(f"expected 3 period origins and 3 periods, got {list(self.lo)} and {list(self.size)}")
        if any(s < 0 or s >= 2**31 for s in size) or any(abs(v) >= 2**31 for v in lo):
            raise VolumeError(f"expected periods in [0, 2^31) voxels from int32 origins, got {size} from {lo}")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "size", size)

    @property
    def axes(self) -> str:
        """The periodic axes by name, e.g. ``"xz"`` ('' when none)."""
        return "".join(AXES[a] for a in range(3) if self.size[a] > 0)

    @property
    def any(self) -> bool:
        """Whether some axis wraps."""
        return bool(self.axes)

    def kernel_parameters(self) -> np.ndarray:
        """(6,) int64: ``lo`` then ``size`` (abi.h ``KernelAbi.period``, route.h's period)."""
        return np.array([*self.lo, *self.size], np.int64)

    def wrap_voxels(self, ijk: Any) -> np.ndarray:
        """(N, 3) int64 voxels ``ijk`` (N, 3) wrapped into the periods (unchanged on other axes)."""
        out = np.array(ijk, np.int64).reshape(-1, 3)
        for a in range(3):
            if self.size[a]:
                out[:, a] = self.lo[a] + np.mod(out[:, a] - self.lo[a], self.size[a])
        return out

    def images(self, u: Any) -> np.ndarray:
        """(N, 3) int64 image counts of index coordinates ``u`` (N, 3): how many periods each point lies
        beyond the box, ``floor((u - lo) / size)``; 0 on other axes (and for non-finite coordinates), and
        saturated at +-2^62 for points further out than that many periods."""
        u = np.asarray(u, np.float64).reshape(-1, 3)
        out = np.zeros(u.shape, np.int64)
        for a in range(3):
            if self.size[a]:
                with np.errstate(over="ignore", invalid="ignore"):
                    n = np.floor((u[:, a] - self.lo[a]) / self.size[a])
                out[:, a] = np.clip(np.where(np.isfinite(n), n, 0), -(2.0**62), 2.0**62).astype(np.int64)
        return out

    def wrap_index_points(self, u: Any) -> np.ndarray:
        """(N, 3) float64 index coordinates ``u`` (N, 3) moved by whole periods into ``[lo, lo + size)``; NaN
        and infinities stay as they are.  Exact where a coordinate is a whole number beyond 2^52 (every
        float64 there is): its residue comes from ``fmod``, which is exact, as the kernels wrap it."""
        u = np.array(u, np.float64).reshape(-1, 3)
        for a in range(3):
            P, lo = self.size[a], self.lo[a]
            if not P:
                continue
            col = u[:, a]
            near = np.abs(col) < WHOLE_COORDINATE  # |u - lo| < 2^53: the image count fits, u - n P is exact
            with np.errstate(invalid="ignore"):  # infinities: left as they are below
                n = np.floor((np.where(near, col, 0.0) - lo) / P)
                wrapped = np.where(near, col - n * P, lo + np.fmod(np.fmod(col, P) - math.fmod(lo, P) + 2 * P, P))
            wrapped = np.where(wrapped < lo, wrapped + P, np.where(wrapped >= lo + P, wrapped - P, wrapped))
            u[:, a] = np.where(np.isfinite(col), wrapped, col)
        return u

    def wrap_world_points(self, transform: Any, x: Any) -> np.ndarray:
        """World points ``x`` (..., 3) moved by whole periods so that their index coordinates lie in the box
        (``transform``: the volume's :class:`~vdbflow.core.transform.Transform`); NaN stays NaN."""
        x = np.asarray(x, np.float64)
        flat = x.reshape(-1, 3)
        return transform.apply(self.wrap_index_points(transform.apply_inverse(flat))).reshape(x.shape)

    def wrap_world_points_of(self, x: Any, transform: Any) -> np.ndarray:
        """:meth:`wrap_world_points` with the points first (what ``dask.array.map_blocks`` calls)."""
        return self.wrap_world_points(transform, x)

    def to_json(self) -> dict[str, Any]:
        """``{"axes": "xyz", "lo": [...], "size": [...]}``: what files and attrs store."""
        return {"axes": self.axes, "lo": list(self.lo), "size": list(self.size)}

    @classmethod
    def from_json(cls, data: Any) -> Periodicity | None:
        """The periods :meth:`to_json` wrote (None when no axis wraps)."""
        if not isinstance(data, dict) or not isinstance(data.get("lo"), list) or not isinstance(data.get("size"), list):
            raise VolumeError(f"expected periods as {{'lo': [3 ints], 'size': [3 ints]}}, got {data!r}")
        try:
            p = cls(tuple(data["lo"]), tuple(data["size"]))
        except (TypeError, ValueError) as err:
            raise VolumeError(f"expected periods as {{'lo': [3 ints], 'size': [3 ints]}}, got {data!r}") from err
        return p if p.any else None

    def describe(self) -> str:
        """One line for listings: ``x: 96 voxels from 0, y: ..., z: no``."""
        return ", ".join(
            f"{AXES[a]}: {self.size[a]} voxels from {self.lo[a]}" if self.size[a] else f"{AXES[a]}: no"
            for a in range(3)
        )

    def world_periods(self, index_to_world: np.ndarray) -> np.ndarray:
        """(3, 3) float64: row ``a`` is the world displacement of one period along index axis ``a`` (zero
        rows where the axis does not wrap)."""
        m = np.asarray(index_to_world, np.float64)[:3, :3]
        return (m * np.array(self.size, np.float64)[None, :]).T


def resolve_periodic(spec: Any, index_bbox: np.ndarray | None) -> Periodicity | None:
    """The periods ``spec`` asks for, the active bounding box ``index_bbox`` ((2, 3) inclusive, or None)
    giving the defaults.

    ``spec``: None or False (no period); True (every axis, the box's extent); a string of axis names
    (``"xz"``); a sequence of 3 entries, each a bool (the box's extent) or a positive int (that period in
    voxels, from the box's first voxel); a :class:`Periodicity` or its JSON form (``to_json``).
    """
    if spec is None or spec is False:
        return None
    if isinstance(spec, Periodicity):
        return spec if spec.any else None
    if isinstance(spec, dict):
        return Periodicity.from_json(spec)
    if spec is True:
        entries: Sequence[Any] = (True, True, True)
    elif isinstance(spec, str):
        names = spec.replace(",", "").replace(" ", "").lower()
        if not names or set(names) - set(AXES) or len(set(names)) != len(names):
            raise VolumeError(f"expected periodic axes named among x, y, z (e.g. 'xz'), got {spec!r}")
        entries = tuple(a in names for a in AXES)
    else:
        try:
            entries = tuple(spec)
        except TypeError:
            what = "True, axis names or 3 entries (bool or period)"
            raise VolumeError(f"expected periodic= {what}, got {spec!r}") from None
        if len(entries) != 3:
            raise VolumeError(f"expected 3 periodic entries (x, y, z), got {len(entries)}: {spec!r}")
    return _from_entries(entries, index_bbox, spec)


def _from_entries(entries: Sequence[Any], index_bbox: np.ndarray | None, spec: Any) -> Periodicity | None:
    """Periods from 3 entries (bool: the box's extent; int: that many voxels from the box's first voxel)."""
    lo, size = [0, 0, 0], [0, 0, 0]
    for a, e in enumerate(entries):
        if isinstance(e, (bool, np.bool_)):
            if not e:
                continue
            if index_bbox is None:
                raise VolumeError(
                    f"expected a volume with active voxels to take the period of axis {AXES[a]} from, got an "
                    "empty one: give the period in voxels"
                )
            lo[a] = int(index_bbox[0][a])
            size[a] = int(index_bbox[1][a]) - lo[a] + 1
        elif isinstance(e, (int, np.integer)):
            if e <= 0:
                raise VolumeError(f"expected a positive period in voxels along {AXES[a]}, got {e} in {spec!r}")
            lo[a] = int(index_bbox[0][a]) if index_bbox is not None else 0
            size[a] = int(e)
        else:
            raise VolumeError(f"expected a bool or a period in voxels along {AXES[a]}, got {e!r} in {spec!r}")
    p = Periodicity((lo[0], lo[1], lo[2]), (size[0], size[1], size[2]))
    return p if p.any else None
