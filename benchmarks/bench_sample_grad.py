"""vec3f linear sample_grad throughput: vdbflow (CPU) against warp-lang (CPU), side by side.

4,000,000 random points in a fully active 128^3 vec3f volume, in random order and pre-sorted
(by leaf, then voxel).  Prints samples/s and ratios; ``--json PATH`` writes them too.

    python benchmarks/bench_sample_grad.py [--points N] [--repeat R] [--device cpu|cuda]

The CPU kernels run for the target chosen at import (``vdbflow._core.CPU_TARGET``: the widest one
compiled that this CPU runs, e.g. x86-64-v3 over the portable x86-64 baseline).  ``--cpu-target T``
asks for another (``baseline`` or a name in ``_core.CPU_TARGETS``); ``--all-targets`` measures every
compiled target this CPU runs, each in its own process, in interleaved rounds (``--rounds``), and
prints the median and range of each (warp-lang left out).  A ``-march=native`` build
(``VDBFLOW_NATIVE=ON``) has the one target ``native``: run the script against it for that column.
``--cpu-time`` measures one thread by its CPU time (``time.thread_time``) instead of the wall clock:
what the code costs, steady on a machine that other work shares.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
from timing import best_of

RES = 128


def best_of_cpu(fn: Callable[[], object], repeat: int) -> float:
    """CPU seconds of this thread in the cheapest of ``repeat`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def sort_by_leaf(points: np.ndarray) -> np.ndarray:
    base = np.floor(points).astype(np.int64)
    leaf = ((base[:, 0] >> 3) * 64 + (base[:, 1] >> 3)) * 64 + (base[:, 2] >> 3)
    voxel = ((base[:, 0] & 7) << 6) | ((base[:, 1] & 7) << 3) | (base[:, 2] & 7)
    return points[np.lexsort((voxel, leaf))]


def warp_runner(dense: np.ndarray, points: np.ndarray):
    import warp as wp

    wp.config.quiet = True
    wp.init()
    volume = wp.Volume.load_from_numpy(dense, bg_value=(0.0, 0.0, 0.0), device="cpu")

    @wp.kernel
    def sample_grad_kernel(
        vid: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3), jac: wp.array(dtype=wp.mat33)
    ):
        i = wp.tid()
        g = wp.mat33()
        out[i] = wp.volume_sample_grad(vid, p[i], wp.Volume.LINEAR, g, dtype=wp.vec3)
        jac[i] = g

    n = len(points)
    pts = wp.array(points, dtype=wp.vec3, device="cpu")
    out = wp.zeros(n, dtype=wp.vec3, device="cpu")
    jac = wp.zeros(n, dtype=wp.mat33, device="cpu")

    def run():
        wp.launch(sample_grad_kernel, dim=n, inputs=[volume.id, pts, out, jac], device="cpu")
        wp.synchronize_device("cpu")

    return run, out, jac


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=4_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--no-warp", action="store_true", help="skip warp-lang (e.g. on a GPU machine without it)")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--cpu-target", help="kernels to run: baseline or one of vdbflow._core.CPU_TARGETS")
    parser.add_argument(
        "--all-targets",
        action="store_true",
        help="measure every compiled CPU target this CPU runs, one process each, without warp-lang",
    )
    parser.add_argument("--rounds", type=int, default=3, help="--all-targets: interleaved rounds per target")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="one thread, timed by its CPU time (steady on a shared machine); CPU only",
    )
    args = parser.parse_args()
    if args.all_targets:
        compare_targets(args)
        return
    if args.cpu_target:  # read when the extension is imported
        os.environ["VDBFLOW_CPU_TARGET"] = args.cpu_target
    import vdbflow
    from vdbflow import _core

    if args.cpu_target and args.cpu_target not in ("baseline", _core.CPU_TARGET):
        raise SystemExit(
            f"CPU target {args.cpu_target} did not load (compiled: {', '.join(_core.CPU_TARGETS)}; "
            f"this CPU runs: {', '.join(_core.CPU_TARGETS_SUPPORTED)})"
        )
    timer = best_of
    if args.cpu_time:
        if args.device != "cpu":
            raise SystemExit("--cpu-time measures the CPU kernels only")
        _core.set_num_threads(1)  # the kernels then run on this thread, which thread_time measures
        timer = best_of_cpu

    rng = np.random.default_rng(42)
    dense = rng.standard_normal((RES, RES, RES, 3)).astype(np.float32)
    vol = vdbflow.Volume.from_dense(dense, background=0.0)
    assert vol.active_voxel_count == RES**3
    random_pts = (rng.random((args.points, 3)) * (RES - 1)).astype(np.float32)
    sorted_pts = sort_by_leaf(random_pts)

    results: dict[str, float | str | int] = {
        "points": args.points,
        "device": args.device,
        "cpu_count": os.cpu_count() or 0,
        "machine": platform.processor(),
        "cpu_target": _core.CPU_TARGET,
        "cpu_target_flags": _core.CPU_TARGET_FLAGS,
        "timing": "thread CPU time, 1 thread" if args.cpu_time else "wall clock",
    }
    xp = np
    if args.device == "cuda":
        import cupy as xp  # noqa: F811

    # vdbflow first, then warp-lang: once initialised, Warp's runtime slows other threaded code in
    # the same process, so each library is measured in a clean state of its own.
    outputs = {}
    for label, pts in (("random", random_pts), ("sorted", sorted_pts)):
        p = xp.asarray(pts)
        values = xp.empty((len(pts), 3), np.float32)
        jac = xp.empty((len(pts), 3, 3), np.float32)

        def run_vdbflow(p=p, values=values, jac=jac):
            vdbflow.sample_grad_arrays(vol, p, "linear", out=(values, jac), device=args.device)
            if args.device == "cuda":
                xp.cuda.Device().synchronize()

        t = timer(run_vdbflow, args.repeat)
        results[f"vdbflow_{label}_samples_per_s"] = len(pts) / t
        outputs[label] = (values.get(), jac.get()) if args.device == "cuda" else (values, jac)
    if not args.no_warp:
        for label, pts in (("random", random_pts), ("sorted", sorted_pts)):
            run_warp, w_out, w_jac = warp_runner(dense, pts)
            tw = timer(run_warp, args.repeat)
            results[f"warp_{label}_samples_per_s"] = len(pts) / tw
            results[f"ratio_{label}"] = results[f"vdbflow_{label}_samples_per_s"] * tw / len(pts)
            v, j = outputs[label]
            scale = 32 * np.finfo(np.float32).eps * np.abs(dense).max()
            results[f"max_abs_diff_{label}"] = float(
                max(np.abs(v - w_out.numpy()).max(), np.abs(j - w_jac.numpy()).max())
            )
            assert results[f"max_abs_diff_{label}"] <= scale * 8, "vdbflow and warp disagree"

    threads = "1 CPU thread, by its CPU time" if args.cpu_time else f"{results['cpu_count']} CPU threads"
    print(
        f"vec3f linear sample_grad, {args.points:,} points, fully active {RES}^3, "
        f"device={args.device}, {threads}, CPU kernels {_core.CPU_TARGET}"
    )
    print(f"{'points':<8} {'vdbflow [M/s]':>14} {'warp-lang CPU [M/s]':>20} {'ratio':>7}")
    for label in ("random", "sorted"):
        v = results[f"vdbflow_{label}_samples_per_s"] / 1e6
        if args.no_warp:
            print(f"{label:<8} {v:>14.2f} {'-':>20} {'-':>7}")
        else:
            w = results[f"warp_{label}_samples_per_s"] / 1e6
            print(f"{label:<8} {v:>14.2f} {w:>20.2f} {results[f'ratio_{label}']:>6.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


def compare_targets(args: argparse.Namespace) -> None:
    """Every compiled target this CPU runs, each in a process of its own, round after round."""
    from vdbflow import _core

    targets = list(_core.CPU_TARGETS_SUPPORTED)
    runs: dict[str, list[dict]] = {t: [] for t in targets}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for target in targets:
                out = os.path.join(tmp, f"{target}-{r}.json")
                ask = "baseline" if target == _core.CPU_TARGETS[0] else target
                subprocess.run(
                    [
                        sys.executable,
                        *(["-S"] if sys.flags.no_site else []),
                        __file__,
                        "--points",
                        str(args.points),
                        "--repeat",
                        str(args.repeat),
                        "--no-warp",
                        *(["--cpu-time"] if args.cpu_time else []),
                        "--cpu-target",
                        ask,
                        "--json",
                        out,
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                with open(out) as fh:
                    runs[target].append(json.load(fh))
    threads = "1 CPU thread, by its CPU time" if args.cpu_time else f"{os.cpu_count()} CPU threads"
    print(
        f"vec3f linear sample_grad, {args.points:,} points, {threads}, "
        f"{args.rounds} rounds of best-of-{args.repeat}: median (min-max) [M samples/s]"
    )
    base = targets[0]
    summary: dict[str, dict[str, float]] = {}
    print(f"{'target':<12} {'random':>22} {'sorted':>22} {'vs ' + base:>18}")
    for target in targets:
        row = []
        for label in ("random", "sorted"):
            rates = [run[f"vdbflow_{label}_samples_per_s"] / 1e6 for run in runs[target]]
            summary.setdefault(target, {})[label] = statistics.median(rates)
            row.append(f"{statistics.median(rates):7.2f} ({min(rates):.2f}-{max(rates):.2f})")
        speedup = "/".join(f"{summary[target][lb] / summary[base][lb]:.2f}x" for lb in ("random", "sorted"))
        print(f"{target:<12} {row[0]:>22} {row[1]:>22} {speedup:>18}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"points": args.points, "rounds": args.rounds, "repeat": args.repeat, "runs": runs}, fh, indent=2)


if __name__ == "__main__":
    main()
