"""A batch job against the kernel it runs, side by side in one process: `vdbflow.run` of the demo job on
a 2-worker x 1-thread LocalCluster (started before the timing: the job's own ``sample_and_write_s``),
against the kernel on the same points with the same threads (2).

    python benchmarks/bench_job.py [--points 8000000 32000000] [--repeat 3] [--plane 4096] [--json PATH]

Rows (each run ``--repeat`` times, interleaved; median and range of M points/s):

- ``kernel``: ``sample_grad_arrays(..., out=)`` on the job's points (world space, 2 threads);
- ``kernel + one write``: the fused kernel pass of the job's outputs plus one Zarr write of its results
  and coordinates (Blosc-LZ4), the write shared by the 2 threads: the job's floor on this machine;
- ``job``: the demo job (value, jacobian, q_criterion, vorticity_magnitude, Zarr Blosc-LZ4) and its
  ratio to the kernel, with the job's worker time by step;
- ``uncompressed``: the same job with ``output.compression: none``;
- ``job q``: the same job with ``outputs: [q_criterion]``;
- ``dataset``: ``Volume.sample_grad`` (the Dataset) against ``sample_grad_arrays(out=)`` at 4M points;
- ``plane`` / ``random``: a ``kind: plane`` job of plane x plane points against random points of the
  same count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "configs" / "demo.yaml"
CHUNK = 1_000_000


def summary(rates: list[float]) -> dict:
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": rates}


def part(row: dict, key: str) -> str:
    """``M points/s (ratio range to the kernel)`` of one row's ``key``."""
    r = row[f"ratio_{key}"]
    return f"{row[key]['median'] / 1e6:.2f} M/s ({r['min']:.2f}-{r['max']:.2f}x)"


def job_points(cfg):
    """The job's points, made in this process by its own generator."""
    from vdbflow.io.volumes import open_volume
    from vdbflow.jobs.points import make_points

    vol = open_volume(str(cfg.volume.synthetic.write), "velocity")
    ps = make_points(cfg.points, vol.topology, vol.topology.world_bbox)
    return vol, ps.points.compute(scheduler="sync")


def kernel_rate(vol, pts, threads: int = 2) -> float:
    import vdbflow
    from vdbflow import _core

    before = _core.get_max_threads()
    _core.set_num_threads(threads)
    try:
        n = len(pts)
        out = (np.empty((n, 3), np.float32), np.empty((n, 3, 3), np.float32))
        vdbflow.sample_grad_arrays(vol, pts[:1000], space="world")  # warm
        t0 = time.perf_counter()
        vdbflow.sample_grad_arrays(vol, pts, space="world", out=out)
        return n / (time.perf_counter() - t0)
    finally:
        _core.set_num_threads(before)


def write_floor(vol, pts, out: Path) -> float:
    """Points/s of the job's floor on 2 threads: the fused kernel pass of the demo's outputs (2 threads)
    plus one Zarr write (Blosc-LZ4, as the job) of its results and coordinates in 1M-point chunks, the
    write counted as shared by the 2 threads."""
    import zarr
    from numcodecs import Blosc

    from vdbflow import _core
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays

    request = SampleRequest("linear", ("value", "jacobian", "vorticity_magnitude", "q_criterion"), "world")
    before = _core.get_max_threads()
    _core.set_num_threads(2)
    try:
        t0 = time.perf_counter()
        arrays = sample_arrays(vol, request, pts)
        kernel = time.perf_counter() - t0
    finally:
        _core.set_num_threads(before)
    columns = [*arrays.values(), pts[:, 0], pts[:, 1], pts[:, 2], np.arange(len(pts))]
    codec = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    shutil.rmtree(out, ignore_errors=True)
    group = zarr.open_group(str(out), mode="w", zarr_format=2)
    t0 = time.perf_counter()
    for k, col in enumerate(columns):
        arr = group.create_array(
            f"a{k}", shape=col.shape, chunks=(CHUNK, *col.shape[1:]), dtype=col.dtype, compressors=(codec,)
        )
        for start in range(0, len(col), CHUNK):
            arr[start : start + CHUNK] = np.ascontiguousarray(col[start : start + CHUNK])
    write = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return len(pts) / (kernel + write / 2)


