"""A volume no worker can hold: partitioned sampling of a >= 3 GB .nvdb against one process, side by side.

The volume (made once, then cached): a Taylor-Green shell (radii 0.495 and 0.5 of the box edge) in a
``--resolution``^3 box (default 2048: 528,512 vec3f leaves, 3.3 GB), built leaf block by leaf
block into a ``numpy.memmap`` and saved from it (docs/nanovdb.md, "A volume larger than memory"), so
that building it never holds the values in memory either.

Measured, in one run:

- one process (2 kernel threads), the file memory-mapped: ``sample_grad`` of N points uniform in the
  shell, samples/s, and max |J - J_exact| over the points whose stencil lies inside the shell (the
  analytic Jacobian; the trilinear bound at h = 2 pi / resolution);
- a LocalCluster of W worker processes x 1 thread whose ``memory_limit`` is ``--limit`` x the file size
  for W = 2 (default 0.9: neither worker could hold the volume), and for more workers what a worker's
  share needs (its largest partition and ``vdbflow.distribution.fit.RESERVE`` under Dask's pause
  threshold, +5 %): ``distribute(path)`` time, the
  client's and each worker's resident memory (what Dask's monitor sees) after it, the same points drawn
  on the workers, sampled and reduced there (samples/s against one process), each worker's peak
  resident memory, and the bytes moved between workers per point (distributed's transfer counters)
  against the minimum (a remote point's 24 B to its owner and its 48 B of results back);
- bit identity: 200,000 NumPy points sampled both ways;
- ``--job``: ``vdbflow run`` of a job on the same file with partitions, the workers' limit as above.

    python benchmarks/bench_scale.py [--resolution 2048] [--points 16000000] [--workers 2 4 8]
                                     [--cache DIR] [--limit 0.9] [--job] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

INNER, OUTER = 0.495, 0.5  # a thin shell: at 2048^3, 528,512 leaves (a 3.3 GB file)
EXTENT = 2 * np.pi
BLOCK = 4096  # leaves a block while building


def _status(*keys: str) -> dict[str, int]:
    """Fields of /proc/self/status in bytes (VmRSS, VmHWM, RssFile, ...)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in keys:
                out[key] = int(line.split()[1]) * 1024
    return out


def worker_memory(dask_worker=None) -> dict[str, int]:
    return _status("VmRSS", "VmHWM", "RssFile", "RssAnon")


def sent_bytes(dask_worker) -> int:
    return dask_worker.transfer_outgoing_bytes_total


# -- the volume ------------------------------------------------------------------------------------
def shell_leaf_keys(resolution: int) -> np.ndarray:
    """(L, 3) keys of the leaves whose 8^3 block meets the shell, in tree order."""
    from vdbflow.core import tree

    n = resolution // 8
    c = (resolution - 1) / 2.0  # the centre, in voxel coordinates (as leaf_block measures radii)
    lo2, hi2 = (INNER * resolution) ** 2, (OUTER * resolution) ** 2
    axis = np.arange(n)
    j, k = np.meshgrid(axis, axis, indexing="ij")
    parts = []
    for i in range(n):
        # nearest and farthest squared distances of each block's voxels 8i .. 8i + 7 (per axis) to the centre
        lo = np.zeros(j.shape)
        hi = np.zeros(j.shape)
        for a in (np.full(j.shape, i), j, k):
            near = np.clip(c, 8 * a, 8 * a + 7) - c
            far = np.maximum(np.abs(8 * a - c), np.abs(8 * a + 7 - c))
            lo += near**2
            hi += far**2
        keep = (lo <= hi2) & (hi >= lo2)
        parts.append(np.stack([np.full(int(keep.sum()), i), j[keep], k[keep]], 1))
    keys = np.concatenate(parts).astype(np.int64)
    return keys[tree.tree_order(keys)]


