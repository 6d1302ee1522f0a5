"""Small kernel calls (issue 26, row 2): advecting 66 particles through a series took 47.5 s, 3.0 s with
OMP_NUM_THREADS=1, because every small call opened an OpenMP team whose other threads had no work and
still cost their start and barrier. A host loop now runs on no more threads than it has chunks of work
(``launch.h threads_for``), a single chunk on the calling thread; results are per point, so a point's
values are the same bits whichever path computes it. A particle job gives every worker seeds."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_run import base_config, write_config

import vdbflow
from vdbflow import _core, synthetic
from vdbflow.jobs.particles import seed_chunk
from vdbflow.ops.request import SampleRequest


@pytest.fixture(scope="module")
def tg():
    return synthetic.flow_volume(synthetic.taylor_green(), 32)


def _points(vol, n, seed=7):
    lo, hi = (np.asarray(b) for b in vol.topology.world_bbox)
    return lo + (hi - lo) * np.random.default_rng(seed).random((n, 3))


def _arrays(ds):
    return [ds[v].values for v in sorted(ds.data_vars)]  # each with the points first


def _derived(vol, points, mode):
    request = SampleRequest(mode, ("value", "q_criterion", "vorticity"), space="world")
    return list(vol.sample_arrays(request, points).values())


def _calls(vol):
    """Entry points of the kernels through the public API, each giving arrays with the points first."""
    return {
        "sample_grad lag4": lambda p: list(vdbflow.sample_grad_arrays(vol, p, mode="lag4")),
        "sample_grad linear (simd)": lambda p: list(vdbflow.sample_grad_arrays(vol, p, mode="linear")),
        "hessian": lambda p: _arrays(vdbflow.sample_hessian(vol, p, mode="lag4")),
        "derived linear (simd)": lambda p: _derived(vol, p, "linear"),
        "derived lag4": lambda p: _derived(vol, p, "lag4"),
        "stencil_inside": lambda p: [vol.stencil_inside(p, mode="lag4")],
    }


@pytest.mark.parametrize("name", list(_calls(None)))
def test_a_small_call_equals_the_same_points_of_a_parallel_call_bit_for_bit(tg, name):
    """66 points alone (one chunk: the calling thread, no team) against the same 66 points at the end
    of 100,000 (many chunks: every thread), and against the large call on one thread."""
    call = _calls(tg)[name]
    small = _points(tg, 66)
    large = np.concatenate([_points(tg, 100_000 - 66, seed=8), small])
    alone, many = call(small), call(large)
    before = _core.get_max_threads()
    try:
        _core.set_num_threads(1)
        serial = call(large)
    finally:
        _core.set_num_threads(before)
    assert len(alone) == len(many) == len(serial) >= 1
    for a, m, s in zip(alone, many, serial, strict=True):
        assert a.shape[0] == 66 and m.shape[0] == 100_000
        assert a.tobytes() == np.ascontiguousarray(m[-66:]).tobytes()
        assert m.tobytes() == s.tobytes()


def test_advect_of_few_particles_equals_the_parallel_path_bit_for_bit(tg):
    seeds = _points(tg, 5)
    few = vdbflow.advect(tg, seeds, 0.0, 0.5, dt=0.05, mode="lag4")
    many = vdbflow.advect(tg, np.concatenate([_points(tg, 5_000, seed=9), seeds]), 0.0, 0.5, dt=0.05, mode="lag4")
    for var in ("position", "status", "end_time"):
        assert few[var].values.tobytes() == many[var].values[-5:].tobytes(), var


SMALL_CALLS = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import vdbflow
    from vdbflow import synthetic

    vol = synthetic.flow_volume(synthetic.taylor_green(), 16)
    pts = np.random.default_rng(0).random((66, 3)) * 6
    me = open("/proc/self/comm").read()
    # OpenMP's threads carry the process's name (a jemalloc_bg_thd some library starts is not counted)
    threads = lambda: sum(open(f"/proc/self/task/{t}/comm").read() == me for t in os.listdir("/proc/self/task"))
    before = threads()  # no kernel has run yet: OpenMP's threads are started by the first parallel region
    for _ in range(20):
        vdbflow.sample_grad_arrays(vol, pts, mode="lag4")
        vdbflow.sample_grad_arrays(vol, pts, mode="linear")
        vol.stencil_inside(pts, mode="lag4")
    small = threads()
    vdbflow.sample_grad_arrays(vol, np.random.default_rng(1).random((200_000, 3)) * 6, mode="lag4")
    print(before, small, threads())
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_small_calls_start_no_openmp_threads():
    """OMP_NUM_THREADS=4: 60 calls of 66 points leave the process with the threads it had (before, each
    started OpenMP's pool of 3 more); a large call then does start them."""
    env = {**os.environ, "OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", SMALL_CALLS], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    before, small, large = map(int, out.stdout.split())
    assert small == before, (before, small, large)
    assert large > small, (before, small, large)


def test_seed_chunks_give_every_worker_seeds():
    assert seed_chunk(20_000, 262_144, 2) == 10_000  # issue 26: one chunk of 20,000 ran on one of two workers
    assert seed_chunk(20_001, 262_144, 2) == 10_001
    assert seed_chunk(66, 262_144, 8) == 9
    assert seed_chunk(5, 262_144, 8) == 1
    assert seed_chunk(1_000_000, 1_000, 2) == 1_000  # points.chunk stays the most a task takes
    assert seed_chunk(10, 100, 0) == 10
    # a lattice's or plane's seeds in whole rows, so that the results unravel without a rechunk
    assert seed_chunk(216**3, 262_144, 2, 216**2) == 5 * 216**2
    assert seed_chunk(1_000, 262_144, 8, 400) == 400  # at least one row
    assert seed_chunk(20_000, 262_144, 2, 100) == 10_000


def test_a_particle_job_splits_its_seeds_for_every_worker(tmp_path):
    """points.chunk larger than the seeds: two workers get an advect task each; the store is the same
    as one task's, bit for bit (particles are independent)."""
    import distributed
    import xarray as xr

    from vdbflow.jobs.particles import ADVECT_KEY

    cfg = base_config(
        tmp_path,
        volume={"synthetic": {"field": "taylor_green", "resolution": 16}},
        points={"kind": "random", "count": 40, "chunk": 1_000, "seed": 1},
        sampling={"mode": "linear"},
        advect={"t1": 0.3, "dt": 0.1},
    )
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        with distributed.get_task_stream(client) as stream:
            vdbflow.run(write_config(tmp_path / "job.yaml", cfg), client=client)
        tasks = {
            r["key"] for r in stream.data if str(r["key"]).startswith(f"('{ADVECT_KEY}") or ADVECT_KEY in str(r["key"])
        }
    assert len(tasks) == 2, tasks
    ds = xr.open_zarr(tmp_path / "result.zarr")
    topo = synthetic.flow_volume(synthetic.taylor_green(), 16)
    want = vdbflow.advect(topo, np.stack([ds[c].values for c in "xyz"], axis=1), 0.0, 0.3, dt=0.1, mode="linear")
    assert ds["position"].values.tobytes() == want["position"].values.tobytes()