def run_job(client, overrides: dict, out: Path, points: dict | None = None):
    """The demo job (its ``points`` section replaced where given) with ``overrides``: its M points/s of
    sampling and writing, and its worker seconds by step."""
    import yaml

    import vdbflow

    config = yaml.safe_load(DEMO.read_text())
    if points is not None:
        config["points"] = points
    shutil.rmtree(out, ignore_errors=True)
    result = vdbflow.run(config, client=client, overrides={**overrides, "output.path": str(out)})
    return result.throughput, result.worker_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="+", default=[8_000_000, 32_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plane", type=int, default=4096, help="plane resolution (0: skip the plane rows)")
    parser.add_argument("--dataset-points", type=int, default=4_000_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    json_path = Path(args.json).resolve() if args.json else None

    import distributed

    import vdbflow
    from vdbflow.jobs.config.load import load_config

    work = Path(tempfile.mkdtemp(prefix="vdbflow-bench-job-"))
    os.chdir(work)  # the demo config writes its volume under ./vdbflow-demo
    report: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cpus", "python": sys.version.split()[0]}
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        run_job(client, {"points.count": 1000}, work / "warm.zarr")  # writes the demo volume
        for n in args.points:
            over = {"points.count": n, "points.chunk": CHUNK}
            cfg = load_config(str(DEMO), values=over)
            vol, pts = job_points(cfg)
            kernel, floor, job, job_raw, job_q, split = [], [], [], [], [], {}
            for _ in range(args.repeat):
                kernel.append(kernel_rate(vol, pts))
                floor.append(write_floor(vol, pts, work / "floor.zarr"))
                rate, split = run_job(client, over, work / "job.zarr")
                job.append(rate)
                job_raw.append(run_job(client, {**over, "output.compression": "none"}, work / "raw.zarr")[0])
                rate, _ = run_job(client, {**over, "sampling.outputs": ["q_criterion"]}, work / "q.zarr")
                job_q.append(rate)
            row = {
                "kernel": summary(kernel),
                "floor": summary(floor),
                "job": summary(job),
                "job_uncompressed": summary(job_raw),
                "job_q": summary(job_q),
                "ratio_floor": summary([f / k for f, k in zip(floor, kernel, strict=True)]),
                "ratio_job": summary([j / k for j, k in zip(job, kernel, strict=True)]),
                "ratio_job_uncompressed": summary([j / k for j, k in zip(job_raw, kernel, strict=True)]),
                "ratio_job_q": summary([j / k for j, k in zip(job_q, kernel, strict=True)]),
                "job_worker_seconds": {k: round(v, 3) for k, v in split.items() if v > 0.0005},
            }
            report[f"{n}"] = row
            print(
                f"{n / 1e6:.0f}M points: kernel {row['kernel']['median'] / 1e6:.2f} M/s; kernel + one write "
                f"{part(row, 'floor')}; job {part(row, 'job')}; uncompressed {part(row, 'job_uncompressed')}; "
                f"q only {part(row, 'job_q')}; job worker s {row['job_worker_seconds']}",
                flush=True,
            )
            del pts
        # the Dataset against the arrays
        cfg = load_config(str(DEMO), values={"points.count": args.dataset_points, "points.chunk": CHUNK})
        vol, pts = job_points(cfg)
        n = len(pts)
        out = (np.empty((n, 3), np.float32), np.empty((n, 3, 3), np.float32))
        arrays, dataset = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            vdbflow.sample_grad_arrays(vol, pts, space="world", out=out)
            arrays.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            vol.sample_grad(pts)
            dataset.append(n / (time.perf_counter() - t0))
        report["dataset"] = {
            "arrays": summary(arrays),
            "dataset": summary(dataset),
            "ratio": summary([d / a for d, a in zip(dataset, arrays, strict=True)]),
        }
        r = report["dataset"]["ratio"]
        print(
            f"Dataset / arrays at {n / 1e6:.0f}M points: {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})", flush=True
        )
        if args.plane:
            count = args.plane * args.plane
            plane = {  # through the middle of the shell, across the box [0, 2 pi]^2
                "kind": "plane",
                "origin": [0.5, 0.5, 3.14159],
                "u": [5.28, 0.0, 0.0],
                "v": [0.0, 5.28, 0.0],
                "resolution": [args.plane, args.plane],
                "space": "world",
                "chunk": CHUNK,
            }
            planes, randoms = [], []
            for _ in range(args.repeat):
                planes.append(run_job(client, {}, work / "plane.zarr", plane)[0])
                randoms.append(run_job(client, {"points.count": count, "points.chunk": CHUNK}, work / "r.zarr")[0])
            report["plane"] = {
                "plane": summary(planes),
                "random": summary(randoms),
                "ratio": summary([p / q for p, q in zip(planes, randoms, strict=True)]),
            }
            r = report["plane"]["ratio"]
            print(
                f"plane {args.plane}^2 / random points: {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})", flush=True
            )
    shutil.rmtree(work, ignore_errors=True)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
