"""What a point costs by sampling mode, against linear: the figures behind the dry run's time estimate
(vdbflow/jobs/plan.py: KERNEL_COST, HESSIAN_COST).

CPU seconds of one thread (``time.thread_time``; run with ``OMP_NUM_THREADS=1``) a call of
``sample_grad_arrays`` (with the Jacobian) and of ``sample_hessian_arrays``, random points in a dense
96^3 vec3f volume, the modes interleaved in each round; prints the median of the rounds as M points/s
and as a multiple of linear's. CPU time stays steady on a machine that other work shares.

    OMP_NUM_THREADS=1 python benchmarks/bench_mode_costs.py [--points N] [--rounds R] [--modes linear,lag4,...]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import vdbflow
from vdbflow.ops.hessian import sample_hessian_arrays
from vdbflow.ops.request import HESSIAN_MODES
from vdbflow.ops.sampling import MODES

RES = 96


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vol = vdbflow.Volume.from_dense(rng.standard_normal((RES, RES, RES, 3)).astype(np.float32), background=0.0)
    pts = rng.uniform(8, RES - 8, (args.points, 3))
    modes = args.modes.split(",")
    calls = {(m, "grad"): (lambda m=m: vdbflow.sample_grad_arrays(vol, pts, m)) for m in modes}
    calls |= {(m, "hessian"): (lambda m=m: sample_hessian_arrays(vol, pts, m)) for m in modes if m in HESSIAN_MODES}
    times: dict[tuple[str, str], list[float]] = {k: [] for k in calls}
    for fn in calls.values():
        fn()  # warm-up
    for _ in range(args.rounds):
        for key, fn in calls.items():
            t0 = time.thread_time()
            fn()
            times[key].append(time.thread_time() - t0)
    linear = statistics.median(times[("linear", "grad")]) if ("linear", "grad") in times else None
    for (mode, kind), ts in times.items():
        t = statistics.median(ts)
        ratio = f"  x{t / linear:6.2f} of linear" if linear else ""
        print(f"{mode:12s} {kind:8s} {args.points / t / 1e6:7.2f} M points/s{ratio}")


if __name__ == "__main__":
    main()
