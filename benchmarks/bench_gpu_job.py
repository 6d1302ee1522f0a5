"""The GPU's sampling against the card's own copy bandwidth and the host paths around it: samples/s of the kernel
on device-resident points (random and sorted), timed with CUDA events over several runs, as a fraction of a
device-to-device copy measured the same way, counting the bytes the kernel must move; the pinned host path
and a job on one worker beside it; each kernel result checked against the CPU.

    python benchmarks/bench_gpu_job.py --device cuda [--points 33554432] [--runs 5] [--json PATH]
    python benchmarks/bench_gpu_job.py --device cuda --points 20000 --resolution 32 --no-job   # emulated
    python benchmarks/bench_gpu_job.py --device cpu --points 20000     # the same code on the CPU

Rows: ``kernel random`` / ``kernel sorted`` (value + Jacobian of a vec3f grid, linear; the median of
``--runs`` timed runs after a warm-up), ``copy bandwidth`` (bytes read + written a second by a device copy of
``--copy-mib``), ``fraction of copy`` (the kernel's bytes a second over that: bytes = 24 a float64 point, 48
of float32 value and Jacobian written, and every voxel value and tree table the volume holds read once, a
lower bound of what the kernel moves), ``host path`` (host points through ``sample_host_arrays``) and ``job``
(``vdbflow.run`` on a one-worker cluster).  ``checked``: the kernel's values and Jacobians on the first
100,000 points equal the CPU's within the FMA bound (scripts/gpu_check_steps.py ``tolerance``), else the
largest difference; the script exits 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

POINT_BYTES = 24  # a float64 point read
RESULT_BYTES = 4 * (3 + 9)  # float32 value (3) and Jacobian (9) written


def volume_bytes(vol: Any) -> int:
    """Bytes of the volume's arrays the kernel may read (voxel values, tiles, tree tables, masks, prefixes)."""
    k = vol.kernel_arrays()
    arrays = [*k.tables, k.masks, k.prefix, k.leaf_offset, k.values, k.tile_values, k.leaf_values_at]
    return int(sum(a.nbytes for a in arrays if isinstance(a, np.ndarray)))


def event_times(xp: Any, fn: Any, runs: int) -> list[float]:
    """Seconds of ``fn()`` on the current stream, by CUDA events, ``runs`` times after one warm-up run."""
    fn()
    xp.cuda.Device().synchronize()
    out = []
    for _ in range(runs):
        start, end = xp.cuda.Event(), xp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(xp.cuda.get_elapsed_time(start, end) / 1e3)
    return out


