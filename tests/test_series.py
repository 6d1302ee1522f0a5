"""Unsteady synthetic fields, volume series and temporal interpolation (issue 17)."""

import numpy as np
import pytest

import vdbflow
from vdbflow.synthetic import unsteady

UNSTEADY = [unsteady.double_gyre(), unsteady.decaying_taylor_green(k=1.0, nu=0.05)]


@pytest.mark.parametrize("field", UNSTEADY, ids=lambda f: f.name)
def test_unsteady_jacobian_is_the_derivative_of_the_velocity(field, rng):
    """Analytic Jacobians against central differences of the analytic velocity; both flows are
    divergence-free and z-independent with w = 0."""
    lo, hi = np.array(field.lo), np.array(field.hi) + [0, 0, 1]
    p = lo + rng.uniform(0, 1, (200, 3)) * (hi - lo)
    t = rng.uniform(0, 10, 200)
    J = field.jacobian(p, t)
    e = 1e-6
    fd = np.stack(
        [
            (field.velocity(p + e * np.eye(3)[a], t) - field.velocity(p - e * np.eye(3)[a], t)) / (2 * e)
            for a in range(3)
        ],
        axis=2,
    )
    np.testing.assert_allclose(J, fd, atol=1e-8)
    assert np.abs(np.trace(J, axis1=1, axis2=2)).max() < 1e-12
    assert np.all(field.velocity(p, t)[:, 2] == 0) and np.all(J[:, :, 2] == 0)


def test_double_gyre_matches_shadden_2005():
    """At t = 0 the double gyre is psi = A sin(pi x) sin(pi y): u = -pi A sin(pi x) cos(pi y)."""
    f = unsteady.double_gyre()
    p = np.array([[0.25, 0.0, 0.0], [1.5, 0.5, 0.0], [0.5, 0.75, 0.3]])
    x, y = p[:, 0], p[:, 1]
    np.testing.assert_allclose(
        f.velocity(p, 0.0)[:, 0], -np.pi * 0.1 * np.sin(np.pi * x) * np.cos(np.pi * y), atol=1e-15
    )
    np.testing.assert_allclose(
        f.velocity(p, 0.0)[:, 1], np.pi * 0.1 * np.cos(np.pi * x) * np.sin(np.pi * y), atol=1e-15
    )
    # period 10: omega = 2 pi / 10
    np.testing.assert_allclose(f.velocity(p, 2.5), f.velocity(p, 12.5), atol=1e-14)
    assert not np.allclose(f.velocity(p, 2.5), f.velocity(p, 7.5))


def test_taylor_green_decays_at_two_nu_k_squared():
    f = unsteady.decaying_taylor_green(k=2.0, nu=0.05)
    p = np.array([[0.3, 0.2, 0.0], [1.1, 0.7, 5.0]])
    np.testing.assert_allclose(f.velocity(p, 3.0), f.velocity(p, 0.0) * np.exp(-2 * 0.05 * 4 * 3.0), rtol=1e-14)


def test_write_series_round_trips_values_and_times(tmp_path):
    f = unsteady.double_gyre()
    times = [0.0, 0.5, 1.25]
    paths = unsteady.write_series(f, tmp_path, times, voxel_size=1 / 16, pad=2)
    assert [p.rsplit("/", 1)[1] for p in paths] == [
        "double_gyre_0000.nvdb",
        "double_gyre_0001.nvdb",
        "double_gyre_0002.nvdb",
    ]
    for path, t in zip(paths, times, strict=True):
        vol = vdbflow.open(path)
        assert vol.units == "m/s" and vol.component_names == ("u", "v", "w")
        ijk = vol.active_voxels()
        world = vol.transform.apply(ijk.astype(np.float64))
        # every voxel of the padded box is active and holds the field at its centre
        assert len(ijk) == (32 + 1 + 4) * (16 + 1 + 4) * (0 + 1 + 4)
        np.testing.assert_allclose(vol.active_values(), f.velocity(world, t), rtol=0, atol=1e-15)
        assert [r.name for r in vol.blind_data] == ["vdbflow.time"]


# -- series and temporal interpolation ------------------------------------------------------------------
H, N_BOX = 0.25, 8  # small dense boxes: voxel centres at (i, j, k) * H, i in [0, 8)


