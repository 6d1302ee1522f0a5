"""Second derivatives: Hessian samples/s per scheme against sample_grad of the same scheme, on the
same volume and points, in one run; and grid-wide Hessian fields (node second differences) against
np.gradient applied twice to the dense equivalent.

    python benchmarks/bench_hessian.py [--size 96] [--points 200000] [--repeat 3]

A fully active size^3 vec3f volume of a smooth field; random points inside it, away from the edge.
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import best_of

import vdbflow
from vdbflow.ops.hessian import HESSIAN_MODES, sample_hessian_arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.size
    x = np.arange(n, dtype=np.float32) * 0.1
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    dense = np.stack([np.sin(X) * np.cos(Y), np.cos(Y) * Z, np.sin(Z) * X], -1).astype(np.float32)
    vol = vdbflow.Volume.from_dense(dense, background=0.0, active=np.ones((n, n, n), bool))
    rng = np.random.default_rng(0)
    pts = rng.uniform(6, n - 7, (args.points, 3))
    print(f"{n}^3 vec3f fully active, {args.points:,} random points, {vdbflow._core.get_max_threads()} threads")
    print(f"{'scheme':<12} {'sample_grad':>12} {'sample_hessian':>15} {'ratio':>7}")
    for mode in HESSIAN_MODES:
        tg = best_of(lambda mode=mode: vdbflow.sample_grad_arrays(vol, pts, mode), args.repeat)
        th = best_of(lambda mode=mode: sample_hessian_arrays(vol, pts, mode), args.repeat)
        print(f"{mode:<12} {args.points / tg / 1e6:9.2f} M/s {args.points / th / 1e6:12.2f} M/s {tg / th:7.3f}")
    voxels = vol.active_voxel_count
    t_np = best_of(lambda: [np.gradient(g, axis=(0, 1, 2)) for g in np.gradient(dense, axis=(0, 1, 2))], args.repeat)
    print(f"np.gradient twice (dense {n}^3, 2nd order): {n**3 / t_np / 1e6:8.2f} M voxels/s")
    for scheme in ("fd2", "fd4", "fd6", "fd8"):
        t = best_of(lambda scheme=scheme: vdbflow.hessian_field(vol, scheme), args.repeat)
        print(
            f"hessian_field {scheme}: {voxels / t / 1e6:8.2f} M voxels/s "
            f"({(voxels / t) / (n**3 / t_np):.2f}x np.gradient twice per voxel)"
        )


if __name__ == "__main__":
    main()
