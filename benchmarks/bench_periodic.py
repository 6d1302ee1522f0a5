"""Periodic volumes: what the wrap costs, side by side in one run.

    python benchmarks/bench_periodic.py [--size 96] [--points 1000000] [--repeat 5] [--baseline DIR]

1. The same fully active size^3 vec3f box sampled as an ordinary volume and as a periodic one (values and
   Jacobians, points inside the box and points spread over 3 periods each way, which the periodic volume
   wraps), per mode: M points/s and the ratio.
2. With ``--baseline DIR`` (an unpacked wheel of an earlier vdbflow, e.g. the commit before periodic
   domains), the ordinary volume's rate in that build against this one, in alternating rounds of two
   subprocesses: what periods cost a volume that has none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from timing import timed

MODES = ("closest", "linear", "lag4", "lag6", "m2q8")


def field(n: int) -> np.ndarray:
    x = np.arange(n) * (2 * np.pi / n)
    X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
    return np.stack([np.sin(Z) + np.cos(Y), np.sin(X) + np.cos(Z), np.sin(Y) + np.cos(X)], -1).astype(np.float32)


def rates(n: int, points: int, repeat: int, periodic: bool, spread: float) -> dict[str, float]:
    """Best M points/s of sample_grad_arrays per mode (index-space points in [-spread n, (1 + spread) n))."""
    import vdbflow

    vol = vdbflow.Volume.from_dense(field(n), active=np.ones((n, n, n), bool))
    if periodic:
        vol = vol.with_periodic(True)
    pts = np.random.default_rng(0).uniform(-spread * n, (1 + spread) * n - 1, (points, 3))
    if spread == 0:
        pts = np.clip(pts, 0, n - 1.001)
    out = {}
    for mode in MODES:
        t = min(timed(lambda mode=mode: vdbflow.sample_grad_arrays(vol, pts, mode), repeat))
        out[mode] = points / t / 1e6
    return out


def baseline_rounds(args: argparse.Namespace) -> None:
    """The ordinary volume in the baseline build and in this one, alternately, ``args.rounds`` times."""
    cmd = [sys.executable, __file__, "--child", "--size", str(args.size), "--points", str(args.points)]
    cmd += ["--repeat", str(args.repeat)]
    here = {**os.environ}
    there = {**os.environ, "PYTHONPATH": args.baseline}  # its sitecustomize.py drops this build's finder
    ratios: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        new = json.loads(subprocess.run(cmd, env=here, capture_output=True, text=True, check=True).stdout)
        old = json.loads(subprocess.run(cmd, env=there, capture_output=True, text=True, check=True).stdout)
        line = "  ".join(f"{m} {new[m]:.2f}/{old[m]:.2f}" for m in MODES)
        print(f"round {r}: this build / baseline M points/s: {line}")
        for m in MODES:
            ratios[m].append(new[m] / old[m])
    for m in MODES:
        q = np.array(ratios[m])
        print(f"{m:<8} this/baseline median {np.median(q):.3f} (min {q.min():.3f}, max {q.max():.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", default=None, help="an unpacked wheel of an earlier build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(rates(args.size, args.points, args.repeat, False, 0.0)))
        return
    import vdbflow

    threads = vdbflow._core.get_max_threads()
    print(f"{args.size}^3 vec3f fully active, {args.points:,} points, sample_grad_arrays, {threads} threads")
    for spread in (0.0, 3.0):
        plain = rates(args.size, args.points, args.repeat, False, 0.0)
        periodic = rates(args.size, args.points, args.repeat, True, spread)
        where = "in the box" if spread == 0 else "over 7 periods per axis (wrapped)"
        print(f"periodic volume, points {where}, against the ordinary volume with points in the box:")
        for m in MODES:
            print(f"  {m:<8} {plain[m]:7.2f} M/s {periodic[m]:7.2f} M/s  ratio {periodic[m] / plain[m]:.3f}")
    if args.baseline:
        baseline_rounds(args)


if __name__ == "__main__":
    main()