def box_volume(values_at, dtype=np.float64):
    """A dense all-active vec3 volume of ``values_at(world (M, 3)) -> (M, 3)`` on an 8^3 box."""
    axis = np.arange(N_BOX) * H
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)
    vals = values_at(grid.reshape(-1, 3)).reshape(grid.shape).astype(dtype)
    return vdbflow.Volume.from_dense(
        vals, voxel_size=H, active=np.ones(grid.shape[:3], bool), name="velocity", component_names=("u", "v", "w")
    )


def interior_points(rng, n):
    """Points whose trilinear stencil lies inside the 8^3 box."""
    return rng.uniform(0.1, (N_BOX - 1) * H - 0.1, (n, 3))


A0 = np.array([[0.5, -1.0, 0.25], [2.0, 0.0, -0.5], [0.1, 0.3, 1.0]])
A1 = np.array([[-0.2, 0.4, 0.0], [0.0, 1.5, -0.3], [0.7, 0.0, 0.2]])
C0, C1 = np.array([0.3, -0.1, 0.2]), np.array([1.0, 0.5, -2.0])


def linear_in_space_and_time(p, t):
    """u = (A0 + A1 t) x + c0 + c1 t: trilinear sampling and linear-in-time interpolation are exact."""
    t = np.broadcast_to(np.asarray(t, np.float64), (len(p),))[:, None]
    return p @ A0.T + C0 + t * (p @ A1.T + C1)


def test_open_series_is_lazy_and_reads_times_from_the_files(tmp_path):
    times = [0.0, 0.5, 1.0, 2.0, 2.5]
    paths = unsteady.write_series(unsteady.double_gyre(), tmp_path, times, voxel_size=1 / 16, pad=2)
    series = vdbflow.open_series(str(tmp_path / "*.nvdb"))
    np.testing.assert_array_equal(series.times, times)
    assert series.open_steps == () and series.opened == 0
    p = np.array([[0.5, 0.5, 0.0], [1.2, 0.3, 0.0]])
    series.sample(p, 0.75)
    assert sorted(series.open_steps) == [1, 2]  # only the interval's two steps
    series.sample(p, 2.2, time="pchip")
    assert sorted(series.open_steps) == [1, 2, 3, 4]  # i-1 .. i+2 around [2.0, 2.5] (no i+2: the last step)
    small = vdbflow.open_series(paths, times, cache=2)
    small.sample(p, np.array([0.1, 2.4]))  # one point per interval: four steps, two open at a time
    assert len(small.open_steps) == 2 and small.opened == 4


def test_linear_in_time_is_exact_for_fields_linear_in_t(rng):
    times = np.array([0.0, 0.3, 1.0, 1.7, 3.0])  # uneven steps
    vols = [box_volume(lambda p, t=t: linear_in_space_and_time(p, t)) for t in times]
    series = vdbflow.open_series(vols, times)
    p = interior_points(rng, 300)
    t = rng.uniform(0, 3, 300)
    for time in ("linear", "pchip"):  # pchip's slopes are the secants when they agree: exact too
        values, jac = series.sample_grad_arrays(p, t, "linear", time)
        np.testing.assert_allclose(values, linear_in_space_and_time(p, t), rtol=0, atol=1e-12)
        np.testing.assert_allclose(jac, A0[None] + t[:, None, None] * A1[None], rtol=0, atol=1e-12)


