"""A series particle job with more tasks than workers, against ``volume.series.cache``: 4 (each task opens the
window's steps again), the window's step count, and ``auto`` (the default: the window where it fits a quarter of
a worker's memory).

The job (``vdbflow.jobs.runner.run_job``, its own local cluster of 2 workers x 1 thread each run) advects 3,444
seeds on a plane (82 x 42) through the double gyre written as 41 .nvdb steps (t 0 to 10, voxel size 1/64: about
5.5 MB a file), RK4 ``linear`` in space and time, 200 steps of 0.05 with FTLE, 8 tasks (``points.chunk`` 431).
Reported: advection and writing (``sample_and_write_s``), each setting run in turn ``--repeat`` times, and the
cache the job kept (the store's ``series_cache`` attribute).

    python benchmarks/bench_series_cache.py [--repeat 3] [--dir /tmp/vdbflow-series-cache]
"""

from __future__ import annotations

import argparse
import datetime
import platform
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/vdbflow-series-cache"))
    args = ap.parse_args()
    import xarray as xr

    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.runner import run_job
    from vdbflow.synthetic import unsteady

    steps = args.dir / "gyre"
    if len(list(steps.glob("*.nvdb"))) != 41:
        unsteady.write_series(unsteady.double_gyre(), steps, np.linspace(0.0, 10.0, 41), voxel_size=1 / 64)
    size = sum(f.stat().st_size for f in steps.glob("*.nvdb"))
    print(
        f"{datetime.date.today()} {platform.machine()}; double gyre, 41 steps ({size / 1e6:.1f} MB of files), 3,444 "
        "seeds x 200 RK4 steps, linear, 8 tasks on 2 workers x 1 thread; advection + writing (s)"
    )
    times: dict[str, list[float]] = {}
    kept: dict[str, int] = {}
    for _ in range(args.repeat):
        for cache in (4, 41, "auto"):
            out = args.dir / f"ftle-{cache}.zarr"
            cfg = load_config(
                data={
                    "volume": {"series": {"paths": str(steps / "*.nvdb"), "cache": cache}},
                    "points": {
                        "kind": "plane",
                        "origin": [0, 0, 0],
                        "u": [2, 0, 0],
                        "v": [0, 1, 0],
                        "resolution": [82, 42],
                        "chunk": 431,
                    },
                    "sampling": {"mode": "linear"},
                    "advect": {"t0": 0.0, "t1": 10.0, "dt": 0.05, "save_every": 100, "outputs": ["ftle"]},
                    "cluster": {"kind": "local", "workers": 2, "threads_per_worker": 1, "dashboard": False},
                    "output": {"path": str(out), "overwrite": "always"},
                }
            )
            result = run_job(cfg, progress=False)
            times.setdefault(str(cache), []).append(result.timings["sample_and_write_s"])
            kept[str(cache)] = int(xr.open_zarr(out).attrs["series_cache"])
    base = min(times["4"])
    for cache, runs in times.items():
        spread = ", ".join(f"{t:.2f}" for t in runs)
        ratio = base / min(runs)
        print(f"  cache {cache:>4} (kept {kept[cache]:2d}): best {min(runs):.2f} s ({spread}); 4 / this {ratio:.2f}x")


if __name__ == "__main__":
    main()
