"""Particle-steps per second through a VolumeSeries against a steady Volume, side by side in one run.

The double gyre (``vdbflow.synthetic.unsteady``) on a vec3d lattice of ``--voxel`` (pad 4), as a
steady Volume (the field at t = 0) and as a series of steps every ``--spacing`` time units (in
memory); N seeds on [0.05, 1.95] x [0.05, 0.95]: ``--seeds lattice`` (default) an FTLE job's lattice
in order, or ``random``; RK4 with ``linear`` sampling, ``--steps`` steps of ``--dt``, only the end
saved.  Each run times the steady volume, the series with ``time="linear"`` and ``time="pchip"``
(all in the kernels, window by window for the series), in turn; the ratios of the series' rates to
the steady rate are reported from the medians, with their spread over the paired runs, by the wall
clock and by the process's CPU time (less disturbed by other processes on a shared machine).
``--stagewise N`` also times the stage-by-stage NumPy series path (the one before the kernels took
series) on N seeds.

    python benchmarks/bench_series_particles.py [--points N] [--seeds lattice|random] [--repeat R]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time as clock

import numpy as np
from timing import timed

import vdbflow
from vdbflow import _core
from vdbflow.synthetic import unsteady
from vdbflow.temporal import sources


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--dt", type=float, default=0.05)
    parser.add_argument("--voxel", type=float, default=1 / 64)
    parser.add_argument("--spacing", type=float, default=0.25, help="time between series steps")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stagewise", type=int, default=0, help="seeds for the stage-by-stage series path")
    parser.add_argument(
        "--seeds", choices=("lattice", "random"), default="lattice", help="an FTLE lattice (in order) or random"
    )
    args = parser.parse_args()
    n, steps, dt = args.points, args.steps, args.dt
    T = steps * dt
    gyre = unsteady.double_gyre()
    times = np.arange(0.0, T + args.spacing + 1e-9, args.spacing)
    vols = [unsteady.field_volume(gyre, float(t), args.voxel, pad=4) for t in times]
    steady = vols[0]
    if args.seeds == "random":
        rng = np.random.default_rng(0)
        seeds = np.column_stack([rng.uniform(0.05, 1.95, n), rng.uniform(0.05, 0.95, n), np.zeros(n)])
    else:  # an FTLE job's seeds: a 2:1 lattice over the gyres, row after row
        ny = max(2, int(round(np.sqrt(n / 2))))
        nx = max(2, n // ny)
        lattice = np.meshgrid(np.linspace(0.05, 1.95, nx), np.linspace(0.05, 0.95, ny), [0.0], indexing="ij")
        seeds = np.stack(lattice, -1).reshape(-1, 3)
        n = len(seeds)
    print(
        f"{datetime.date.today()} {platform.machine()} {_core.get_max_threads()} threads, target {_core.CPU_TARGET}; "
        f"double gyre, voxel {args.voxel:g}, {len(times)} series steps every {args.spacing:g}; "
        f"{n:,} {args.seeds} seeds, "
        f"RK4 linear, {steps} steps of {dt:g}"
    )

    def run(source, time, seeds=seeds):
        ds = vdbflow.advect(source, seeds, 0.0, T, dt, "rk4", "linear", save_every=steps, time=time)
        return int((ds.status != 0).sum())

    cases = {
        "steady": lambda: run(steady, "linear"),
        "series linear": lambda: run(vdbflow.open_series(vols, times), "linear"),
        "series pchip": lambda: run(vdbflow.open_series(vols, times), "pchip"),
    }
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()  # warm-up
    for _ in range(args.repeat):  # the cases alternate
        for name, fn in cases.items():
            w, c = clock.perf_counter(), clock.process_time()
            fn()
            wall[name].append(clock.perf_counter() - w)
            cpu[name].append(clock.process_time() - c)
    for label, seconds in (("wall clock", wall), ("CPU time", cpu)):
        rate = {name: n * steps / statistics.median(s) for name, s in seconds.items()}
        print(f"-- {label} (medians of {args.repeat} runs; ratio spread over the paired runs)")
        for name in cases:
            line = f"{name:<15} {rate[name] / 1e6:6.2f} M particle-steps/s"
            if name != "steady":
                runs = sorted(ts / tc for ts, tc in zip(seconds["steady"], seconds[name], strict=True))
                line += f"   {rate[name] / rate['steady']:.2f}x steady (runs {runs[0]:.2f}-{runs[-1]:.2f})"
            print(line)
    if args.stagewise:
        m = args.stagewise
        sub = seeds[:m]
        sources.SeriesSource.windowed = False  # type: ignore[assignment,misc]  # the NumPy path
        for time in ("linear", "pchip"):
            s = timed(lambda time=time: run(vdbflow.open_series(vols, times), time, sub), args.repeat)
            print(
                f"stage by stage {time:<6} {m * steps / statistics.median(s) / 1e6:6.2f} M particle-steps/s "
                f"({m:,} seeds, NumPy path)"
            )


if __name__ == "__main__":
    main()
