"""Distributed sampling against one process, side by side in one run.

A sparse vec3f Taylor-Green shell (160^3 box) and N random points in its index bounding box.

- one process: ``Volume.sample_grad`` with 2 kernel threads (points and results in memory);
- a LocalCluster of 2 worker processes x 1 thread, P partitions:
  ``gather``: NumPy points from the client, values and Jacobians computed back to the client;
  ``stream``: points already in the workers' memory (drawn there, 1M-point chunks), results reduced
  there (what a job that writes its results does, without the store); one process has its points in
  memory too;
- routing (``Router.route``) against sampling the same points, one process;
- bytes moved between workers per point (distributed's ``transfer_outgoing_bytes_total``, stream
  variant: the client receives only sums) against the bytes of a point and its results;
- peak worker RSS (a fresh cluster each) for M and 4M points drawn lazily on the workers, M =
  ``--memory-points`` (default 16M: 16 waves of 1M-point chunks, past the start of the pipeline; at
  8M points, 8 waves, the peak is still the ramp-up's).

    python benchmarks/bench_distributed.py [--points N] [--memory-points M] [--repeat R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics

import numpy as np
from timing import timed

import vdbflow
from vdbflow import _core, synthetic
from vdbflow.distribution.plan import near_blocks, plan_partitions

CHUNK = 1 << 20


def spread(ts: list[float]) -> str:
    return f"median {statistics.median(ts):.3f} s (min {min(ts):.3f}, max {max(ts):.3f})"


def _peak_rss() -> int:
    """This process's peak resident memory (bytes).  On Linux VmHWM of /proc/self/status: getrusage's
    ru_maxrss keeps the peak of the process that was replaced by exec, so a spawned worker would
    report at least the benchmark's own memory."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _sent_bytes(dask_worker) -> int:
    return dask_worker.transfer_outgoing_bytes_total


def cluster():
    import distributed

    lc = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    return lc, distributed.Client(lc)


def lazy_points(n: int, lo, hi):
    """n random points in [lo, hi + 1) drawn by the workers, 1M-point chunks.  (Dask broadcasts NumPy
    bounds given to ``uniform`` into whole (n, 3) arrays inside the graph: scale unit draws instead.)"""
    import dask.array as da

    return lo + (hi + 1 - lo) * da.random.default_rng(1).uniform(0.0, 1.0, (n, 3), chunks=(CHUNK, 3))


def worker_points(client, n: int, lo, hi):
    """n random points drawn on the workers and kept there."""
    import distributed

    pts = client.persist(lazy_points(n, lo, hi))
    distributed.wait(pts)
    return pts


def streamed(dvol, pts):
    """Lazy sums of the values and Jacobians at points held by the workers."""
    ds = dvol.sample_grad(pts, space="index")
    return ds["velocity"].data.sum(), ds["velocity_jacobian"].data.sum()