def host_times(fn: Any, runs: int) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def copy_bandwidth(xp: Any, mib: int, runs: int) -> float:
    """Bytes read + written a second by a device-to-device copy of ``mib`` MiB (CUDA events)."""
    src = xp.ones(mib * 2**20 // 8, np.float64)
    dst = xp.empty_like(src)
    seconds = statistics.median(event_times(xp, lambda: xp.copyto(dst, src), runs))
    return 2 * src.nbytes / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--points", type=int, default=32 * 2**20)
    parser.add_argument("--resolution", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--copy-mib", type=int, default=1024)
    parser.add_argument("--no-job", action="store_true", help="leave out the job row (no dask on the machine)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from gpu_check_steps import tolerance

    import vdbflow
    from vdbflow import synthetic
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays, sample_host_arrays

    work = Path(tempfile.mkdtemp(prefix="vdbflow-gpu-job-"))
    vol = synthetic.flow_volume(synthetic.taylor_green(), args.resolution)
    lo, hi = vol.topology.index_bbox
    rng = np.random.default_rng(0)
    host = rng.uniform(lo, hi + 1, (args.points, 3))
    cells = np.floor(host).astype(np.int64) - np.asarray(lo, np.int64)  # sorted by voxel: one int64 key, one sort
    span = np.asarray(hi, np.int64) - np.asarray(lo, np.int64) + 2
    key = (cells[:, 0] * span[1] + cells[:, 1]) * span[2] + cells[:, 2]
    host_sorted = np.ascontiguousarray(host[np.argsort(key, kind="stable")])
    del cells, key
    request = SampleRequest("linear", ("value", "jacobian"), "index", device=args.device)
    report: dict = {"device": args.device, "points": args.points, "runs": args.runs}
    if args.device == "cuda":  # CuPy, or its emulation under VDBFLOW_CUDA_EMULATE=1 (device code on the CPU)
        from vdbflow.devices.cuda import cupy_module

        xp = cupy_module()

        def times(fn: Any) -> list[float]:
            return event_times(xp, fn, args.runs)

        report["copy bandwidth"] = copy_bandwidth(xp, min(args.copy_mib, max(1, args.points * 72 // 2**20)), args.runs)
    else:
        xp = np

        def times(fn: Any) -> list[float]:
            return host_times(fn, args.runs)

    moved = args.points * (POINT_BYTES + RESULT_BYTES) + volume_bytes(vol)
    report["bytes a call"] = moved
    check = min(args.points, 100_000)
    want_v, want_j = vdbflow.sample_grad_arrays(vol, host[:check], "linear")
    scale = float(np.abs(vol.kernel_arrays().values).max())
    worst = 0.0
    for label, pts in (("kernel random", host), ("kernel sorted", host_sorted)):
        dev = xp.asarray(pts)
        out: dict = {}
        seconds = times(lambda dev=dev, out=out: out.update(sample_arrays(vol, request, dev)))
        report[label] = args.points / statistics.median(seconds)
        report[f"{label} seconds"] = [round(s, 6) for s in seconds]
        if label == "kernel random":
            got_v = xp.asnumpy(out["value"][:check]) if xp is not np else out["value"][:check]
            got_j = xp.asnumpy(out["jacobian"][:check]) if xp is not np else out["jacobian"][:check]
            worst = max(
                float(np.max(np.abs(got_v - want_v))) / tolerance("linear", np.float32, scale),
                float(np.max(np.abs(got_j - want_j))) / tolerance("linear", np.float32, scale, 1),
            )
        del dev, out
    report["checked"] = True if worst <= 1.0 else f"{worst:.3g} times the FMA bound"
    if "copy bandwidth" in report:
        report["fraction of copy"] = report["kernel random"] * moved / args.points / report["copy bandwidth"]
        report["fraction of copy sorted"] = report["kernel sorted"] * moved / args.points / report["copy bandwidth"]
    report["host path"] = args.points / statistics.median(
        host_times(lambda: sample_host_arrays(vol, request, host), max(1, args.runs // 2))
    )
    if not args.no_job:
        import distributed

        path = work / "tg.nvdb"
        vol.to_nvdb(str(path))
        config = {
            "volume": {"path": str(path), "grids": [vol.name]},
            "points": {"kind": "random", "count": args.points, "inside": "voxels", "space": "index", "seed": 0},
            "sampling": {"mode": "linear", "outputs": ["q_criterion", "vorticity_magnitude"], "device": args.device},
            "output": {"path": str(work / "job.zarr"), "overwrite": "always"},
        }
        config["points"]["chunk"] = max(1, min(args.points, 4_000_000))
        with (
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster,
            distributed.Client(cluster) as client,
        ):
            vdbflow.run(config, client=client)  # warm: the worker opens the volume and loads the kernels
            report["job"] = vdbflow.run(config, client=client).throughput
    base = report["kernel random"]
    for key in ("kernel sorted", "host path", "job"):
        if key in report:
            print(f"{key:>14}: {report[key] / 1e6:10.2f} M samples/s  ({report[key] / base:.3f}x kernel random)")
    if "copy bandwidth" in report:
        print(f"{'copy':>14}: {report['copy bandwidth'] / 1e9:10.1f} GB/s read + written (device to device)")
    fraction = f", {report['fraction of copy']:.3f} of the copy's bytes/s" if "fraction of copy" in report else ""
    print(f"{'kernel random':>14}: {base / 1e6:10.2f} M samples/s{fraction}; checked: {report['checked']}")
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0 if report["checked"] is True else 1


if __name__ == "__main__":
    sys.exit(main())
