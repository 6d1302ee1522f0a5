"""Resident particles (issue 28): a distributed advection keeps each partition's particles on its
worker, moves only those that cross partitions, and equals one process's advection bit for bit, also
when a worker dies mid-advection."""

import os
import signal

import numpy as np
import pytest

import vdbflow
from vdbflow import synthetic

distributed = pytest.importorskip("distributed")

EXTENT = 2 * np.pi
OMEGA = np.array([0.3, -0.5, 0.8])  # a solid-body rotation: particles orbit through many partitions
CENTRE = np.full(3, EXTENT / 2)


@pytest.fixture(scope="module")
def rotation_box():
    W = np.array([[0, -OMEGA[2], OMEGA[1]], [OMEGA[2], 0, -OMEGA[0]], [-OMEGA[1], OMEGA[0], 0]])
    return synthetic.flow_volume(synthetic.linear_field(W, -W @ CENTRE), 64, EXTENT, np.float32)


def orbit_seeds(rng, n):
    """Seeds on spheres of radius 0.15 .. 0.46 of the box about its centre: the outer ones leave the data."""
    d = rng.normal(size=(n, 3))
    r = rng.uniform(0.15, 0.46, (n, 1)) * EXTENT
    return CENTRE + r * d / np.linalg.norm(d, axis=1, keepdims=True)


def assert_same_run(got, want):
    for name in ("status", "end_time", "position", "velocity", "velocity_jacobian"):
        if name in want:
            np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    assert got.attrs["sample_calls"] == want.attrs["sample_calls"]


