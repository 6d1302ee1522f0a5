"""Grid-wide gradient fields: vdbflow.gradient_field (fd2/fd4/fd6) in voxels/s against NumPy's
np.gradient on the dense equivalent, a 50 %-occupied 256^3 vec3 volume, in one run; and each
point-sampling scheme's throughput relative to linear on the same points.

    python benchmarks/bench_gradient_field.py [--size 256]
"""

from __future__ import annotations

import argparse

import numpy as np
from timing import best_of

import vdbflow
from vdbflow.ops.sampling import STENCIL_RADIUS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    n = args.size
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((n, n, n, 3)).astype(np.float32)
    active = np.zeros((n, n, n), bool)
    active[: n // 2] = True  # 50 % occupied: one half of the box
    vol = vdbflow.Volume.from_dense(dense, background=0.0, active=active)
    voxels = vol.active_voxel_count

    t_np = best_of(lambda: np.gradient(dense, axis=(0, 1, 2)), args.repeat)
    print(f"{n}^3 vec3 float32, {voxels:,} active voxels (50 %)")
    print(f"np.gradient (2nd order, dense {n}^3): {n**3 / t_np / 1e6:8.2f} M voxels/s")
    for scheme in ("fd2", "fd4", "fd6"):
        t = best_of(lambda scheme=scheme: vdbflow.gradient_field(vol, scheme), args.repeat)
        print(
            f"gradient_field {scheme} (active voxels):    {voxels / t / 1e6:8.2f} M voxels/s "
            f"({(voxels / t) / (n**3 / t_np):.2f}x np.gradient per voxel)"
        )

    pts = rng.uniform(0, n / 2 - 1, (args.points, 3))
    times = {}
    for mode in STENCIL_RADIUS:
        times[mode] = best_of(lambda mode=mode: vdbflow.sample_grad_arrays(vol, pts, mode), args.repeat)
    print(f"scheme throughput on {args.points:,} points, relative to linear:")
    for mode, t in times.items():
        print(f"  {mode:<12} {args.points / t / 1e6:8.2f} M samples/s  ({times['linear'] / t:.3f}x)")


if __name__ == "__main__":
    main()
