"""Synthetic flow fields with analytic Jacobians, stored sparsely (voxels inside a shell).

Each field maps world points (N, 3) to velocities (N, 3) and Jacobians (N, 3, 3) with
``J[n, c, a] = d u_c / d x_a``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vdbflow.errors import VolumeError

if TYPE_CHECKING:
    from vdbflow.core.volume import Volume


@dataclass(frozen=True)
class FlowField:
    """A velocity field with its analytic Jacobian (world units)."""

    name: str
    velocity: Callable[[np.ndarray], np.ndarray]
    jacobian: Callable[[np.ndarray], np.ndarray]
    period: float | None = None  # the field's period along every axis (world units); None: not periodic

    def periodic_over(self, extent: float) -> bool:
        """Whether the cube ``[0, extent]^3`` holds a whole number of the field's periods along each axis."""
        if self.period is None or not extent > 0:
            return False
        turns = extent / self.period
        return round(turns) >= 1 and abs(turns - round(turns)) <= 1e-9 * max(turns, 1.0)


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

    return FlowField("taylor_green", velocity, jacobian, 2 * np.pi / abs(k) if k else None)


def abc_flow(a: float = 1.0, b: float = np.sqrt(2.0 / 3.0), c: float = np.sqrt(1.0 / 3.0)) -> FlowField:
    """Arnold-Beltrami-Childress flow u = (A sin z + C cos y, B sin x + A cos z, C sin y + B cos x)."""

    def velocity(p: np.ndarray) -> np.ndarray:
        x, y, z = p.T
        return np.stack(
            [a * np.sin(z) + c * np.cos(y), b * np.sin(x) + a * np.cos(z), c * np.sin(y) + b * np.cos(x)], axis=1
        )

    def jacobian(p: np.ndarray) -> np.ndarray:
        x, y, z = p.T
        zero = np.zeros_like(x)
        rows = [
            [zero, -c * np.sin(y), a * np.cos(z)],
            [b * np.cos(x), zero, -a * np.sin(z)],
            [-b * np.sin(x), c * np.cos(y), zero],
        ]
        return np.stack([np.stack(r, axis=1) for r in rows], axis=1)

    return FlowField("abc", velocity, jacobian, 2 * np.pi)