@pytest.mark.slow
def test_eight_worker_processes_seventeen_partitions_equal_one_process(rotation_box, rng):
    """A whole orbit (126 steps): every particle crosses partitions again and again."""
    seeds = orbit_seeds(rng, 300)
    T = 2 * np.pi / np.linalg.norm(OMEGA)
    kwargs = dict(save_every=5, with_velocity=True, with_jacobian=True)
    with (
        distributed.LocalCluster(n_workers=8, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        dvol = vdbflow.distribute(rotation_box, client, partitions=17, halo=8)
        try:
            got = vdbflow.advect(dvol, seeds, 0.0, T, 0.05, "rk4", "linear", **kwargs)
            got_ftle = vdbflow.advect(dvol, seeds[:50], 0.0, T / 4, 0.05, "rk2", "linear", with_ftle=True)
            where, router = {s["worker"] for s in dvol.stats()}, dvol.plan.router
            got, got_ftle = got.compute(), got_ftle.compute()
        finally:
            dvol.close()
    assert len(where) == 8  # the partitions are spread over every worker
    want = vdbflow.advect(rotation_box, seeds, 0.0, T, 0.05, "rk4", "linear", **kwargs)
    assert_same_run(got, want)
    assert set(want.status.values.tolist()) == {0, 1}  # some orbits leave the box
    # particles crossed partitions many times (the owners of their saved positions' cells), in few rounds
    keys = np.floor(rotation_box.transform.apply_inverse(want.position.values[want.status.values == 0]))
    owner = router.partition_of_keys(keys.reshape(-1, 3).astype(np.int64) >> 3).reshape(keys.shape[:2])
    assert np.median((np.diff(owner, axis=1) != 0).sum(axis=1)) >= 4
    assert got.attrs["migrations"] > len(seeds)
    assert 3 < got.attrs["rounds"] < want.attrs["steps"] and got.attrs["client_steps"] == 0
    want_ftle = vdbflow.advect(rotation_box, seeds[:50], 0.0, T / 4, 0.05, "rk2", "linear", with_ftle=True)
    np.testing.assert_array_equal(got_ftle.position.values, want_ftle.position.values)
    np.testing.assert_allclose(got_ftle.ftle.values, want_ftle.ftle.values, rtol=0, atol=1e-14)


@pytest.mark.slow
def test_a_worker_killed_mid_advection_changes_nothing(rotation_box, rng, tmp_path, monkeypatch):
    """The pieces of each round are tasks on the previous round's pieces: a worker lost after the
    second round loses its partitions and pieces, which the scheduler recomputes from that lineage."""
    from vdbflow.temporal import resident

    seeds = orbit_seeds(rng, 200)
    T = 2 * np.pi / np.linalg.norm(OMEGA)
    gather, rounds = resident.gather_summaries, []

    def gather_then_kill(client, calls):
        found = gather(client, calls)
        rounds.append(len(calls))
        if len(rounds) == 2:  # mid-advection: kill a worker that holds partitions and pieces
            victim = sorted({s["worker"] for s in dvol.stats()})[0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
        return found

    monkeypatch.setattr(resident, "gather_summaries", gather_then_kill)
    with (
        distributed.LocalCluster(
            n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None, local_directory=str(tmp_path)
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        dvol = vdbflow.distribute(rotation_box, client, partitions=6, halo=8)
        try:
            got = vdbflow.advect(dvol, seeds, 0.0, T, 0.05, "rk4", "linear", save_every=10).compute()
        finally:
            dvol.close()
    assert len(rounds) > 3  # the run went on after the kill
    want = vdbflow.advect(rotation_box, seeds, 0.0, T, 0.05, "rk4", "linear", save_every=10)
    assert_same_run(got, want)


def test_resident_results_are_lazy_and_write_from_the_workers(rotation_box, rng, tmp_path):
    """The trajectories are Dask arrays assembled on the workers: a store is written chunk by chunk
    without the client holding them."""
    import xarray as xr

    seeds = orbit_seeds(rng, 100)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        dvol = vdbflow.distribute(rotation_box, client, partitions=4, halo=8)
        try:
            got = vdbflow.advect(dvol, seeds, 0.0, 2.0, 0.1, "rk4", "linear", with_velocity=True)
            assert all(v.chunks is not None for v in got.data_vars.values())
            got.to_zarr(tmp_path / "paths.zarr", zarr_format=2)
        finally:
            dvol.close()
    back = xr.open_zarr(tmp_path / "paths.zarr").compute()
    want = vdbflow.advect(rotation_box, seeds, 0.0, 2.0, 0.1, "rk4", "linear", with_velocity=True)
    assert_same_run(back.assign_attrs(sample_calls=want.attrs["sample_calls"]), want)
    assert back.attrs["migrations"] > 0 and back.attrs["source"] == "distributed"


def test_dask_seeds_are_made_and_routed_on_the_workers(rotation_box, rng):
    """Seeds as a Dask array: each chunk is made and routed on a worker (the client never holds them);
    the same trajectories as the seeds in memory through one process."""
    import dask.array as da

    seeds = orbit_seeds(rng, 500)
    lazy = da.from_array(seeds, chunks=(120, 3)).map_blocks(lambda b: b + 0.0)  # made by tasks
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        dvol = vdbflow.distribute(rotation_box, client, partitions=5, halo=8)
        try:
            got = vdbflow.advect(dvol, lazy, 0.0, 2.0, 0.1, "rk2", "linear", with_ftle=True).compute()
        finally:
            dvol.close()
    want = vdbflow.advect(rotation_box, seeds, 0.0, 2.0, 0.1, "rk2", "linear", with_ftle=True)
    assert_same_run(got, want)
    np.testing.assert_allclose(got.ftle.values, want.ftle.values, rtol=0, atol=1e-13)
    with pytest.raises(vdbflow.PointsError, match="expected seeds of shape"):
        vdbflow.advect(rotation_box, da.zeros((4, 2)), 0.0, 1.0, 0.1)


def test_a_halo_smaller_than_the_stencil_is_refused(rotation_box, rng):
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        dvol = vdbflow.distribute(rotation_box, client, partitions=2, halo=1)
        try:
            with pytest.raises(vdbflow.SamplingError, match="expected a halo of at least 2 voxels .* 'lag4'"):
                vdbflow.advect(dvol, orbit_seeds(rng, 5), 0.0, 1.0, 0.1, "rk4", "lag4")
        finally:
            dvol.close()


@pytest.fixture(scope="module")
def rotation_series():
    """A rotation whose rate varies in time, every 0.5 time units on [0, 3] (a 40^3 box)."""
    times = np.arange(0.0, 3.0 + 1e-9, 0.5)
    W = np.array([[0, -OMEGA[2], OMEGA[1]], [OMEGA[2], 0, -OMEGA[0]], [-OMEGA[1], OMEGA[0], 0]])
    steps = [
        synthetic.flow_volume(synthetic.linear_field(W * s, -(W * s) @ CENTRE), 40, EXTENT, np.float32)
        for s in 1 + 0.4 * np.sin(times)
    ]
    return vdbflow.open_series(steps, times)


@pytest.mark.parametrize(
    ("time", "mode", "halo", "kwargs"),
    [
        ("linear", "linear", 1, dict(with_velocity=True, with_jacobian=True)),
        ("pchip", "lag4", 2, dict(with_ftle=True, save_every=3)),
        ("pchip", "linear", 8, dict(save_every=4)),
    ],
)
def test_a_distributed_series_advects_resident_particles_window_by_window(
    rotation_series, rng, time, mode, halo, kwargs
):
    """Through a DistributedSeries the particles stay on the workers from window to window of the
    series' steps (a round or a few per window, not a distributed sampling call per stage); steps are
    distributed as the windows need them and released as time passes them; equal to the series in
    one process bit for bit, with particles moving between partitions inside windows and at their
    ends, and leaving the box (steps the client takes stage by stage)."""
    seeds = orbit_seeds(rng, 150)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
        vdbflow.distribute(rotation_series, client, partitions=6, halo=halo, cache=2) as dseries,
    ):
        got = vdbflow.advect(dseries, seeds, 0.1, 2.9, 0.07, "rk4", mode, time=time, **kwargs).compute()
        distributed_steps, held = dseries.distributed, len(dseries._distributed)
    want = vdbflow.advect(rotation_series, seeds, 0.1, 2.9, 0.07, "rk4", mode, time=time, **kwargs)
    assert_same_run(got, want)
    if "ftle" in want:
        np.testing.assert_allclose(got.ftle.values, want.ftle.values, rtol=0, atol=1e-13)
    assert set(want.status.values.tolist()) == {0, 1}
    a = got.attrs
    assert a["migrations"] > 0 and a["client_steps"] > 0 and a["rounds"] < want.attrs["steps"]
    assert distributed_steps == len(rotation_series) and held <= 5  # each step once; the cache grew to a window


def test_a_series_step_stage_by_stage_is_taken_by_the_client(rotation_series, rng):
    """A step longer than the series' spacing reads more steps than a window holds: every particle
    takes it stage by stage through the distributed series, and the run still equals one process."""
    seeds = orbit_seeds(rng, 40)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
        vdbflow.distribute(rotation_series, client, partitions=3, halo=1) as dseries,
    ):
        got = vdbflow.advect(dseries, seeds, 0.0, 3.0, 0.75, "rk4", "linear", time="linear").compute()
    want = vdbflow.advect(rotation_series, seeds, 0.0, 3.0, 0.75, "rk4", "linear", time="linear")
    assert_same_run(got, want)
    assert got.attrs["client_steps"] > 0
