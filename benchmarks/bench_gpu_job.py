"""The host path of a GPU worker against its kernel: samples/s of the kernel on device-resident points
(sorted and random) against the device's memory bound, of host points through the pinned pipeline, and
of a job on one worker, side by side in one run.

    python benchmarks/bench_gpu_job.py --device cuda [--points 16000000] [--json PATH]
    python benchmarks/bench_gpu_job.py --device cpu --points 20000     # the same code on the CPU (the suite runs this)

Rows: ``kernel random`` / ``kernel sorted`` (device points, value + Jacobian of a vec3f grid, linear),
``bound`` (the device's memory bandwidth over the bytes a point must move: 24 of float64 point and 48 of
value and Jacobian; GPU only), ``host path`` (host points through ``sample_host_arrays``: pinned
buffers, two streams, the results back on the host), ``job`` (``vdbflow.run`` on a one-worker
LocalCluster, Q and |vorticity| only, the job's ``sample_and_write_s``) and each one's ratio to the
kernel on random points.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

BYTES_PER_POINT = 24 + 48  # float64 point in, float32 value (3) and Jacobian (9) out


def device_bandwidth() -> float | None:
    """Bytes/s of the current GPU's memory (DDR: two transfers a clock), or None."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        return 2.0 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8
    except Exception:
        return None


def timed(fn, sync) -> float:
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--points", type=int, default=16_000_000)
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--no-job", action="store_true", help="leave out the job row (no dask on the machine)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from vdbflow import synthetic
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays, sample_host_arrays

    work = Path(tempfile.mkdtemp(prefix="vdbflow-gpu-job-"))
    field = synthetic.taylor_green()
    vol = synthetic.flow_volume(field, args.resolution)
    path = work / "tg.nvdb"
    vol.to_nvdb(str(path))
    lo, hi = vol.topology.index_bbox
    rng = np.random.default_rng(0)
    host = rng.uniform(lo, hi + 1, (args.points, 3))
    order = np.lexsort((host[:, 2], host[:, 1], host[:, 0]))
    host_sorted = np.ascontiguousarray(host[order])
    request = SampleRequest("linear", ("value", "jacobian"), "index", device=args.device)
    if args.device == "cuda":  # CuPy, or its emulation under VDBFLOW_CUDA_EMULATE=1 (device code on the CPU)
        from vdbflow.devices.cuda import cupy_module

        xp = cupy_module()
        sync = xp.cuda.Device().synchronize
    else:
        xp, sync = np, lambda: None
    report: dict = {"device": args.device, "points": args.points}
    for label, pts in (("kernel random", host), ("kernel sorted", host_sorted)):
        dev = xp.asarray(pts)
        seconds = timed(lambda dev=dev: sample_arrays(vol, request, dev), sync)
        report[label] = args.points / seconds
        del dev
    bandwidth = device_bandwidth() if args.device == "cuda" else None
    if bandwidth:
        report["bound"] = bandwidth / BYTES_PER_POINT
    report["host path"] = args.points / timed(lambda: sample_host_arrays(vol, request, host), sync)
    if not args.no_job:
        import distributed

        import vdbflow

        config = {
            "volume": {"path": str(path), "grids": [vol.name]},
            "points": {
                "kind": "random",
                "count": args.points,
                "inside": "voxels",
                "space": "index",
                "seed": 0,
                "chunk": max(1, min(args.points, 4_000_000)),
            },
            "sampling": {"mode": "linear", "outputs": ["q_criterion", "vorticity_magnitude"], "device": args.device},
            "output": {"path": str(work / "job.zarr"), "overwrite": "always"},
        }
        with (
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster,
            distributed.Client(cluster) as client,
        ):
            vdbflow.run(config, client=client)  # warm: the worker opens the volume and compiles the kernels
            result = vdbflow.run(config, client=client)
        report["job"] = result.throughput
        report["job worker seconds"] = {k: round(v, 3) for k, v in result.worker_seconds.items() if v > 0.0005}
    base = report["kernel random"]
    for key in ("kernel sorted", "bound", "host path", "job"):
        if key in report:
            print(f"{key:>14}: {report[key] / 1e6:10.1f} M samples/s  ({report[key] / base:.3f}x kernel random)")
    print(f"{'kernel random':>14}: {base / 1e6:10.1f} M samples/s")
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
