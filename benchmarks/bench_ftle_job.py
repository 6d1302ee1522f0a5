"""Peak worker memory of an FTLE job against its seed count: 10^6 and 10^7 seeds on a lattice.

The job (``vdbflow.jobs.runner.run_job``) advects a lattice of seeds through the ABC flow (a 64^3
vec3f volume written once to .nvdb and memory-mapped by each worker), RK4 ``linear``, 20 steps of
0.05 with the variational FTLE, and writes ``ftle``, ``status``, ``end_time`` and the start and end
positions to Zarr chunk by chunk.  Each chunk of seeds is one task that makes its seeds, advects them
and hands its rows to the store.  The workers' resident memory (each worker process's RSS) is sampled
every 0.1 s while the job runs; bounded memory means the peak does not grow with the seeds.  A
small job runs first, unreported, so that both measured jobs find the workers warm.

    python benchmarks/bench_ftle_job.py [--lattices 100,216] [--chunk 262144] [--dir /tmp/vdbflow-ftle]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shutil
import threading
import time
from pathlib import Path


def worker_rss(client) -> dict[str, int]:
    import psutil

    return client.run(lambda: psutil.Process().memory_info().rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lattices", default="100,216", help="lattice edges, comma-separated (n^3 seeds)")
    ap.add_argument("--chunk", type=int, default=262_144, help="seeds per task (points.chunk)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/vdbflow-ftle-bench"))
    ap.add_argument("--warmup", type=int, default=40, help="lattice edge of an unreported first job (imports)")
    args = ap.parse_args()
    import distributed
    import xarray as xr

    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.runner import run_job

    args.dir.mkdir(parents=True, exist_ok=True)
    print(
        f"{datetime.date.today()} {platform.machine()}; FTLE job, ABC 64^3 vec3f, RK4 linear, 20 steps, "
        f"2 workers x 1 thread, {args.chunk:,} seeds a task"
    )
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
        distributed.Client(lc) as client,
    ):
        for edge in (args.warmup, *(int(v) for v in args.lattices.split(","))):
            out = args.dir / f"ftle-{edge}.zarr"
            cfg = load_config(
                data={
                    "volume": {
                        "synthetic": {
                            "field": "abc",
                            "resolution": 64,
                            "shell": [0.0, 0.9],
                            "write": str(args.dir / "abc.nvdb"),
                        }
                    },
                    "points": {"kind": "grid", "shape": [edge] * 3, "chunk": args.chunk},
                    "sampling": {"mode": "linear"},
                    "advect": {"t0": 0.0, "t1": 1.0, "dt": 0.05, "save_every": 20, "outputs": ["ftle"]},
                    "cluster": {"kind": "local"},
                    "output": {"path": str(out), "overwrite": "always"},
                }
            )
            before = worker_rss(client)
            peak = dict(before)
            done = threading.Event()

            def watch(peak: dict = peak, done: threading.Event = done) -> None:
                while not done.is_set():
                    for w, rss in worker_rss(client).items():
                        peak[w] = max(peak.get(w, 0), rss)
                    time.sleep(0.1)

            thread = threading.Thread(target=watch, daemon=True)
            thread.start()
            t0 = time.perf_counter()
            try:
                result = run_job(cfg, progress=False, client=client, force=True)
            finally:
                done.set()
                thread.join()
            wall = time.perf_counter() - t0
            ds = xr.open_zarr(out)
            finite = int(ds.ftle.notnull().sum())
            seeds, store = edge**3, sum(f.stat().st_size for f in out.rglob("*"))
            shutil.rmtree(out)
            if edge == args.warmup:  # the workers' imports and first allocations, not reported
                continue
            print(
                f"{seeds:>12,} seeds: {wall:6.1f} s, {seeds * 20 / wall / 1e6:5.2f} M particle-steps/s; peak worker "
                f"RSS {max(peak.values()) / 2**20:,.0f} MiB (at the start {max(before.values()) / 2**20:,.0f} MiB); "
                f"{finite:,} finite FTLE values; store {store / 2**20:,.0f} "
                f"MiB; {result.points:,} seeds in the summary"
            )


if __name__ == "__main__":
    main()