@pytest.mark.parametrize("g", [np.sin, np.exp, lambda t: np.where(t < 1.2, t * t, 2.0 - t)], ids=["sin", "exp", "kink"])
def test_pchip_equals_scipy_pchip_over_the_series(g, rng):
    """u(x, t) = (A0 x + c0) g(t): sampled exactly in space, so the series' PCHIP in time must equal
    scipy's PchipInterpolator through the step values - interior intervals (four steps) and the first
    and last (three), monotone and not."""
    from scipy.interpolate import PchipInterpolator

    times = np.array([0.0, 0.4, 0.5, 1.1, 1.9, 2.0, 3.2])
    vols = [box_volume(lambda p, t=t: (p @ A0.T + C0) * g(t)) for t in times]
    series = vdbflow.open_series(vols, times)
    p = interior_points(rng, 200)
    t = np.concatenate([rng.uniform(0, 3.2, 190), times[:5], [0.01, 3.19, 3.2, 0.0, 0.45]])
    values, jac = series.sample_grad_arrays(p, t, "linear", "pchip")
    shape = PchipInterpolator(times, g(times))(t)
    np.testing.assert_allclose(values, (p @ A0.T + C0) * shape[:, None], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(jac, A0[None] * shape[:, None, None], rtol=1e-12, atol=1e-13)


def test_pchip_is_third_order_for_smooth_monotone_data():
    """Error of the four-step PCHIP against exp(t) at 0.3 of each interval falls by ~2^3 per halving
    (at mid-interval the leading slope errors cancel: fourth order there)."""
    from vdbflow.temporal.interpolation import pchip_combine

    errors = []
    for n in (8, 16, 32, 64):
        T = np.linspace(0.0, 1.0, n + 1)
        i = np.arange(1, n - 1)  # intervals with four steps
        tk = np.stack([T[i - 1], T[i], T[i + 1], T[i + 2]], axis=1)
        t = T[i] + 0.3 * (T[i + 1] - T[i])
        errors.append(np.abs(pchip_combine(np.exp(tk)[:, :, None], tk, t)[0][:, 0] - np.exp(t)).max())
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(orders > 2.7) and np.all(orders < 3.3), orders


def test_nearest_step_and_step_times_are_exact(rng):
    times = np.array([0.0, 1.0, 2.5])
    vols = [box_volume(lambda p, t=t: linear_in_space_and_time(p, t)) for t in times]
    series = vdbflow.open_series(vols, times)
    p = interior_points(rng, 50)
    per_step = [vdbflow.sample_grad_arrays(v, p, "linear", space="world")[0] for v in vols]
    # none: the nearest step; a tie (t = 0.5, 1.75) goes to the earlier step
    for t, k in ((0.2, 0), (0.5, 0), (0.51, 1), (1.75, 1), (1.76, 2), (2.5, 2)):
        np.testing.assert_array_equal(series.sample_grad_arrays(p, t, "linear", "none", jacobian=False)[0], per_step[k])
    for time in ("linear", "pchip"):
        for k, t in enumerate(times):
            np.testing.assert_array_equal(
                series.sample_grad_arrays(p, t, "linear", time, jacobian=False)[0], per_step[k]
            )


def test_dataset_carries_time(rng):
    times = np.array([0.0, 1.0, 2.0])
    vols = [box_volume(lambda p, t=t: linear_in_space_and_time(p, t)) for t in times]
    series = vdbflow.open_series(vols, times)
    p = interior_points(rng, 12).reshape(3, 4, 3)
    ds = series.sample_grad(p, 0.25)
    assert ds.time.ndim == 0 and float(ds.time) == 0.25 and ds.attrs["time_interpolation"] == "linear"
    assert ds.velocity.dims == ("point_0", "point_1", "component")
    np.testing.assert_allclose(
        ds.velocity.values, linear_in_space_and_time(p.reshape(-1, 3), 0.25).reshape(3, 4, 3), atol=1e-12
    )
    t = rng.uniform(0, 2, (3, 4))
    ds = series.sample(p, t, time="none")
    assert ds.time.dims == ("point_0", "point_1")
    np.testing.assert_array_equal(ds.time.values, t)
    assert "velocity_jacobian" not in ds


def test_series_errors_say_what_was_expected(tmp_path, rng):
    times = np.array([0.0, 1.0, 2.0])
    vols = [box_volume(lambda p, t=t: linear_in_space_and_time(p, t)) for t in times]
    series = vdbflow.open_series(vols, times)
    p = interior_points(rng, 4)
    with pytest.raises(vdbflow.TimeError, match=r"expected times in \[0, 2\].*got 1 outside, e.g. 2.5"):
        series.sample(p, np.array([0.0, 1.0, 2.5, 1.0]))
    with pytest.raises(vdbflow.TimeError, match="outside, e.g. nan"):
        series.sample(p, np.nan)
    with pytest.raises(vdbflow.TimeError, match=r"strictly increasing times, got times\[2\] = 0.5 after"):
        vdbflow.open_series(vols, [0.0, 1.0, 0.5])
    with pytest.raises(vdbflow.TimeError, match="one time per step"):
        vdbflow.open_series(vols, [0.0, 1.0])
    with pytest.raises(vdbflow.TimeError, match="one per point"):
        series.sample(p, np.zeros(3))
    with pytest.raises(vdbflow.SamplingError, match="expected time to be one of 'none', 'linear', 'pchip'"):
        series.sample(p, 0.5, time="cubic")
    other = vdbflow.Volume.from_dense(np.ones((8, 8, 8, 3)), voxel_size=0.5, name="velocity")
    mixed = vdbflow.open_series([vols[0], other], [0.0, 1.0])
    with pytest.raises(
        vdbflow.VolumeError,
        match=r"expected step 1 \(t=1\) on the grid of step 0 \(t=0\): "
        r"index-to-world",
    ):
        mixed.sample(p, 0.5)
    single = vdbflow.Volume.from_dense(np.ones((8, 8, 8, 3), np.float32), voxel_size=H, name="velocity")
    with pytest.raises(vdbflow.VolumeError, match="value type vec3d, got vec3f"):
        vdbflow.open_series([vols[0], single], [0.0, 1.0]).sample(p, 0.5)
    with pytest.raises(vdbflow.VolumeError, match="expected files matching"):
        vdbflow.open_series(str(tmp_path / "nothing_*.nvdb"))
    vols[0].to_nvdb(str(tmp_path / "plain.nvdb"))
    with pytest.raises(vdbflow.TimeError, match="vdbflow.time"):
        vdbflow.open_series(str(tmp_path / "plain.nvdb"))
    vols[0].to_zarr(str(tmp_path / "step.zarr"))
    with pytest.raises(vdbflow.TimeError, match="expected times=... or steps holding"):
        vdbflow.open_series([tmp_path / "step.zarr"])
    zarr_series = vdbflow.open_series([tmp_path / "step.zarr", vols[1]], [0.0, 1.0])
    np.testing.assert_allclose(
        zarr_series.sample_grad_arrays(p, 0.25, jacobian=False)[0], linear_in_space_and_time(p, 0.25), atol=1e-12
    )


@pytest.mark.parametrize("time", ["linear", "pchip"])
def test_jacobians_are_the_derivative_of_the_interpolated_values(time, rng):
    """u_k(x) = (A0 x) g1(t_k) + (A1 x + c1) g2(t_k), not separable in x and t: the series'
    Jacobians equal central differences of its own values in space (for pchip: the chain rule
    through the data-dependent slopes, not a component-wise interpolation of the step Jacobians)."""
    times = np.array([0.0, 0.4, 0.5, 1.1, 1.9, 2.0, 3.2])

    def u(p, t):
        return (p @ A0.T) * np.sin(2 * t) + (p @ A1.T + C1) * np.exp(-t) * np.cos(3 * t)

    series = vdbflow.open_series([box_volume(lambda p, t=t: u(p, t)) for t in times], times)
    p = interior_points(rng, 100)
    t = rng.uniform(0, 3.2, 100)
    _, jac = series.sample_grad_arrays(p, t, "linear", time)
    e = 1e-6
    fd = np.stack(
        [
            (
                series.sample_grad_arrays(p + e * np.eye(3)[a], t, "linear", time, jacobian=False)[0]
                - series.sample_grad_arrays(p - e * np.eye(3)[a], t, "linear", time, jacobian=False)[0]
            )
            / (2 * e)
            for a in range(3)
        ],
        axis=2,
    )
    np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-7)


