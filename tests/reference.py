"""A deliberately simple NumPy reference sampler: the oracle for vdbflow's kernels.

It knows nothing of leaves, masks or hash tables: a dict from voxel to value, a list of tiles and
a background, and the formulas of docs/design.md summed corner by corner in float64.
"""

from __future__ import annotations

import numpy as np


class ReferenceVolume:
    def __init__(self, ijk, values, background, tiles=(), transform=None):
        values = np.asarray(values, dtype=np.float64)
        self.components = 1 if values.ndim == 1 else values.shape[1]
        values = values.reshape(len(values), self.components)
        self.voxels = {tuple(int(c) for c in p): values[n] for n, p in enumerate(np.asarray(ijk))}
        self.background = np.broadcast_to(np.asarray(background, dtype=np.float64), (self.components,))
        # tiles: (origin (3,), size, value (C,))
        self.tiles = [
            (np.asarray(o), int(s), np.broadcast_to(np.asarray(v, np.float64), (self.components,))) for o, s, v in tiles
        ]
        self.matrix = np.eye(4) if transform is None else np.asarray(transform, dtype=np.float64)

    def read(self, i, j, k):
        v = self.voxels.get((i, j, k))
        if v is not None:
            return v
        for origin, size, value in self.tiles:
            if all(origin[a] <= c < origin[a] + size for a, c in enumerate((i, j, k))):
                return value
        return self.background

    def to_index(self, world):
        inv = np.linalg.inv(self.matrix)
        return np.asarray(world, np.float64) @ inv[:3, :3].T + inv[:3, 3]

    def sample(self, uvw, mode="linear"):
        """values (N, C) and Jacobians (N, C, 3) in index space."""
        uvw = np.asarray(uvw, dtype=np.float64)
        n = len(uvw)
        values = np.zeros((n, self.components))
        jac = np.zeros((n, self.components, 3))
        for p in range(n):
            u = uvw[p]
            if mode == "closest":
                # round half away from zero
                r = np.sign(u) * np.floor(np.abs(u) + 0.5)
                values[p] = self.read(*(int(c) for c in r))
                continue
            b = np.floor(u)
            f = u - b
            for ox in (0, 1):
                for oy in (0, 1):
                    for oz in (0, 1):
                        o = (ox, oy, oz)
                        w = [(1 - f[a]) if o[a] == 0 else f[a] for a in range(3)]
                        s = [2 * o[a] - 1 for a in range(3)]
                        v = self.read(int(b[0]) + ox, int(b[1]) + oy, int(b[2]) + oz)
                        values[p] += w[0] * w[1] * w[2] * v
                        grad_w = np.array([s[0] * w[1] * w[2], s[1] * w[0] * w[2], s[2] * w[0] * w[1]])
                        jac[p] += np.outer(v, grad_w)
        return values, jac


def random_sparse_voxels(rng, n_leaves=12, fill=0.6, spread=6, components=1, dtype=np.float64):
    """Voxels in a few random leaves around the origin (negative coordinates included), with
    random values; returns ijk (n, 3) int32 and values (n,) or (n, C)."""
    leaves = rng.integers(-spread, spread, size=(n_leaves, 3)) * 8
    leaves = np.unique(leaves, axis=0)
    local = np.stack(np.meshgrid(np.arange(8), np.arange(8), np.arange(8), indexing="ij"), axis=-1).reshape(-1, 3)
    ijk = np.concatenate([leaf + local[rng.random(512) < fill] for leaf in leaves]).astype(np.int32)
    shape = (len(ijk),) if components == 1 else (len(ijk), components)
    if np.dtype(dtype).kind == "f":
        values = rng.standard_normal(shape).astype(dtype)
    else:
        values = rng.integers(-1000 if np.dtype(dtype).kind == "i" else 0, 1000, size=shape).astype(dtype)
    return ijk, values


def probe_points(rng, ijk, n=400):
    """Points that stress the sampler: random around active voxels, on integer planes, at
    half-integers, on leaf faces, and far outside every leaf."""
    centre = ijk[rng.integers(0, len(ijk), n)].astype(np.float64)
    jitter = rng.uniform(-1.5, 1.5, (n, 3))
    pts = [centre + jitter]
    integer = centre + rng.integers(-1, 2, (n, 3))
    integer[:, 0] += rng.uniform(0, 1, n)  # two integer coordinates, one fractional
    pts.append(integer)
    pts.append(centre + 0.5)
    face = centre.copy()
    face[:, 1] = np.floor(face[:, 1] / 8) * 8 - rng.uniform(0, 1, n)  # straddles the leaf face below
    pts.append(face)
    pts.append(centre + rng.choice([-1, 1], (n, 3)) * 1000.25)
    return np.concatenate(pts)