def main() -> None:
    import dask

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=8_000_000)
    parser.add_argument("--memory-points", type=int, default=16_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    N, R = args.points, args.repeat
    vol = synthetic.flow_volume(synthetic.taylor_green(), 160)
    lo, hi = vol.topology.index_bbox
    pts = np.random.default_rng(0).uniform(lo, hi + 1, (N, 3))
    inside = vol.active_voxels()[
        np.random.default_rng(2).integers(0, vol.topology.active_voxel_count, N)
    ] + np.random.default_rng(3).random((N, 3))
    print(
        f"vdbflow {vdbflow.__version__}, {platform.processor() or platform.machine()}, "
        f"{vol.leaf_count} leaves, {N:,} points"
    )
    report: dict = {"points": N}

    # routing against sampling, one process, 2 threads
    _core.set_num_threads(2)
    plan = plan_partitions(vol.topology, 8)
    near = near_blocks(vol.topology, plan.stencil, plan.router)
    for label, p in (("bbox", pts), ("inside", inside)):
        t_route = timed(lambda p=p: plan.router.route(p, vol.transform, "index", near), R)
        t_samp = timed(lambda p=p: vdbflow.sample_grad_arrays(vol, p, "linear", space="index"), R)
        ratio = statistics.median(t_route) / statistics.median(t_samp)
        print(f"routing / sampling ({label} points): {ratio:.2f}  route {spread(t_route)}; sample {spread(t_samp)}")
        report[f"route_over_sample_{label}"] = ratio

    # one wave's work in one process, one thread: routing, the P = 2 pieces, assembly, against one piece
    from vdbflow.distribution.forward import assemble_wave, background_rows, route_wave, sample_piece
    from vdbflow.ops.request import SampleRequest

    _core.set_num_threads(1)
    wave = pts[:CHUNK]
    plan2 = plan_partitions(vol.topology, 2)
    near2 = near_blocks(vol.topology, plan2.stencil, plan2.router)
    parts = [vol.select_leaves(np.union1d(o, h)) for o, h in zip(plan2.owned, plan2.halo, strict=True)]
    req = SampleRequest("linear", ("value", "jacobian"), "index")
    routed = route_wave(plan2.router, vol.transform, "index", near2, "cpu", wave)
    sampled = [sample_piece(parts[p], routed[2 + p], req) for p in range(2)]
    shapes, dtypes = req.shapes((), 3), req.dtypes(vol.value_type)
    outputs = tuple((shapes[n], dtypes[n]) for n in req.outputs)
    fills = background_rows(vol.select_leaves(np.zeros(0, np.int64)), req)
    steps = {
        "one piece": lambda: vol.sample_arrays(req, wave),
        "route": lambda: route_wave(plan2.router, vol.transform, "index", near2, "cpu", wave),
        "pieces": lambda: [sample_piece(parts[p], routed[2 + p], req) for p in range(2)],
        "assemble": lambda: assemble_wave((len(wave),), outputs, fills, routed, *sampled),
    }
    costs = {k: min(timed(f, max(R, 3))) for k, f in steps.items()}
    parts_sum = costs["route"] + costs["pieces"] + costs["assemble"]
    print(
        "one 1M-point wave, one thread: "
        + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in costs.items())
        + f"; route + pieces + assemble = {parts_sum / costs['one piece']:.2f} x one piece"
    )
    report["wave_costs"] = costs
    _core.set_num_threads(2)

    single = timed(lambda: vol.sample_grad(pts, space="index"), R)
    t1 = statistics.median(single)
    print(f"one process, 2 threads: {N / t1 / 1e6:.2f} M samples/s ({spread(single)})")
    report["single_s"] = single

    lc, client = cluster()
    try:
        held = worker_points(client, N, lo, hi)
        for P in (8, 2, 17):
            with vdbflow.distribute(vol, client, P) as dvol:

                def gather(dvol=dvol):
                    ds = dvol.sample_grad(pts, space="index")
                    dask.compute(ds["velocity"].data, ds["velocity_jacobian"].data)

                def stream(dvol=dvol):
                    dask.compute(*streamed(dvol, held))

                tg, ts = timed(gather, R), timed(stream, R)
                before = sum(client.run(_sent_bytes).values())
                stream()
                moved = (sum(client.run(_sent_bytes).values()) - before) / N
                rg, rs = statistics.median(tg) / t1, statistics.median(ts) / t1
                print(
                    f"P={P:2d}: gather {rg:.2f}x one process ({spread(tg)}); stream {rs:.2f}x ({spread(ts)}); "
                    f"{moved:.1f} bytes/point between workers (a point and its results: {24 + 12 + 36})"
                )
                report[f"P{P}"] = {
                    "gather_ratio": rg,
                    "stream_ratio": rs,
                    "gather_s": tg,
                    "stream_s": ts,
                    "bytes_per_point": moved,
                }
    finally:
        client.close()
        lc.close()

    # peak worker memory: a fresh cluster for M and for 4M streamed points
    M = args.memory_points
    peaks = {}
    for n in (M, 4 * M):
        lc, client = cluster()
        try:
            with vdbflow.distribute(vol, client, 8) as dvol:
                dask.compute(*streamed(dvol, lazy_points(n, lo, hi)))
                peaks[n] = max(client.run(_peak_rss).values())
        finally:
            client.close()
            lc.close()
    growth = peaks[4 * M] / peaks[M]
    print(
        f"peak worker RSS: {peaks[M] / 2**20:.0f} MiB for {M:,} points, {peaks[4 * M] / 2**20:.0f} MiB for "
        f"{4 * M:,} ({growth:.2f}x)"
    )
    report["peak_rss"] = {str(k): v for k, v in peaks.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
