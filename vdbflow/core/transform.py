"""Affine index-to-world transforms: ``world = M @ ijk + t``, any invertible M (rotation, shear,
anisotropic scale)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.errors import VolumeError


def box_to_world(index_to_world: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(2, 3) float64 world box [min, max] of the index box ``[lo, hi]``: its eight corners mapped by the
    (4, 4) ``index_to_world`` matrix (taken as it is, as a file's header records it)."""
    ends = (np.asarray(lo, np.float64), np.asarray(hi, np.float64))
    corners = np.array([[ends[a][0], ends[b][1], ends[c][2]] for a in (0, 1) for b in (0, 1) for c in (0, 1)])
    M = np.asarray(index_to_world, np.float64)
    world = corners @ M[:3, :3].T + M[:3, 3]
    return np.stack([world.min(axis=0), world.max(axis=0)])


class Transform:
    """An invertible affine map from index space (voxel centres at integers) to world space.

    Parameters
    ----------
    matrix : (4, 4) array-like
        Index-to-world matrix; the last row must be ``[0, 0, 0, 1]``.
    """

    __slots__ = ("_matrix", "_inverse")

    def __init__(self, matrix: np.ndarray | Sequence[Sequence[float]]):
        m = np.array(matrix, dtype=np.float64)
        if m.shape != (4, 4):
            raise VolumeError(f"expected a (4, 4) index-to-world matrix, got shape {m.shape}")
        if not np.all(np.isfinite(m)):
            raise VolumeError("expected a finite index-to-world matrix, got NaN or inf entries")
        if not np.array_equal(m[3], [0.0, 0.0, 0.0, 1.0]):
            raise VolumeError(f"expected the last matrix row [0, 0, 0, 1] of an affine map, got {m[3].tolist()}")
        linear = m[:3, :3]
        cond = np.linalg.cond(linear)
        if not np.isfinite(cond) or cond > 1e12:
            raise VolumeError(
                f"expected an invertible index-to-world matrix, got a singular one (condition number {cond:.3g})"
            )
        inverse = np.eye(4)
        inverse[:3, :3] = np.linalg.inv(linear)
        inverse[:3, 3] = -inverse[:3, :3] @ m[:3, 3]
        if not np.all(np.isfinite(inverse)):
            raise VolumeError(
                "expected an index-to-world matrix with a finite inverse, got one whose inverse overflows "
                f"(smallest |entry| {np.abs(linear[linear != 0]).min():.3g}): every world point would map to inf"
            )
        m.setflags(write=False)
        inverse.setflags(write=False)
        self._matrix = m
        self._inverse = inverse

    @classmethod
    def identity(cls) -> Transform:
        return cls(np.eye(4))

    @classmethod
    def from_voxel_size(
        cls, voxel_size: float | Sequence[float] = 1.0, origin: Sequence[float] = (0.0, 0.0, 0.0)
    ) -> Transform:
        """Axis-aligned map: voxel ``(i, j, k)`` at ``origin + (i, j, k) * voxel_size``."""
        size = (
            np.broadcast_to(np.asarray(voxel_size, dtype=np.float64), (3,))
            if np.ndim(voxel_size) == 0
            else np.asarray(voxel_size, dtype=np.float64)
        )
        if size.shape != (3,):
            raise VolumeError(f"expected a scalar voxel size or 3 values, got shape {size.shape}")
        if not np.all(np.isfinite(size)) or np.any(size <= 0):
            raise VolumeError(f"expected positive finite voxel sizes, got {size.tolist()}")
        org = np.asarray(origin, dtype=np.float64)
        if org.shape != (3,):
            raise VolumeError(f"expected an origin of 3 values, got shape {org.shape}")
        m = np.eye(4)
        m[:3, :3] = np.diag(size)
        m[:3, 3] = org
        return cls(m)

    @classmethod
    def coerce(
        cls,
        transform: Transform | np.ndarray | Sequence | None = None,
        voxel_size: float | Sequence[float] | None = None,
        origin: Sequence[float] | None = None,
    ) -> Transform:
        """A Transform from a Transform, a (4, 4) matrix, or a voxel size with an origin."""
        if transform is not None:
            if voxel_size is not None or origin is not None:
                raise VolumeError("expected either transform or voxel_size/origin, got both")
            if isinstance(transform, Transform):
                return transform
            return cls(transform)
        return cls.from_voxel_size(
            1.0 if voxel_size is None else voxel_size, (0.0, 0.0, 0.0) if origin is None else origin
        )

    @property
    def index_to_world(self) -> np.ndarray:
        """(4, 4) float64 index-to-world matrix (read-only)."""
        return self._matrix

    @property
    def world_to_index(self) -> np.ndarray:
        """(4, 4) float64 world-to-index matrix (read-only)."""
        return self._inverse

    def __getitem__(self, key: Any) -> Any:
        """Entries of the index-to-world matrix: ``transform[0, 0]``, ``transform[:3, 3]`` (the origin)."""
        return self._matrix[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``numpy.asarray(transform)``: a copy of the (4, 4) index-to-world matrix."""
        return np.array(self._matrix, dtype=dtype)

    @property
    def voxel_size(self) -> np.ndarray:
        """(3,) world length of one index step along i, j, k (column norms of M)."""
        return np.linalg.norm(self._matrix[:3, :3], axis=0)

    @property
    def is_axis_aligned(self) -> bool:
        linear = self._matrix[:3, :3]
        return bool(np.count_nonzero(linear - np.diag(np.diag(linear))) == 0)

    def apply(self, ijk: np.ndarray) -> np.ndarray:
        """World coordinates (N, 3) float64 of index coordinates (N, 3)."""
        p = np.asarray(ijk, dtype=np.float64)
        return p @ self._matrix[:3, :3].T + self._matrix[:3, 3]

    def apply_finite(self, ijk: np.ndarray) -> np.ndarray:
        """World coordinates (N, 3) float64 of finite index coordinates: :meth:`apply`'s bits, computed
        elementwise for an axis-aligned transform (a product with zeros adds exact zeros to a dot product, so
        ``i * M[a, a] + t[a]`` is its value; -0 comes out +0 as it does there), else :meth:`apply`.  The
        job's random points: no matrix product, whose threads held both cores."""
        if not self.is_axis_aligned:
            return self.apply(ijk)
        p = np.asarray(ijk, dtype=np.float64)
        out = p * np.diag(self._matrix)[:3]
        out += 0.0  # -0 to +0, as the dot product's sum of the zero products gives it
        out += self._matrix[:3, 3]
        return out

    def apply_box(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """(2, 3) float64 world box [min, max] of the index box ``[lo, hi]`` (:func:`box_to_world`)."""
        return box_to_world(self._matrix, lo, hi)

    def apply_inverse(self, xyz: np.ndarray) -> np.ndarray:
        """Index coordinates (N, 3) float64 of world coordinates (N, 3)."""
        p = np.asarray(xyz, dtype=np.float64)
        return p @ self._inverse[:3, :3].T + self._inverse[:3, 3]

    def kernel_parameters(self) -> np.ndarray:
        """(12,) float64 parameters of the kernels' ``PointTransform`` (kernels/vdbflow/sample.h), in
        the order the kernels name them (``vdbflow.core.kernel.TRANSFORM_PARAMETERS``)."""
        return kernel.transform_parameters(self._matrix, self._inverse)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Transform) and np.array_equal(self._matrix, other._matrix)

    def __hash__(self) -> int:
        return hash(self._matrix.tobytes())

    def __repr__(self) -> str:
        rows = np.array2string(self._matrix, precision=6, suppress_small=True, separator=", ")
        return f"Transform({rows})"
