"""Resident particles across a cluster against one process, side by side in one run.

A fully active 64^3 vec3f ABC box over [0, 2 pi)^3 and N random seeds in its middle half; RK4 with
``linear`` sampling, ``--steps`` steps of 0.02, positions kept at the start and the end.

- one process: ``vdbflow.advect`` on the Volume (whole trajectories in the kernels), 2 kernel threads;
- distributed: a LocalCluster of 2 worker processes x 1 thread, 8 partitions with ``--halo 8``:
  ``vdbflow.advect`` on the DistributedVolume (resident particles: each partition integrates its
  particles in the kernels as far as its data carries them, and only those crossing partitions move),
  the results then brought to the client (``.values``), as the one process has them.

Reported per N: particle-steps/s of each side (medians), the ratio per paired run, the client's peak
memory above its baseline during the distributed ``advect`` call (sampled every 5 ms; the seeds
themselves are the caller's), and the bytes the workers sent each other (and the client) per
particle-step during it (``transfer_outgoing_bytes_total``).

    python benchmarks/bench_particles.py [--points 1000000,4000000] [--steps 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time

import numpy as np
from timing import timed

import vdbflow
from vdbflow import _core, synthetic

EXTENT = 2 * np.pi


def abc_box(n: int) -> vdbflow.Volume:
    h = EXTENT / n
    axis = (np.arange(n) + 0.5) * h
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    values = synthetic.abc_flow().velocity(grid).reshape(n, n, n, 3).astype(np.float32)
    return vdbflow.Volume.from_dense(
        values, voxel_size=h, origin=(axis[0],) * 3, name="velocity", active=np.ones((n, n, n), bool)
    )


def peak_rss_during(fn, interval: float = 0.005) -> tuple[object, int]:
    """``fn()`` and the peak resident memory of this process above its level at the start (bytes)."""
    import threading

    import psutil

    proc = psutil.Process()
    base = proc.memory_info().rss
    peak, done = [base], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(interval)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        out = fn()
    finally:
        done.set()
        thread.join()
    return out, max(peak[0], proc.memory_info().rss) - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", default="1000000,4000000", help="particle counts, comma-separated")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--halo", type=int, default=8, help="halo of the partitions, voxels")
    args = parser.parse_args()
    import dask.array as da
    import distributed

    steps, dt = args.steps, 0.02
    vol = abc_box(args.size)
    print(
        f"{datetime.date.today()} {platform.machine()} {_core.get_max_threads()} threads, target {_core.CPU_TARGET}; "
        f"{args.size}^3 vec3f ABC box, RK4 linear, {steps} steps of {dt}; distributed: 2 workers x 1 thread, "
        f"8 partitions, halo {args.halo}"
    )
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
        distributed.Client(lc) as client,
    ):
        dvol = vdbflow.distribute(vol, client, partitions=8, halo=args.halo)

        def sent() -> int:
            return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())

        try:
            for n in (int(v) for v in args.points.split(",")):
                seeds = np.random.default_rng(0).uniform(0.25 * EXTENT, 0.75 * EXTENT, (n, 3))

                t_one, t_dist, memory, attrs, moved = [], [], [], [], []

                def one(seeds: np.ndarray = seeds) -> np.ndarray:
                    ds = vdbflow.advect(vol, seeds, 0.0, steps * dt, dt, "rk4", "linear", save_every=steps)
                    return ds.position.values

                def spread(seeds: np.ndarray = seeds, memory: list = memory, attrs: list = attrs, moved: list = moved):
                    before = sent()
                    ds, grew = peak_rss_during(
                        lambda: vdbflow.advect(dvol, seeds, 0.0, steps * dt, dt, "rk4", "linear", save_every=steps)
                    )
                    moved.append(sent() - before)  # during the advection: the movers (and the counts)
                    memory.append(grew)
                    attrs.append(ds.attrs)
                    return ds.position.values

                for _ in range(args.repeat):  # the two sides alternate
                    t_one += timed(one, 1)
                    t_dist += timed(spread, 1)
                np.testing.assert_array_equal(spread(), one())  # the same bits
                # the seeds as a Dask array made on the workers (chunks of 2^18): the client never holds them
                lazy = da.random.default_rng(0).uniform(0.25 * EXTENT, 0.75 * EXTENT, (n, 3), chunks=(1 << 18, 3))
                made: list = []
                t_lazy = timed(lambda lazy=lazy, made=made: spread(lazy, made, [], []), 1)
                work = n * steps
                ratios = sorted(t1 / t2 for t1, t2 in zip(t_one, t_dist, strict=True))
                a = attrs[-1]
                print(
                    f"{n:>10,} particles: one process {work / statistics.median(t_one) / 1e6:6.2f} M particle-steps/s, "
                    f"distributed {work / statistics.median(t_dist) / 1e6:6.2f} M: ratio "
                    f"{statistics.median(ratios):.2f} (runs {ratios[0]:.2f}-{ratios[-1]:.2f}); client peak "
                    f"+{max(memory) / 2**20:,.0f} MiB (seeds {seeds.nbytes / 2**20:,.0f} MiB); "
                    f"{statistics.median(moved) / work:.2f} bytes sent per particle-step during advect; "
                    f"rounds {a['rounds']}, "
                    f"migrations {a['migrations']:,}, steps stage by stage {a['stage_by_stage_steps']:,} "
                    f"(client {a['client_steps']:,}); Dask seeds made on the workers: "
                    f"{work / t_lazy[0] / 1e6:.2f} M particle-steps/s, client peak +{made[0] / 2**20:,.0f} MiB"
                )
        finally:
            dvol.close()


if __name__ == "__main__":
    main()
