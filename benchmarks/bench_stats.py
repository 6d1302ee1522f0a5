"""Statistics in the kernels' pass against the kernel that only samples, side by side in one run.

On the demo field (Taylor-Green, 64 voxels an edge, a shell) at random points inside its active voxels:

- ``kernel``: ``vdbflow.sample_grad_arrays`` (values and Jacobians written for every point: the kernel's rate);
- ``stats``: ``vdbflow.statistics`` with a 256 x 256 Q-R histogram and the moments of the 9 gradient entries
  (nothing written a point; the same points, threads and interpolation);
- ``job`` (``--job``): ``vdbflow run`` jobs with the same statistics in a ``reduce:`` section, their
  reduction's seconds against the kernel on the same points: one drawing its random points (as the demo job
  does), one reading the same points from a .npy file;
- ``memory``: the peak resident memory of a process reducing Dask points made chunk by chunk (1M a chunk,
  never held whole) at 32M and at 128M points: flat when nothing grows with the points.

Rounds are interleaved; the spread of the rounds is printed.  The machine is shared: read the spread.

    python benchmarks/bench_stats.py [--points 32000000] [--rounds 3] [--job] [--memory]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

import vdbflow
from vdbflow import synthetic
from vdbflow.ops.reductions import Histogram, Statistics, quantity


def demo_volume() -> vdbflow.Volume:
    return synthetic.flow_volume(synthetic.taylor_green(), 64)


def points_in_voxels(vol: vdbflow.Volume, n: int, seed: int) -> np.ndarray:
    """n points uniform inside the volume's active voxels (world space), as the demo job draws them."""
    rng = np.random.default_rng(seed)
    ijk = vol.active_voxels()
    picked = ijk[rng.integers(0, len(ijk), n)] + rng.uniform(-0.5, 0.5, (n, 3))
    return np.asarray(vol.transform.apply(picked), np.float64)


def qr_statistics(vol: vdbflow.Volume) -> Statistics:
    qs = [quantity(n, vol, "world") for n in ("q_criterion", "r_invariant")]
    entries = [quantity(f"jacobian[{c},{a}]", vol, "world") for c in "uvw" for a in "xyz"]
    edges = (np.linspace(-3, 1.5, 257), np.linspace(-1.5, 1.5, 257))
    return Statistics(histograms=[Histogram(tuple(qs), edges)], moments=entries)


