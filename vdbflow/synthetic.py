"""Synthetic flow fields with analytic Jacobians, stored sparsely (voxels inside a shell).

Each field maps world points (N, 3) to velocities (N, 3) and Jacobians (N, 3, 3) with
``J[n, c, a] = d u_c / d x_a``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .volume import Volume


@dataclass(frozen=True)
class FlowField:
    """A velocity field with its analytic Jacobian (world units)."""

    name: str
    velocity: Callable[[np.ndarray], np.ndarray]
    jacobian: Callable[[np.ndarray], np.ndarray]


def taylor_green(k: float = 1.0, amplitude: float = 1.0) -> FlowField:
    """Taylor-Green vortex u = A (sin kx cos ky cos kz, -cos kx sin ky cos kz, 0); divergence-free."""

    def velocity(p: np.ndarray) -> np.ndarray:
        sx, sy, sz = np.sin(k * p.T)
        cx, cy, cz = np.cos(k * p.T)
        return amplitude * np.stack([sx * cy * cz, -cx * sy * cz, np.zeros_like(sx)], axis=1)

    def jacobian(p: np.ndarray) -> np.ndarray:
        sx, sy, sz = np.sin(k * p.T)
        cx, cy, cz = np.cos(k * p.T)
        z = np.zeros_like(sx)
        rows = [
            [cx * cy * cz, -sx * sy * cz, -sx * cy * sz],
            [sx * sy * cz, -cx * cy * cz, cx * sy * sz],
            [z, z, z],
        ]
        return amplitude * k * np.stack([np.stack(r, axis=1) for r in rows], axis=1)

    return FlowField("taylor_green", velocity, jacobian)


def abc_flow(a: float = 1.0, b: float = np.sqrt(2.0 / 3.0), c: float = np.sqrt(1.0 / 3.0)) -> FlowField:
    """Arnold-Beltrami-Childress flow u = (A sin z + C cos y, B sin x + A cos z, C sin y + B cos x)."""

    def velocity(p: np.ndarray) -> np.ndarray:
        x, y, z = p.T
        return np.stack([a * np.sin(z) + c * np.cos(y), b * np.sin(x) + a * np.cos(z),
                         c * np.sin(y) + b * np.cos(x)], axis=1)

    def jacobian(p: np.ndarray) -> np.ndarray:
        x, y, z = p.T
        zero = np.zeros_like(x)
        rows = [
            [zero, -c * np.sin(y), a * np.cos(z)],
            [b * np.cos(x), zero, -a * np.sin(z)],
            [-b * np.sin(x), c * np.cos(y), zero],
        ]
        return np.stack([np.stack(r, axis=1) for r in rows], axis=1)

    return FlowField("abc", velocity, jacobian)


def linear_field(matrix: np.ndarray, offset: np.ndarray | None = None) -> FlowField:
    """u = A x + b for a (C, 3) matrix A; its Jacobian is A everywhere."""
    A = np.asarray(matrix, dtype=np.float64)
    b = np.zeros(A.shape[0]) if offset is None else np.asarray(offset, dtype=np.float64)

    def velocity(p: np.ndarray) -> np.ndarray:
        return p @ A.T + b

    def jacobian(p: np.ndarray) -> np.ndarray:
        return np.broadcast_to(A, (len(p),) + A.shape).copy()

    return FlowField("linear", velocity, jacobian)


def shell_voxels(resolution: int, inner: float = 0.35, outer: float = 0.5) -> np.ndarray:
    """(n, 3) int32 voxels of a ``resolution``^3 box whose centres lie in a spherical shell
    (radii as fractions of the box edge) - a genuinely sparse region."""
    axis = np.arange(resolution)
    c = (resolution - 1) / 2.0
    i, j, k = np.meshgrid(axis, axis, axis, indexing="ij")
    r = np.sqrt((i - c) ** 2 + (j - c) ** 2 + (k - c) ** 2) / resolution
    keep = (r >= inner) & (r <= outer)
    return np.stack([i[keep], j[keep], k[keep]], axis=1).astype(np.int32)


def flow_volume(field: FlowField, resolution: int = 64, extent: float = 2 * np.pi,
                dtype: np.dtype | type = np.float32, inner: float = 0.35, outer: float = 0.5) -> Volume:
    """A sparse vec3 volume of ``field`` sampled at voxel centres of a shell inside the cube
    ``[0, extent]^3`` split into ``resolution`` voxels per edge."""
    ijk = shell_voxels(resolution, inner, outer)
    voxel_size = extent / resolution
    world = (ijk + 0.5) * voxel_size
    values = field.velocity(world).astype(dtype)
    vol = Volume.from_voxels(ijk, values, background=0.0, voxel_size=voxel_size,
                             origin=(0.5 * voxel_size,) * 3, name="velocity", component_names=("u", "v", "w"))
    vol.units, vol.length_units = "m/s", "m"  # nondimensional fields, labelled in SI for the plots
    return vol