# -- distributed ---------------------------------------------------------------------------------------
def test_distributed_series_shares_one_plan_per_topology_and_equals_the_series(tmp_path, rng):
    """Steps distributed as they are needed, at most ``cache`` at once; steps with the same topology
    share one partition plan (so each point goes to the same partition at every step); samples, pchip
    included, and advected particles equal the single-process series bit for bit."""
    distributed = pytest.importorskip("distributed")
    times = [0.0, 0.5, 1.0, 1.5, 2.0]
    paths = unsteady.write_series(unsteady.double_gyre(), tmp_path, times, voxel_size=1 / 16, pad=2)
    # one more step on another grid: its own plan
    sparse = vdbflow.open(paths[-1])
    keep = sparse.topology.leaf_origins[:, 0] < 16
    other = sparse.select_leaves(np.nonzero(keep)[0])
    sources = [*paths, other]
    all_times = [*times, 2.5]
    series = vdbflow.open_series(sources, all_times)
    p = np.column_stack([rng.uniform(0.1, 1.9, 400), rng.uniform(0.1, 0.9, 400), np.zeros(400)])
    t = rng.uniform(0.0, 2.5, 400)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc,
        distributed.Client(lc) as client,
        vdbflow.distribute(series, client, partitions=3, halo=2, cache=2) as dseries,
    ):
        assert isinstance(dseries, vdbflow.DistributedSeries) and dseries.distributed == 0
        for time in ("none", "linear", "pchip"):
            got = dseries.sample_grad_arrays(p, t, "lag4", time)
            want = series.sample_grad_arrays(p, t, "lag4", time)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        assert len(dseries._distributed) <= 2 and dseries.distributed > len(all_times)  # evicted and redone
        plans = {k: dseries.step(k).plan for k in (0, 1)}
        assert plans[0] is plans[1]  # the same topology: one plan
        assert dseries.step(5).plan is not plans[0] and len(dseries._plans) == 2
        seeds = np.column_stack([rng.uniform(0.2, 1.8, 30), rng.uniform(0.2, 0.8, 30), np.zeros(30)])
        got = vdbflow.advect(dseries, seeds, 0.1, 0.9, 0.2, "rk4", "linear", time="pchip")
        want = vdbflow.advect(series, seeds, 0.1, 0.9, 0.2, "rk4", "linear", time="pchip")
        np.testing.assert_array_equal(got.position.values, want.position.values)
        np.testing.assert_array_equal(got.status.values, want.status.values)
        assert "distributed steps" in repr(dseries)
        with pytest.raises(vdbflow.VolumeError, match="a plan of this volume's"):
            vdbflow.distribute(other, client, partitions=3, halo=2, plan=plans[0])
    assert not dseries._distributed  # closed with the block


