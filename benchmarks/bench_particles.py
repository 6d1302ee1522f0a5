"""Particle-steps per second against the sampling rate of the same points, side by side in one run.

A fully active 64^3 vec3f ABC box over [0, 2 pi)^3 and N random seeds in its middle half; RK4 with
``linear`` sampling, 10 steps of 0.02 (no particle leaves).  An RK4 step samples four times, so the
ratio of particle-steps/s to points sampled/s is at most 0.25 when stepping costs nothing but sampling.

- one process: ``vdbflow.advect`` on the Volume (whole trajectories in the kernels) against
  ``sample_grad_arrays`` (values only, as a step needs) of the seeds, 2 kernel threads;
- distributed: a LocalCluster of 2 worker processes x 1 thread, 8 partitions with a halo of one leaf
  (``--halo 8``: a step's stage points stay in their partition's data): ``vdbflow.advect`` on the
  DistributedVolume (a step at a time, each partition integrating its particles' step in the kernels)
  against ``DistributedVolume.sample`` of the seeds computed back to the client.

    python benchmarks/bench_particles.py [--points N] [--steps S] [--repeat R] [--no-distributed]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics

import numpy as np
from timing import timed

import vdbflow
from vdbflow import _core, synthetic
from vdbflow.ops.sampling import sample_grad_arrays

EXTENT = 2 * np.pi


def abc_box(n: int) -> vdbflow.Volume:
    h = EXTENT / n
    axis = (np.arange(n) + 0.5) * h
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    values = synthetic.abc_flow().velocity(grid).reshape(n, n, n, 3).astype(np.float32)
    return vdbflow.Volume.from_dense(
        values, voxel_size=h, origin=(axis[0],) * 3, name="velocity", active=np.ones((n, n, n), bool)
    )


def report(label: str, n: int, steps: int, t_sample: list[float], t_advect: list[float]) -> None:
    """Rates from the medians, and the spread of the ratio over the paired runs."""
    rate_s = n / statistics.median(t_sample)
    rate_a = n * steps / statistics.median(t_advect)
    ratios = sorted((n * steps / ta) / (n / ts) for ts, ta in zip(t_sample, t_advect, strict=True))
    print(
        f"{label:<22} sample {rate_s / 1e6:7.2f} M points/s   advect {rate_a / 1e6:7.2f} M particle-steps/s   "
        f"ratio {rate_a / rate_s:.3f} (runs {ratios[0]:.3f}-{ratios[-1]:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--halo", type=int, default=8, help="halo of the partitions, voxels")
    parser.add_argument("--no-distributed", action="store_true")
    args = parser.parse_args()
    n, steps = args.points, args.steps
    vol = abc_box(args.size)
    seeds = np.random.default_rng(0).uniform(0.25 * EXTENT, 0.75 * EXTENT, (n, 3))
    dt = 0.02
    print(
        f"{datetime.date.today()} {platform.machine()} {_core.get_max_threads()} threads, target {_core.CPU_TARGET}; "
        f"{args.size}^3 vec3f ABC box, {n:,} seeds, RK4 linear, {steps} steps"
    )

    def advect(source):
        ds = vdbflow.advect(source, seeds, 0.0, steps * dt, dt, "rk4", "linear", save_every=steps)
        assert int((ds.status != 0).sum()) == 0, "a particle left the box"

    t_sample, t_advect = [], []
    for _ in range(args.repeat):  # the two sides alternate
        t_sample += timed(lambda: sample_grad_arrays(vol, seeds, "linear", space="world", jacobian=False), 1)
        t_advect += timed(lambda: advect(vol), 1)
    report("one process", n, steps, t_sample, t_advect)
    if args.no_distributed:
        return
    import dask
    import distributed

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
        distributed.Client(lc) as client,
    ):
        dvol = vdbflow.distribute(vol, client, partitions=8, halo=args.halo)
        try:
            t_sample, t_advect = [], []
            for _ in range(args.repeat):
                t_sample += timed(lambda: dask.compute(dvol.sample(seeds, "linear", "world")["velocity"].data), 1)
                t_advect += timed(lambda: advect(dvol), 1)
            report(f"distributed, halo {args.halo}", n, steps, t_sample, t_advect)
        finally:
            dvol.close()


if __name__ == "__main__":
    main()