def leaf_block(keys: np.ndarray, resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """The masks (n, 8) uint64 and values (n * 512, 3) float32 of leaves ``keys`` (Taylor-Green at the
    voxel centres inside the shell, 0 elsewhere)."""
    from vdbflow import synthetic

    off = np.arange(512)
    local = np.stack([off >> 6, (off >> 3) & 7, off & 7], 1)
    ijk = (keys[:, None, :] * 8 + local[None]).reshape(-1, 3)
    c = (resolution - 1) / 2.0
    r2 = ((ijk - c) ** 2).sum(1)
    active = (r2 >= (INNER * resolution) ** 2) & (r2 <= (OUTER * resolution) ** 2)
    h = EXTENT / resolution
    values = synthetic.taylor_green().velocity((ijk + 0.5) * h).astype(np.float32)
    values[~active] = 0
    bits = active.reshape(len(keys), 8, 64).astype(np.uint64) << np.arange(64, dtype=np.uint64)
    return bits.sum(axis=2, dtype=np.uint64), values


def build_volume(path: str, resolution: int) -> None:
    """The shell volume written to ``path``, leaf block by leaf block through a memory map."""
    from vdbflow.core.transform import Transform
    from vdbflow.core.volume import Topology, Volume
    from vdbflow.io.mapped import release_rows

    keys = shell_leaf_keys(resolution)
    L = len(keys)
    raw = path + ".values.raw"
    values = np.memmap(raw, np.float32, "w+", shape=(L * 512, 3))
    masks = np.empty((L, 8), np.uint64)
    for a in range(0, L, BLOCK):
        b = min(L, a + BLOCK)
        masks[a:b], values[a * 512 : b * 512] = leaf_block(keys[a:b], resolution)
        release_rows(values, a * 512, b * 512)  # written pages back to the file, not held
    h = EXTENT / resolution
    matrix = np.diag([h, h, h, 1.0])
    matrix[:3, 3] = 0.5 * h
    topo = Topology((keys * 8).astype(np.int32), masks, Transform(matrix))
    vol = Volume.from_parts(topo, values, 0.0, None, False, "velocity", ("u", "v", "w"))
    vol.units, vol.length_units = "m/s", "m"
    vol.to_nvdb(path)
    del vol, values
    os.remove(raw)


def shell_points(block_info=None, n: int = 0, resolution: int = 2048, seed: int = 0) -> np.ndarray:
    """Points (index space) uniform in the shell's volume; a Dask ``map_blocks`` function too."""
    if block_info is not None:
        loc = block_info[None]["chunk-location"][0]
        n = block_info[None]["chunk-shape"][0]
        seed = seed * 100_003 + loc
    rng = np.random.default_rng(seed)
    r = (rng.uniform(INNER**3, OUTER**3, n)) ** (1 / 3) * resolution
    d = rng.standard_normal((n, 3))
    d /= np.linalg.norm(d, axis=1)[:, None]
    return (resolution - 1) / 2.0 + d * r[:, None]


def max_error(vol, pts: np.ndarray, jac: np.ndarray, resolution: int) -> float:
    """max |J - J_exact| (world units) over the points whose trilinear stencil is inside the shell."""
    from vdbflow import synthetic

    h = EXTENT / resolution
    c = (resolution - 1) / 2.0
    r = np.linalg.norm(pts - c, axis=1)
    margin = 2 * np.sqrt(3.0)
    ok = (r >= INNER * resolution + margin) & (r <= OUTER * resolution - margin)
    if not ok.any():  # a shell thinner than two stencils
        return float("nan")
    exact = synthetic.taylor_green().jacobian((pts[ok] + 0.5) * h)
    return float(np.abs(jac[ok] / h - exact).max())


# -- runs ------------------------------------------------------------------------------------------
def one_process(path: str, n: int, resolution: int) -> dict:
    import vdbflow
    from vdbflow import _core

    _core.set_num_threads(2)
    vol = vdbflow.open(path)
    pts = shell_points(n=n, resolution=resolution, seed=7)
    times = []
    for _ in range(2):
        t = time.perf_counter()
        ds = vol.sample_grad(pts, space="index")
        times.append(time.perf_counter() - t)
    err = max_error(vol, pts, ds["velocity_jacobian"].values, resolution)
    best = min(times)
    print(
        f"one process: {n / best / 1e6:.2f} M samples/s (runs {', '.join(f'{t:.2f}' for t in times)} s); "
        f"max |J - J_exact| {err:.2e} (h = {EXTENT / resolution:.2e})"
    )
    return {"seconds": times, "rate": n / best, "max_error": err}


def distributed_run(path: str, n: int, workers: int, limit: int, resolution: int, check: bool) -> dict:
    import dask
    import dask.array as da
    import distributed

    import vdbflow

    out: dict = {"workers": workers, "memory_limit": limit}
    with (
        distributed.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, memory_limit=limit, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        start = client.run(worker_memory)
        client_before = _status("VmRSS", "RssFile")
        t = time.perf_counter()
        dv = vdbflow.distribute(path, client)
        out["distribute_s"] = time.perf_counter() - t
        after = client.run(worker_memory)
        client_after = _status("VmRSS", "RssFile")
        stats = dv.stats()
        held = {}
        for s in stats:
            held[s["worker"]] = held.get(s["worker"], 0) + (s["owned_leaves"] + s["halo_leaves"]) * (512 * 12 + 160)
        out["partition_bytes"] = held
        out["worker_rss_after_distribute"] = {w: m["VmRSS"] - start[w]["VmRSS"] for w, m in after.items()}
        out["client_rss_growth"] = client_after["VmRSS"] - client_before["VmRSS"]
        pts = da.map_blocks(
            shell_points, chunks=((1 << 20,) * (n >> 20), (3,)), dtype=np.float64, resolution=resolution, seed=11
        )
        pts = client.persist(pts)
        distributed.wait(pts)
        times = []
        for _ in range(2):
            before = sum(client.run(sent_bytes).values())
            t = time.perf_counter()
            ds = dv.sample_grad(pts, space="index")
            dask.compute(ds["velocity"].data.sum(), ds["velocity_jacobian"].data.sum())
            times.append(time.perf_counter() - t)
            moved = (sum(client.run(sent_bytes).values()) - before) / n
        peak = client.run(worker_memory)
        out.update(seconds=times, rate=n / min(times), bytes_per_point=moved)
        out["worker_peak"] = {w: m["VmHWM"] for w, m in peak.items()}
        remote = 1 - 1 / max(1, workers)  # points whose owner is another worker than the one holding them
        out["bytes_minimum"] = remote * (24 + 12 + 36)
        if check:
            local = vdbflow.open(path)
            probe = shell_points(n=200_000, resolution=resolution, seed=3)
            got = dv.sample_grad(probe, space="index").compute()
            want = local.sample_grad(probe, space="index")
            out["bit_identical"] = all(
                np.array_equal(got[k].values, want[k].values, equal_nan=True) for k in want.data_vars
            )
        dv.close()
    gib = 2**30
    print(
        f"{workers} workers, memory_limit {limit / gib:.2f} GiB: distribute {out['distribute_s']:.1f} s; "
        f"{n / min(times) / 1e6:.2f} M samples/s (runs {', '.join(f'{t:.2f}' for t in times)} s); "
        f"{out['bytes_per_point']:.1f} B/point between workers (minimum {out['bytes_minimum']:.1f}); client +"
        f"{out['client_rss_growth'] / 2**20:.0f} MiB" + (f"; bit-identical: {out['bit_identical']}" if check else "")
    )
    for w in sorted(after):
        print(
            f"  {w}: partition(s) {held.get(w, 0) / gib:.2f} GiB, resident after distribute "
            f"+{out['worker_rss_after_distribute'][w] / gib:.2f} GiB, peak {out['worker_peak'][w] / gib:.2f} GiB "
            f"({out['worker_peak'][w] / limit:.0%} of the limit)"
        )
    return out


def job_run(path: str, n: int, workers: int, limit: int, folder: str) -> dict:
    config = os.path.join(folder, "scale_job.yaml")
    result = os.path.join(folder, "scale_result.zarr")
    with open(config, "w") as f:
        f.write(
            f"""volume:
  path: {path}
points:
  kind: random
  count: {n}
  inside: voxels
  seed: 1
  chunk: 1048576
  space: index
sampling:
  mode: linear
  outputs: [value, jacobian, q_criterion]
partitions: {workers}
cluster:
  kind: local
  workers: {workers}
  threads_per_worker: 1
  memory_limit: "{limit}B"
output:
  path: {result}
  overwrite: always
"""
        )
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", config], capture_output=True, text=True
    )
    seconds = time.perf_counter() - t
    print(f"vdbflow run ({n:,} points, {workers} partitions): exit {done.returncode} in {seconds:.1f} s")
    print(done.stdout[-3000:] if done.returncode == 0 else (done.stdout + done.stderr)[-3000:])
    return {"exit": done.returncode, "seconds": seconds}


def model(topology, counts: list[int], value_bytes: int = 512 * 12) -> dict:
    """Per worker count W (one partition each): the largest and mean partition (own + halo leaves, bytes),
    the halo's share, and the bytes a point moves between workers when the points are spread evenly
    (a remote point's 24 B out and 48 B of value and Jacobian back: 72 (1 - 1/W))."""
    from vdbflow.distribution.fit import partition_bytes
    from vdbflow.distribution.plan import plan_partitions

    out = {}
    for w in counts:
        plan = plan_partitions(topology, w, 1)
        sizes = partition_bytes(plan, value_bytes)
        halo = sum(len(h) for h in plan.halo) / max(1, sum(len(o) for o in plan.owned))
        out[w] = {
            "max": int(sizes.max()),
            "mean": float(sizes.mean()),
            "halo_share": halo,
            "bytes_per_point": 72 * (1 - 1 / w),
        }
        print(
            f"model W={w:4d}: partition {sizes.max() / 2**30:.3f} GiB max, {sizes.mean() / 2**30:.3f} mean; halo "
            f"{halo:.1%} of the leaves; {72 * (1 - 1 / w):.1f} B/point between workers"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolution", type=int, default=2048)
    parser.add_argument("--points", type=int, default=16 << 20)
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--limit", type=float, default=0.9, help="two workers' memory_limit, x the file size")
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vdbflow-bench-scale"))
    parser.add_argument("--job", action="store_true")
    parser.add_argument("--model", type=int, nargs="*", default=[2, 4, 8, 64, 512], help="worker counts to model")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"taylor_green_shell_{args.resolution}_r{INNER}.nvdb")
    if not os.path.exists(path):
        t = time.perf_counter()
        build_volume(path, args.resolution)
        print(f"built {path} in {time.perf_counter() - t:.0f} s")
    size = os.path.getsize(path)
    import vdbflow

    info = vdbflow.list_grids(path)[0]
    print(
        f"vdbflow {vdbflow.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"{path}: {size / 1e9:.2f} GB, {info.leaf_count:,} leaves, {info.active_voxel_count:,} active voxels"
    )
    n = args.points >> 20 << 20
    report: dict = {"file_bytes": size, "leaves": info.leaf_count, "points": n}
    report["one_process"] = one_process(path, n, args.resolution)
    from vdbflow.distribution.fit import RESERVE, memory_fraction, partition_bytes
    from vdbflow.distribution.plan import plan_partitions

    topology = vdbflow.open(path, checksum="head").topology
    report["model"] = model(topology, args.model)
    for w in args.workers:
        # two workers: --limit x the file (neither can hold the volume); more: what their share needs
        share = int(partition_bytes(plan_partitions(topology, w, 1), 512 * 12).max())
        limit = int(args.limit * size) if w == 2 else int(1.05 * (share + RESERVE) / memory_fraction())
        run = distributed_run(path, n, w, limit, args.resolution, check=(w == args.workers[0]))
        run["ratio_to_one_process"] = report["one_process"]["rate"] / run["rate"]
        print(f"  distributed / one process: {run['ratio_to_one_process']:.2f}x the time")
        report[f"W{w}"] = run
    if args.job:
        report["job"] = job_run(path, n, 2, int(args.limit * size), args.cache)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