def test_a_series_directory_with_files_of_another_series_is_refused(tmp_path):
    """write_series refuses a directory that holds more files of its prefix (a glob would mix them in),
    and open_series names both files of two steps at one time."""
    gyre = unsteady.double_gyre()
    unsteady.write_series(gyre, tmp_path, [0.0, 1.0, 2.0, 3.0], voxel_size=0.25, pad=1)
    with pytest.raises(vdbflow.VolumeError, match=r"expected no other double_gyre_\*.nvdb files .* found 2"):
        unsteady.write_series(gyre, tmp_path, [0.5, 1.5], voxel_size=0.25, pad=1)
    unsteady.write_series(gyre, tmp_path / "other", [0.0, 1.0], voxel_size=0.25, pad=1, prefix="double_gyre")
    (tmp_path / "other" / "double_gyre_0001.nvdb").rename(tmp_path / "double_gyre_0009.nvdb")  # t = 1 again
    with pytest.raises(
        vdbflow.TimeError, match=r"one step per time, got 2 or more steps at t=1.0: .*_0001.nvdb and .*_0009.nvdb"
    ):
        vdbflow.open_series(str(tmp_path / "*.nvdb"))


def test_series_sample_grad_takes_the_outputs_a_volume_takes(rng):
    """VolumeSeries.sample_grad(outputs=...) as Volume.sample_grad: derived quantities of the Jacobian and
    velocity interpolated in time (by the kernels' function), and the inside flag over the steps read."""
    from vdbflow.analysis import flow
    from vdbflow.synthetic import unsteady

    times = np.arange(0.0, 2.0 + 1e-9, 0.5)
    f = unsteady.double_gyre()
    series = vdbflow.open_series([unsteady.field_volume(f, t, 1 / 16, pad=3) for t in times], times)
    pts = np.concatenate([rng.uniform(0.1, 1.9, (200, 3)) * [1, 0.5, 0], [[50.0, 50.0, 0.0]]])
    t = rng.uniform(0.0, 2.0, len(pts))
    base = series.sample_grad(pts, t, "lag4", "pchip")
    got = series.sample_grad(pts, t, "lag4", "pchip", outputs=["q_criterion", "vorticity", "helicity", "inside"])
    assert set(got.data_vars) == {"q_criterion", "vorticity", "helicity", "stencil_inside"}
    name = list(base.data_vars)[0]
    jac = base[f"{name}_jacobian"]
    np.testing.assert_array_equal(got["q_criterion"].values, flow.q_criterion(jac).values)
    np.testing.assert_array_equal(got["vorticity"].values, flow.vorticity(jac).values)
    np.testing.assert_array_equal(got["helicity"].values, flow.helicity(base[name], jac).values)
    assert got["q_criterion"].attrs["long_name"] == "Q-criterion"
    assert got["stencil_inside"].values[:-1].all() and not got["stencil_inside"].values[-1]
    assert "time" in got.coords
