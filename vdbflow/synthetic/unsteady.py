"""Synthetic unsteady flow fields with analytic velocities and Jacobians, and a writer of a series of
.nvdb files (one per time step) for tests and demos.

Each field maps world points ``p`` (N, 3) and times ``t`` (a scalar or (N,)) to velocities (N, 3) and
Jacobians (N, 3, 3) with ``J[n, c, a] = d u_c / d x_a``.  Both fields here are z-independent with
``w = 0``: 2-D flows stored as 3-D vec3 volumes a few voxels thick in z.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vdbflow.core.volume import Volume
from vdbflow.errors import VolumeError
from vdbflow.io.time_record import time_record
from vdbflow.synthetic.steady import FlowField


@dataclass(frozen=True)
class UnsteadyField:
    """A time-dependent velocity field with its analytic Jacobian (world units) and the box
    ``(lo, hi)`` (world, (3,) each) it is meant to be written on."""

    name: str
    velocity: Callable[[np.ndarray, np.ndarray | float], np.ndarray]
    jacobian: Callable[[np.ndarray, np.ndarray | float], np.ndarray]
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]

    def at(self, t: float):
        """The steady :class:`vdbflow.synthetic.FlowField` frozen at time ``t``."""
        return FlowField(f"{self.name}@{t:g}", lambda p: self.velocity(p, t), lambda p: self.jacobian(p, t))


def _times(p: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    return np.broadcast_to(np.asarray(t, np.float64), (len(p),))


def _stack_jacobian(rows: list[list[np.ndarray]]) -> np.ndarray:
    return np.stack([np.stack(r, axis=1) for r in rows], axis=1)


def double_gyre(A: float = 0.1, eps: float = 0.25, omega: float = 2 * np.pi / 10) -> UnsteadyField:
    """The double gyre of Shadden, Lekien and Marsden (2005) on [0, 2] x [0, 1]: stream function
    ``psi = A sin(pi f(x, t)) sin(pi y)`` with ``f = a(t) x^2 + b(t) x``, ``a = eps sin(omega t)``,
    ``b = 1 - 2 eps sin(omega t)``; ``u = -d psi/dy``, ``v = d psi/dx``, ``w = 0``, independent of z.
    The box's edges are invariant (no flow through them)."""

    def parts(p: np.ndarray, t: np.ndarray | float):
        x, y = p[:, 0], p[:, 1]
        s = eps * np.sin(omega * _times(p, t))
        a, b = s, 1 - 2 * s
        f, fx, fxx = a * x * x + b * x, 2 * a * x + b, 2 * a
        return np.pi * f, np.pi * y, fx, fxx

    def velocity(p: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        pf, py, fx, _ = parts(np.asarray(p, np.float64), t)
        u = -np.pi * A * np.sin(pf) * np.cos(py)
        v = np.pi * A * np.cos(pf) * np.sin(py) * fx
        return np.stack([u, v, np.zeros_like(u)], axis=1)

    def jacobian(p: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        pf, py, fx, fxx = parts(np.asarray(p, np.float64), t)
        sf, cf, sy, cy = np.sin(pf), np.cos(pf), np.sin(py), np.cos(py)
        k = np.pi * np.pi * A
        z = np.zeros_like(sf)
        rows = [
            [-k * cf * fx * cy, k * sf * sy, z],
            [-k * sf * fx * fx * sy + np.pi * A * cf * fxx * sy, k * cf * fx * cy, z],
            [z, z, z],
        ]
        return _stack_jacobian(rows)

    return UnsteadyField("double_gyre", velocity, jacobian, (0.0, 0.0, 0.0), (2.0, 1.0, 0.0))


def decaying_taylor_green(k: float = 1.0, amplitude: float = 1.0, nu: float = 0.1) -> UnsteadyField:
    """The 2-D Taylor-Green vortex ``u = A e^{-2 nu k^2 t} (sin kx cos ky, -cos kx sin ky, 0)``: an
    exact solution of the incompressible Navier-Stokes equations (kinematic viscosity ``nu``) whose
    velocity decays at the rate ``2 nu k^2``; divergence-free, independent of z.  Box: [0, 2 pi / k]^2,
    whose cell edges (multiples of pi / k) are invariant."""

    def velocity(p: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        p = np.asarray(p, np.float64)
        g = amplitude * np.exp(-2 * nu * k * k * _times(p, t))
        sx, sy = np.sin(k * p[:, 0]), np.sin(k * p[:, 1])
        cx, cy = np.cos(k * p[:, 0]), np.cos(k * p[:, 1])
        return np.stack([g * sx * cy, -g * cx * sy, np.zeros_like(sx)], axis=1)

    def jacobian(p: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        p = np.asarray(p, np.float64)
        g = amplitude * k * np.exp(-2 * nu * k * k * _times(p, t))
        sx, sy = np.sin(k * p[:, 0]), np.sin(k * p[:, 1])
        cx, cy = np.cos(k * p[:, 0]), np.cos(k * p[:, 1])
        z = np.zeros_like(sx)
        rows = [[g * cx * cy, -g * sx * sy, z], [g * sx * sy, -g * cx * cy, z], [z, z, z]]
        return _stack_jacobian(rows)

    edge = 2 * np.pi / k
    return UnsteadyField("taylor_green_decaying", velocity, jacobian, (0.0, 0.0, 0.0), (edge, edge, 0.0))


def field_volume(
    field: UnsteadyField,
    t: float,
    voxel_size: float,
    *,
    pad: int = 4,
    dtype: np.dtype | type = np.float64,
    lo: Sequence[float] | None = None,
    hi: Sequence[float] | None = None,
) -> Volume:
    """A dense vec3 volume of ``field`` at time ``t``: voxel centres on the lattice ``lo + i h``
    covering ``[lo, hi]`` (default the field's box) plus ``pad`` voxels each way, all active, so
    that stencils of up to ``pad`` voxels at the box's edges read data.  Its time is stored in a
    ``vdbflow.time`` blind data record (read by :func:`vdbflow.open_series`)."""

    lo_ = np.asarray(field.lo if lo is None else lo, np.float64)
    hi_ = np.asarray(field.hi if hi is None else hi, np.float64)
    h = float(voxel_size)
    if not (h > 0 and np.all(hi_ >= lo_)):
        raise VolumeError(f"expected voxel_size > 0 and hi >= lo, got voxel_size={voxel_size}, lo={lo_}, hi={hi_}")
    counts = np.rint((hi_ - lo_) / h).astype(np.int64) + 1 + 2 * pad
    origin = lo_ - pad * h
    axes = [origin[a] + h * np.arange(counts[a]) for a in range(3)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    values = field.velocity(grid, t).astype(dtype).reshape(tuple(counts) + (3,))
    vol = Volume.from_dense(
        values,
        voxel_size=h,
        origin=tuple(origin),
        active=np.ones(tuple(counts), bool),
        name="velocity",
        component_names=("u", "v", "w"),
    )
    vol.units, vol.length_units = "m/s", "m"  # nondimensional fields, labelled in SI like vdbflow.synthetic
    vol.blind_data = tuple(vol.blind_data) + (time_record(t),)
    return vol


def write_series(
    field: UnsteadyField,
    directory: str | os.PathLike,
    times: Sequence[float],
    voxel_size: float,
    *,
    pad: int = 4,
    dtype: np.dtype | type = np.float64,
    prefix: str | None = None,
    lo: Sequence[float] | None = None,
    hi: Sequence[float] | None = None,
) -> list[str]:
    """Write ``field`` at each of ``times`` as ``{prefix}_{k:04d}.nvdb`` in ``directory`` (created if
    missing) with :func:`field_volume`; returns the paths in time order.  ``prefix`` (default the
    field's name) is a file name: one with a path separator is refused.  Files of an earlier, longer
    series of the same prefix there would join this one when the directory is globbed: they are
    refused (a VolumeError) before anything is written."""
    stem = prefix or field.name
    if not isinstance(stem, str) or any(c in stem for c in ("/", "\0", os.sep, os.altsep or "/")):
        raise VolumeError(
            f"expected a prefix that is a file name (no path separators), got {stem!r}: the files must stay "
            f"in {os.fspath(directory)}"
        )
    os.makedirs(directory, exist_ok=True)
    mine = {os.path.join(os.fspath(directory), f"{stem}_{k:04d}.nvdb") for k in range(len(times))}
    stale = sorted(
        set(glob.glob(os.path.join(glob.escape(os.fspath(directory)), f"{glob.escape(stem)}_*.nvdb"))) - mine
    )
    if stale:
        raise VolumeError(
            f"expected no other {stem}_*.nvdb files in {os.fspath(directory)} (a glob of the series would "
            f"read them), found {len(stale)}, e.g. {stale[0]}: remove them, or write to another directory or prefix"
        )
    paths = []
    for k, t in enumerate(times):
        path = os.path.join(os.fspath(directory), f"{stem}_{k:04d}.nvdb")
        field_volume(field, float(t), voxel_size, pad=pad, dtype=dtype, lo=lo, hi=hi).to_nvdb(path)
        paths.append(path)
    return paths


UNSTEADY_FIELDS: dict[str, Callable[..., UnsteadyField]] = {
    "double_gyre": double_gyre,
    "taylor_green_decaying": decaying_taylor_green,
}