def burgers_vortex(
    circulation: float = 2.0, strain: float = 1.0, core_radius: float = 0.5, center: Sequence[float] = (0.0, 0.0, 0.0)
) -> FlowField:
    """Burgers vortex along z through ``center`` (world; by default the origin, so in a job's box
    ``[0, extent]^3`` its axis is the edge x = y = 0: ``center: [pi, pi, pi]`` puts it in the middle of
    the default box): axial strain ``u_z = a (z - c_z)``, radial inflow ``u_r = -a r / 2`` and swirl
    ``u_theta = Gamma / (2 pi r) (1 - exp(-r^2 / delta^2))`` at the distance ``r`` from the axis;
    vorticity ``omega_z = Gamma / (pi delta^2) exp(-r^2 / delta^2)``, divergence 0."""
    G, a, d2 = circulation, strain, core_radius**2
    c = np.asarray(center, dtype=np.float64)
    if c.shape != (3,):
        raise VolumeError(f"expected center [x, y, z] (the vortex's axis is along z through it), got {center!r}")

    def g_and_slope(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """g = u_theta / r and dg/dr / r, finite at r = 0."""
        r2 = x * x + y * y
        s = r2 / d2
        small = s < 1e-8
        safe = np.where(small, 1.0, r2)
        g = np.where(small, G / (2 * np.pi * d2) * (1 - s / 2), -G / (2 * np.pi) * np.expm1(-s) / safe)
        # dg/dr / r = G/(2 pi) [2 e^-s / (d2 r^2) + 2 expm1(-s) / r^4]
        slope = np.where(
            small,
            -G / (2 * np.pi * d2 * d2) * (1 - 2 * s / 3),
            G / np.pi * (np.exp(-s) / (d2 * safe) + np.expm1(-s) / (safe * safe)),
        )
        return g, slope

    def velocity(p: np.ndarray) -> np.ndarray:
        x, y, z = (p - c).T  # less 0.0 by default: the same bits
        g, _ = g_and_slope(x, y)
        return np.stack([-a * x / 2 - g * y, -a * y / 2 + g * x, a * z], axis=1)

    def jacobian(p: np.ndarray) -> np.ndarray:
        x, y, _ = (p - c).T
        g, slope = g_and_slope(x, y)
        gx, gy = slope * x, slope * y
        zero = np.zeros_like(x)
        rows = [[-a / 2 - gx * y, -g - gy * y, zero], [g + gx * x, -a / 2 + gy * x, zero], [zero, zero, zero + a]]
        return np.stack([np.stack(r, axis=1) for r in rows], axis=1)

    return FlowField("burgers", velocity, jacobian)


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
    (radii as fractions of the box edge) - a genuinely sparse region.  Built one i-slab at a time."""
    axis = np.arange(resolution)
    c = (resolution - 1) / 2.0
    j, k = np.meshgrid(axis, axis, indexing="ij")
    rjk2 = (j - c) ** 2 + (k - c) ** 2
    lo2, hi2 = (inner * resolution) ** 2, (outer * resolution) ** 2
    parts = []
    for i in range(resolution):
        r2 = rjk2 + (i - c) ** 2
        keep = (r2 >= lo2) & (r2 <= hi2)
        if keep.any():
            jj, kk = j[keep], k[keep]
            parts.append(np.stack([np.full(len(jj), i), jj, kk], axis=1))
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros((0, 3), np.int32)


def shell_counts(resolution: int, inner: float = 0.35, outer: float = 0.5) -> tuple[int, int]:
    """(active voxels, leaves) of :func:`shell_voxels` ``(resolution, inner, outer)`` - exactly, without making
    the voxels: each (i, j) column's voxels are two runs of k, found by bisection in O(resolution^2 log) time.
    Leaves are the 8^3 blocks of index space (NanoVDB's) that hold at least one of them."""
    # twice the offsets from the centre are integers: 4 r^2 = a_i + a_j + a_k with a = (2 i - (n - 1))^2, and
    # lo2 <= r^2 <= hi2 is exactly ceil(4 lo2) <= 4 r^2 <= floor(4 hi2) (4 x is exact in floating point)
    n = int(resolution)
    lo, hi = math.ceil(4 * (inner * n) ** 2), math.floor(4 * (outer * n) ** 2)
    d = 2 * np.arange(n, dtype=np.int64) - (n - 1)
    half = n // 2  # k >= half: d >= 0 (d = 0 at k = half when n is odd), a increasing; k < half mirrors it
    up = d[half:] ** 2
    blocks = -(-n // 8)
    voxels, leaves = 0, 0
    marks = np.zeros((blocks, blocks + 1), np.int64)  # the current i-block's leaves, a difference array along k
    for i in range(n):
        s = d[i] ** 2 + d**2  # (n,) by j
        first = np.searchsorted(up, lo - s, "left")  # the run on the upper half: k = half + [first, last)
        last = np.searchsorted(up, hi - s, "right")
        run = np.maximum(last - first, 0)
        mirrored = run - ((n % 2 == 1) & (first == 0) & (run > 0))  # the lower half's run, less the centre
        voxels += int(run.sum() + mirrored.sum())
        some = run > 0
        jb = np.arange(n)[some] // 8
        k0, k1 = half + first[some], half + last[some] - 1  # upper run, and its mirror n - 1 - k1 .. n - 1 - k0
        for a, b in ((k0, k1), (n - 1 - k1, n - 1 - k0)):
            np.add.at(marks, (jb, a // 8), 1)
            np.add.at(marks, (jb, b // 8 + 1), -1)
        if i % 8 == 7 or i == n - 1:
            leaves += int(np.count_nonzero(np.cumsum(marks, axis=1)[:, :blocks]))
            marks[:] = 0
    return voxels, leaves


def shell_interior(
    world: np.ndarray, resolution: int, extent: float, inner: float, outer: float, stencil_radius: int
) -> np.ndarray:
    """(N,) bool: points whose whole stencil (``stencil_radius`` voxels each way) lies on active
    voxels of :func:`flow_volume`'s shell - where sampling error is discretisation error alone."""
    h = extent / resolution
    centre = extent / 2.0
    r = np.linalg.norm(np.asarray(world, np.float64) - centre, axis=1) / h  # in voxels
    margin = stencil_radius * np.sqrt(3.0)
    return (r >= inner * resolution + margin) & (r <= outer * resolution - margin)


def flow_volume(
    field: FlowField,
    resolution: int = 64,
    extent: float = 2 * np.pi,
    dtype: np.dtype | type = np.float32,
    inner: float = 0.35,
    outer: float = 0.5,
    periodic: object = None,
) -> Volume:
    """A sparse vec3 volume of ``field`` sampled at voxel centres of a shell inside the cube
    ``[0, extent]^3`` split into ``resolution`` voxels per edge.  ``periodic``: the cube's axes that wrap
    (True, ``"xz"``, ...: :meth:`vdbflow.Volume.with_periodic`, the period ``resolution`` voxels); by default
    every axis where ``extent`` holds a whole number of the field's periods (Taylor-Green, ABC), else none."""
    ijk = shell_voxels(resolution, inner, outer)
    voxel_size = extent / resolution
    world = (ijk + 0.5) * voxel_size
    values = field.velocity(world).astype(dtype)
    from vdbflow.core.volume import Volume  # the fields themselves need no volume: job configs read FIELDS

    vol = Volume.from_voxels(
        ijk,
        values,
        background=0.0,
        voxel_size=voxel_size,
        origin=(0.5 * voxel_size,) * 3,
        name="velocity",
        component_names=("u", "v", "w") if values.shape[1] == 3 else None,
    )
    if periodic is None:
        periodic = field.periodic_over(extent)
    if periodic is not False:  # the cube is the period: voxels 0 .. resolution - 1, whatever the shell holds
        from vdbflow.core.periodic import resolve_periodic

        vol = vol.with_periodic(resolve_periodic(periodic, np.array([[0, 0, 0], [resolution - 1] * 3])))
    vol.units, vol.length_units = "m/s", "m"  # nondimensional fields, labelled in SI for the plots
    return vol


FIELDS: dict[str, Callable[..., FlowField]] = {
    "taylor_green": taylor_green,
    "abc": abc_flow,
    "burgers": burgers_vortex,
    "linear": linear_field,
}


def make_field(name: str, **params: object) -> FlowField:
    """A synthetic field by name (``taylor_green``, ``abc``, ``burgers``, ``linear``) and its parameters."""
    if name not in FIELDS:
        raise VolumeError(f"expected a synthetic field in {sorted(FIELDS)}, got {name!r}")
    takes = list(inspect.signature(FIELDS[name]).parameters)
    unknown = [p for p in params if p not in takes]
    if unknown:
        raise VolumeError(
            f"synthetic field {name!r} takes the params {', '.join(takes)}; got {', '.join(map(repr, unknown))}"
        )
    try:
        return FIELDS[name](**params)
    except TypeError as err:
        raise VolumeError(f"synthetic field {name!r}: {err}") from None