def rates(points: int, rounds: int) -> dict:
    vol = demo_volume()
    pts = points_in_voxels(vol, points, 0)
    stats = qr_statistics(vol)
    vdbflow.sample_grad_arrays(vol, pts[:100_000])  # warm
    vdbflow.statistics(vol, pts[:100_000], stats)
    kernel, reduced = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        vdbflow.sample_grad_arrays(vol, pts)
        kernel.append(points / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        ds = vdbflow.statistics(vol, pts, stats)
        reduced.append(points / (time.perf_counter() - t0))
    ratios = [r / k for r, k in zip(reduced, kernel, strict=True)]
    return {
        "points": points,
        "kernel_points_per_s": kernel,
        "stats_points_per_s": reduced,
        "ratio": ratios,
        "ratio_median": statistics.median(ratios),
        "result_bytes": int(ds.nbytes),
        "in_histogram": int(ds["q_criterion_r_invariant_count"].sum()),
    }


MEMORY_CHILD = """
import resource, sys, dask, dask.array as da, numpy as np, vdbflow
sys.path.insert(0, {here!r})
from bench_stats import demo_volume, qr_statistics, points_in_voxels
vol = demo_volume()
n, chunk = {points}, 1_000_000
blocks = [dask.delayed(points_in_voxels)(vol, min(chunk, n - s), s) for s in range(0, n, chunk)]
sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
pts = da.concatenate([da.from_delayed(b, (m, 3), np.float64) for b, m in zip(blocks, sizes)])
with dask.config.set(scheduler="threads", num_workers=2):
    ds = vdbflow.statistics(vol, pts, qr_statistics(vol))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, int(ds["q_criterion_r_invariant_count"].sum()))
"""


def memory(points: int) -> tuple[int, int]:
    """Peak resident bytes of a process reducing ``points`` Dask points, and the points it binned."""
    from pathlib import Path

    code = MEMORY_CHILD.format(here=str(Path(__file__).parent), points=points)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


JOB = """
volume: {{synthetic: {{field: taylor_green, resolution: 64, write: {tmp}/tg.nvdb}}}}
points: {points}
reduce:
  histograms: [{{of: [q_criterion, r_invariant], bins: [256, 256], range: [[-3, 1.5], [-1.5, 1.5]]}}]
  moments: {moments}
output: {{path: {tmp}/stats.nc, overwrite: always}}
"""
DRAWN = "{{kind: random, count: {points}, inside: voxels, seed: 1, chunk: 1000000}}"
FROM_FILE = "{{kind: file, path: {tmp}/points.npy, chunk: 1000000}}"


def job(points: int, rounds: int) -> dict:
    """``reduce:`` jobs (one worker, two task threads: the kernels' OpenMP threads are the machine's) against
    the kernel on the same points, rounds interleaved: the job's reduction seconds (its tasks, merge and all,
    timings reduce_s) of a job that draws its random points (``drawn``: the same points the kernel samples,
    drawn by the job as a writing job draws them) and of one that reads them from a .npy file (``file``)."""
    import os
    import tempfile

    import distributed

    moments = json.dumps([f"jacobian[{c},{a}]" for c in "uvw" for a in "xyz"])
    vol = demo_volume()
    out: dict = {"job_kernel_points_per_s": [], "job_drawn_points_per_s": [], "job_file_points_per_s": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        configs = {}
        for kind, points_spec in (("drawn", DRAWN), ("file", FROM_FILE)):
            configs[kind] = f"{tmp}/{kind}.yaml"
            with open(configs[kind], "w") as f:
                spec = points_spec.format(points=points, tmp=tmp)
                f.write(JOB.format(tmp=tmp, points=spec, moments=moments))
        vdbflow.run(configs["drawn"], client=client, **{"points.count": 100_000})  # warm
        from vdbflow.jobs.config.load import load_config
        from vdbflow.jobs.points import make_points

        cfg = load_config(configs["drawn"])
        topology = vdbflow.open(f"{tmp}/tg.nvdb").topology
        pts = make_points(cfg.points, topology, topology.data_bounds("world", inner=True)).points.compute()
        np.save(f"{tmp}/points.npy", pts)  # the drawn job's own points
        for _ in range(rounds):
            t0 = time.perf_counter()
            vdbflow.sample_grad_arrays(vol, pts)
            out["job_kernel_points_per_s"].append(points / (time.perf_counter() - t0))
            for kind in ("drawn", "file"):
                result = vdbflow.run(configs[kind], client=client)
                out[f"job_{kind}_points_per_s"].append(points / result.timings["reduce_s"])
        out["job_bytes"] = os.path.getsize(f"{tmp}/stats.nc")
    for kind in ("drawn", "file"):
        out[f"job_{kind}_ratio"] = [
            r / k for r, k in zip(out[f"job_{kind}_points_per_s"], out["job_kernel_points_per_s"], strict=True)
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=32_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="also the peak memory at 32M and 128M Dask points")
    parser.add_argument("--job", action="store_true", help="also a reduce: job against the kernel")
    args = parser.parse_args()
    out = rates(args.points, args.rounds)
    k, s = out["kernel_points_per_s"], out["stats_points_per_s"]
    print(f"{args.points:,} points, {args.rounds} rounds, threads {vdbflow._core.get_max_threads()}")
    print(f"  kernel (values + Jacobians written): {min(k) / 1e6:.1f}-{max(k) / 1e6:.1f} M points/s")
    print(f"  statistics (Q-R 256x256 + 9 moments): {min(s) / 1e6:.1f}-{max(s) / 1e6:.1f} M points/s")
    r = out["ratio"]
    print(f"  ratio statistics / kernel: {min(r):.2f}-{max(r):.2f} (median {out['ratio_median']:.2f})")
    print(f"  result: {out['result_bytes']:,} bytes")
    if args.job:
        j = job(args.points, args.rounds)
        out.update(j)
        span = lambda v, scale=1e6: f"{min(v) / scale:.2f}-{max(v) / scale:.2f}"  # noqa: E731
        print(f"  reduce: jobs against the kernel on the same points ({span(j['job_kernel_points_per_s'])} M/s):")
        for kind, what in (("drawn", "drawing its random points"), ("file", "reading them from a .npy file")):
            rate, ratio = span(j[f"job_{kind}_points_per_s"]), span(j[f"job_{kind}_ratio"], 1)
            print(f"    {what}: {rate} M points/s, ratio {ratio}")
        print(f"  the job's output {j['job_bytes']:,} bytes")
    if args.memory:
        for n in (32_000_000, 128_000_000):
            peak, binned = memory(n)
            out[f"peak_rss_{n}"] = peak
            print(f"  Dask points, {n:,}: peak resident {peak / 2**20:,.0f} MiB ({binned:,} points binned)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
