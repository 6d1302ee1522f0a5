"""Lagrangian particles and FTLE (issue 17) against closed forms and SciPy's solve_ivp on the
analytic velocity."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import vdbflow
from vdbflow import synthetic
from vdbflow.ops.coverage import stencil_inside
from vdbflow.synthetic import unsteady

EXTENT = 2 * np.pi


def rodrigues(axis, angle):
    """Rotation matrix about the unit ``axis`` by ``angle``."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


OMEGA = np.array([0.3, -0.5, 0.8])  # angular velocity of the solid-body rotation
CENTRE = np.full(3, EXTENT / 2)


def rotation_field():
    """u = omega x (x - c): rigid rotation about the shell's centre (linear: trilinear sampling is exact)."""
    W = np.array([[0, -OMEGA[2], OMEGA[1]], [OMEGA[2], 0, -OMEGA[0]], [-OMEGA[1], OMEGA[0], 0]])
    return synthetic.linear_field(W, -W @ CENTRE)


def shell_seeds(rng, n, radius_fraction=0.42):
    d = rng.normal(size=(n, 3))
    return CENTRE + radius_fraction * EXTENT * d / np.linalg.norm(d, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def rotation_shell():
    return synthetic.flow_volume(rotation_field(), 32, EXTENT, np.float64)


@pytest.fixture(scope="module")
def abc_box():
    """ABC flow on a dense, all-active 48^3 float64 box over [0, 2 pi)^3."""
    n = 48
    h = EXTENT / n
    axis = np.arange(n) * h
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)
    values = synthetic.abc_flow().velocity(grid.reshape(-1, 3)).reshape(grid.shape)
    return vdbflow.Volume.from_dense(
        values, voxel_size=h, active=np.ones(grid.shape[:3], bool), name="velocity", component_names=("u", "v", "w")
    )


def abc_reference(seeds, T):
    f = synthetic.abc_flow()
    sol = solve_ivp(
        lambda t, y: f.velocity(y.reshape(-1, 3)).ravel(),
        (0, T),
        seeds.ravel(),
        method="DOP853",
        rtol=1e-13,
        atol=1e-13,
    )
    return sol.y[:, -1].reshape(-1, 3)


# -- trajectories ----------------------------------------------------------------------------------
def test_solid_body_rotation_matches_the_closed_form(rotation_shell, rng):
    seeds = shell_seeds(rng, 40)
    ds = vdbflow.advect(rotation_shell, seeds, 0.0, 3.0, 0.05, "rk4", "linear", save_every=10)
    np.testing.assert_allclose(ds.time.values, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0], atol=1e-12)
    assert np.all(ds.status.values == 0) and np.all(ds.end_time.values == 3.0)
    for s, t in enumerate(ds.time.values):
        exact = CENTRE + (seeds - CENTRE) @ rodrigues(OMEGA, np.linalg.norm(OMEGA) * t).T
        np.testing.assert_allclose(ds.position.values[:, s], exact, rtol=0, atol=1e-6)
    # rk4's error in a rotation is a phase error of (h |omega|)^5 / 120 per step: bound it
    radius = np.linalg.norm(seeds - CENTRE, axis=1).max()
    err = np.abs(
        ds.position.values[:, -1] - (CENTRE + (seeds - CENTRE) @ rodrigues(OMEGA, np.linalg.norm(OMEGA) * 3.0).T)
    ).max()
    assert err < 2 * radius * 60 * (0.05 * np.linalg.norm(OMEGA)) ** 5 / 120


def test_abc_trajectories_match_solve_ivp(abc_box, rng):
    seeds = np.pi + rng.uniform(-0.5, 0.5, (16, 3))
    ds = vdbflow.advect(abc_box, seeds, 0.0, 1.0, 0.025, "rk4", "lag6")
    assert np.all(ds.status.values == 0)
    np.testing.assert_allclose(ds.position.values[:, -1], abc_reference(seeds, 1.0), rtol=0, atol=2e-7)
    # the analytic field through the same integrator: the same trajectories up to the sampling error
    analytic = vdbflow.advect(synthetic.abc_flow(), seeds, 0.0, 1.0, 0.025, "rk4")
    np.testing.assert_allclose(ds.position.values, analytic.position.values, rtol=0, atol=2e-7)


@pytest.mark.parametrize(
    "method, dts, order",
    [("rk4", (0.2, 0.1, 0.05), 4), ("rk2", (0.1, 0.05, 0.025), 2), ("euler", (0.05, 0.025, 0.0125), 1)],
)
def test_measured_convergence_order_in_dt(abc_box, method, dts, order, rng):
    """Final-position error against solve_ivp on the analytic ABC velocity, the field sampled with
    JHTDB's M2Q8 on a 48^3 box (trajectory error from sampling ~1e-9, below every integration error
    here; with lag6, ~1e-8, rk4's last order drops to ~3.7)."""
    seeds = np.pi + rng.uniform(-0.5, 0.5, (8, 3))
    ref = abc_reference(seeds, 1.0)
    errors = [
        np.abs(vdbflow.advect(abc_box, seeds, 0.0, 1.0, dt, method, "m2q8").position.values[:, -1] - ref).max()
        for dt in dts
    ]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(np.abs(orders - order) < 0.3), (errors, orders)


def test_backward_integration_returns_to_the_seeds(abc_box, rng):
    seeds = np.pi + rng.uniform(-0.5, 0.5, (8, 3))
    fwd = vdbflow.advect(abc_box, seeds, 0.0, 0.5, 0.02, "rk4", "lag4")
    back = vdbflow.advect(abc_box, fwd.position.values[:, -1], 0.5, 0.0, 0.02, "rk4", "lag4")
    np.testing.assert_allclose(back.time.values[[0, -1]], [0.5, 0.0])
    np.testing.assert_allclose(back.position.values[:, -1], seeds, rtol=0, atol=1e-8)


def test_velocity_and_jacobian_along_paths_are_the_samples_at_the_positions(rotation_shell, rng):
    seeds = shell_seeds(rng, 10)
    ds = vdbflow.advect(
        rotation_shell, seeds, 0.0, 1.0, 0.1, "rk2", "linear", with_velocity=True, with_jacobian=True, save_every=3
    )
    assert ds.velocity.dims == ("particle", "time", "component")
    assert ds.velocity_jacobian.dims == ("particle", "time", "component", "axis")
    pos = ds.position.values.reshape(-1, 3)
    values, jac = vdbflow.sample_grad_arrays(rotation_shell, pos, "linear", space="world", jacobian_space="world")
    np.testing.assert_array_equal(ds.velocity.values.reshape(-1, 3), values)
    np.testing.assert_array_equal(ds.velocity_jacobian.values.reshape(-1, 3, 3), jac)
    np.testing.assert_allclose(ds.velocity.values.reshape(-1, 3), rotation_field().velocity(pos), atol=1e-12)


# -- status flags ----------------------------------------------------------------------------------
def _last_valid_step(vol, seed, velocity, h, n, nodes, mode):
    """Oracle for a constant velocity (every integrator exact): the last step k whose position and
    all stage points of the steps before it have their stencil on active voxels."""
    for k in range(n + 1):
        if not stencil_inside(vol, (seed + k * h * velocity)[None], mode)[0]:
            return k - 1
        if k < n:
            stages = seed + (k + np.asarray(nodes))[:, None] * h * velocity
            if not stencil_inside(vol, stages, mode).all():
                return k
    return n


@pytest.mark.parametrize("method, nodes", [("euler", [0.0]), ("rk4", [0.0, 0.5, 1.0])])
def test_particles_leaving_the_shell_stop_with_status_1(method, nodes, rng):
    e = np.array([1.0, 0.3, 0.0])
    vol = synthetic.flow_volume(synthetic.linear_field(np.zeros((3, 3)), e), 32, EXTENT, np.float64)
    seeds = shell_seeds(rng, 30)
    h, n = 0.1, 60
    ds = vdbflow.advect(vol, seeds, 0.0, n * h, h, method, "linear")
    status, pos = ds.status.values, ds.position.values
    assert np.all(status == 1)  # a straight line leaves a 32^3 shell within 6 units
    for p in range(len(seeds)):
        k = _last_valid_step(vol, seeds[p], e, h, n, nodes, "linear")
        assert ds.end_time.values[p] == pytest.approx(k * h)
        np.testing.assert_allclose(pos[p, : k + 1], seeds[p] + np.arange(k + 1)[:, None] * h * e, atol=1e-12)
        assert np.all(np.isnan(pos[p, k + 1 :]))
    # every stored position is in the data
    stored = pos.reshape(-1, 3)
    stored = stored[np.isfinite(stored).all(axis=1)]
    assert stencil_inside(vol, stored, "linear").all()


def test_non_finite_seeds_and_values_stop_with_status_2():
    n, h = 16, 0.25
    values = np.zeros((n, n, n, 3))
    values[..., 0] = 1.0  # u = (1, 0, 0)
    values[12:] = np.nan  # no data beyond x = 3
    vol = vdbflow.Volume.from_dense(values, voxel_size=h, active=np.ones((n, n, n), bool), name="velocity")
    seeds = np.array([[0.5, 2.0, 2.0], [np.nan, 2.0, 2.0], [1.0, 1.0, np.inf], [-5.0, 2.0, 2.0]])
    ds = vdbflow.advect(vol, seeds, 0.0, 4.0, 0.25, "euler", "linear")
    np.testing.assert_array_equal(ds.status.values, [2, 2, 2, 1])
    # particle 0 is valid while its cell's corners hold data: x <= 2.5; at x = 2.75 (index 11) the
    # trilinear stencil reads voxel 12 (x = 3, NaN) with weight 0, and NaN * 0 is NaN
    last = int(np.nonzero(np.isfinite(ds.position.values[0, :, 0]))[0].max())
    assert ds.position.values[0, last, 0] == pytest.approx(2.5)
    assert ds.end_time.values[0] == pytest.approx(2.0)
    assert np.all(np.isnan(ds.position.values[1:])) and np.all(np.isnan(ds.end_time.values[1:]))


# -- unsteady flows and FTLE -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def gyre_series():
    """The double gyre every 0.25 time units on [0, 5], voxel 1/32, in memory."""
    times = np.arange(0.0, 5.0 + 1e-9, 0.25)
    f = unsteady.double_gyre()
    return vdbflow.open_series([unsteady.field_volume(f, t, 1 / 32, pad=3) for t in times], times)


def gyre_oracle(seeds, T):
    """solve_ivp on the analytic double gyre with its variational equation: final positions (..., 2)
    and flow-map gradients (..., 2, 2)."""
    f = unsteady.double_gyre()
    lead = seeds.shape[:-1]
    n = int(np.prod(lead))

    def rhs(t, y):
        p = np.zeros((n, 3))
        p[:, :2] = y[: 2 * n].reshape(n, 2)
        F = y[2 * n :].reshape(n, 2, 2)
        return np.concatenate([f.velocity(p, t)[:, :2].ravel(), (f.jacobian(p, t)[:, :2, :2] @ F).ravel()])

    y0 = np.concatenate([seeds[..., :2].reshape(-1), np.tile(np.eye(2).ravel(), n)])
    y = solve_ivp(rhs, (0.0, T), y0, method="DOP853", rtol=1e-11, atol=1e-12).y[:, -1]
    return y[: 2 * n].reshape(lead + (2,)), y[2 * n :].reshape(lead + (2, 2))


def ftle_of(F, T):
    return np.log(np.linalg.eigvalsh(np.einsum("...ca,...cb->...ab", F, F))[..., -1]) / (2 * abs(T))


def test_double_gyre_trajectories_through_a_series_match_solve_ivp(gyre_series, rng):
    seeds = np.column_stack([rng.uniform(0.1, 1.9, 12), rng.uniform(0.1, 0.9, 12), np.zeros(12)])
    phi, _ = gyre_oracle(seeds, 5.0)
    for time, tol in (("linear", 5e-3), ("pchip", 5e-4)):
        ds = vdbflow.advect(gyre_series, seeds, 0.0, 5.0, 0.1, "rk4", "lag4", time=time, save_every=50)
        assert np.all(ds.status.values == 0) and ds.attrs["time_interpolation"] == time
        np.testing.assert_allclose(ds.position.values[:, -1, :2], phi, rtol=0, atol=tol)
        assert np.all(ds.position.values[:, :, 2] == 0)  # w = 0


def test_double_gyre_ftle_against_a_solve_ivp_flow_map(gyre_series):
    """Variational FTLE (sampled Jacobians) against the exact FTLE of solve_ivp's variational
    equation, and finite-difference FTLE against the same finite differences of solve_ivp's flow map
    on the same coarse lattice; their disagreement is the finite differences' own."""
    T = 5.0
    X, Y = np.meshgrid(np.linspace(0.1, 1.9, 15), np.linspace(0.1, 0.9, 8))
    seeds = np.stack([X, Y, np.zeros_like(X)], axis=-1)
    phi, F = gyre_oracle(seeds, T)
    exact = ftle_of(F, T)
    Ffd = np.stack([np.gradient(phi, X[0], axis=1), np.gradient(phi, Y[:, 0], axis=0)], axis=-1)
    exact_fd = ftle_of(Ffd, T)
    assert np.abs(exact - exact_fd).max() > 0.05  # the lattice is coarse: finite differences differ
    var = vdbflow.ftle(gyre_series, seeds, 0.0, T, 0.1, mode="lag4", time="pchip")
    fd = vdbflow.ftle(gyre_series, seeds, 0.0, T, 0.1, mode="lag4", time="pchip", method="finite_difference")
    assert var.ftle.dims == ("point_0", "point_1") and var.ftle.shape == (8, 15)
    assert np.all(var.status.values == 0)
    np.testing.assert_allclose(var.x.values, X)
    np.testing.assert_allclose(var.ftle.values, exact, rtol=0, atol=1e-3)
    np.testing.assert_allclose(fd.ftle.values, exact_fd, rtol=0, atol=1e-3)
    np.testing.assert_allclose(var.ftle.values - fd.ftle.values, exact - exact_fd, rtol=0, atol=2e-3)
    np.testing.assert_allclose(var.final_position.values[..., :2], phi, rtol=0, atol=1e-3)


def test_variational_and_finite_difference_ftle_agree_on_a_fine_lattice(gyre_series):
    d = 1e-3
    X, Y = np.meshgrid(0.7 + d * np.arange(-1, 2), 0.3 + d * np.arange(-1, 2))
    seeds = np.stack([X, Y, np.zeros_like(X)], axis=-1)
    var = vdbflow.ftle(gyre_series, seeds, 0.0, 5.0, 0.1, mode="lag4", time="pchip")
    fd = vdbflow.ftle(gyre_series, seeds, 0.0, 5.0, 0.1, mode="lag4", time="pchip", method="finite_difference")
    assert abs(float(var.ftle[1, 1]) - float(fd.ftle[1, 1])) < 1e-4


def test_ftle_of_a_linear_saddle_is_its_largest_rate():
    """u = diag(1, -0.4, -0.6) x: F = exp(A T), FTLE = 1 forward and 0.6 backward, on a sampled box."""
    A = np.diag([1.0, -0.4, -0.6])
    n, h = 16, 0.25
    axis = np.arange(n) * h - 1.875
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1)
    vol = vdbflow.Volume.from_dense(
        grid @ A.T, voxel_size=h, origin=(-1.875,) * 3, name="velocity", active=np.ones((n, n, n), bool)
    )
    seeds = np.array([[0.01, 0.2, -0.3], [0.05, -0.5, 0.5]])
    fwd = vdbflow.ftle(vol, seeds, 0.0, 1.0, 0.01)
    np.testing.assert_allclose(fwd.ftle.values, 1.0, atol=1e-9)
    back = vdbflow.ftle(vol, seeds, 0.0, -1.0, 0.01)
    np.testing.assert_allclose(back.ftle.values, 0.6, atol=1e-9)


# -- distributed -------------------------------------------------------------------------------------
def test_distributed_advection_equals_single_process_bit_for_bit(rotation_shell, rng):
    """Resident particles with a halo of one voxel: steps leave their partition's data all the time,
    and are taken again stage by stage in the partition or, beyond its reach, by the client."""
    distributed = pytest.importorskip("distributed")
    seeds = np.concatenate([shell_seeds(rng, 20), shell_seeds(rng, 4, 0.3), [[np.nan, 1.0, 1.0]]])
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        dvol = vdbflow.distribute(rotation_shell, client, partitions=3, halo=1)
        try:
            got = vdbflow.advect(dvol, seeds, 0.0, 2.0, 0.2, "rk4", "linear", with_jacobian=True)
            got_ftle = vdbflow.ftle(dvol, seeds[:6], 0.0, 1.0, 0.25)
            assert got.position.chunks is not None  # lazy: the trajectories are on the workers
            got, got_ftle = got.compute(), got_ftle.compute()
        finally:
            dvol.close()
    assert got.attrs["migrations"] > 0 and 0 < got.attrs["client_steps"] < got.attrs["stage_by_stage_steps"]
    want = vdbflow.advect(rotation_shell, seeds, 0.0, 2.0, 0.2, "rk4", "linear", with_jacobian=True)
    assert got.attrs["source"] == "distributed" and got.attrs["sample_calls"] == want.attrs["sample_calls"]
    np.testing.assert_array_equal(got.status.values, want.status.values)
    assert set(want.status.values.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(got.position.values, want.position.values)
    np.testing.assert_array_equal(got.end_time.values, want.end_time.values)
    np.testing.assert_array_equal(got.velocity_jacobian.values, want.velocity_jacobian.values)
    # F's products are not held to NumPy's rounding in the kernels (only the trajectories are): equal to rounding
    want_ftle = vdbflow.ftle(rotation_shell, seeds[:6], 0.0, 1.0, 0.25)
    np.testing.assert_array_equal(got_ftle.final_position.values, want_ftle.final_position.values)
    np.testing.assert_allclose(got_ftle.ftle.values, want_ftle.ftle.values, rtol=0, atol=1e-14)
    # the particles crossed partitions: their cells' owners changed along the paths
    assert np.ptp(got.position.values[:20, :, 0]) > 0.5 * EXTENT


# -- errors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "mode", "dtype"),
    [
        ("rk4", "linear", np.float32),
        ("rk2", "lag4", np.float64),
        ("euler", "closest", np.float32),
        ("rk4", "m2q8", np.float64),
    ],
)
def test_compiled_trajectories_equal_the_stage_by_stage_integration(method, mode, dtype, rng, monkeypatch):
    """A steady volume's particles are integrated whole in the kernels; the stage-by-stage NumPy
    integration (the path of series and distributed volumes) gives the same bits: positions,
    velocities, Jacobians, status, end times and the count of sample calls."""
    from vdbflow.temporal import sources

    n = 32
    axis = (np.arange(n) + 0.5) * EXTENT / n
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    values = rotation_field().velocity(grid).reshape(n, n, n, 3).astype(dtype)
    vol = vdbflow.Volume.from_dense(values, voxel_size=EXTENT / n, origin=(axis[0],) * 3, name="velocity")
    # particles that stay in the box, particles that rotate out of it, and non-finite ones
    seeds = np.concatenate([shell_seeds(rng, 40, 0.25), shell_seeds(rng, 8, 0.47), [[np.nan, 1.0, 1.0], [1e300, 0, 0]]])
    kw = dict(save_every=3, with_velocity=True, with_jacobian=True)
    compiled = vdbflow.advect(vol, seeds, 0.0, 1.3, 0.1, method, mode, **kw)
    compiled_ftle = vdbflow.ftle(vol, seeds[:10], 0.0, 0.6, 0.1, integrator=method, mode=mode)
    monkeypatch.setattr(sources.VolumeSource, "compiled", False)
    stagewise = vdbflow.advect(vol, seeds, 0.0, 1.3, 0.1, method, mode, **kw)
    stagewise_ftle = vdbflow.ftle(vol, seeds[:10], 0.0, 0.6, 0.1, integrator=method, mode=mode)
    assert {0, 1, 2} <= set(stagewise.status.values.tolist())
    xr_testing = pytest.importorskip("xarray.testing")
    xr_testing.assert_identical(compiled, stagewise)
    np.testing.assert_array_equal(compiled_ftle.final_position.values, stagewise_ftle.final_position.values)
    np.testing.assert_allclose(compiled_ftle.ftle.values, stagewise_ftle.ftle.values, rtol=1e-12, atol=1e-12)


def test_advect_errors_say_what_was_expected(rotation_shell, gyre_series):
    seeds = np.full((2, 3), np.pi)
    with pytest.raises(vdbflow.SamplingError, match="expected method to be one of 'euler', 'rk2', 'rk4', got 'rk3'"):
        vdbflow.advect(rotation_shell, seeds, 0, 1, 0.1, "rk3")
    with pytest.raises(vdbflow.SamplingError, match="expected mode"):
        vdbflow.advect(rotation_shell, seeds, 0, 1, 0.1, mode="cubic")
    with pytest.raises(vdbflow.TimeError, match="expected a finite time step dt > 0, got -0.1"):
        vdbflow.advect(rotation_shell, seeds, 0, 1, -0.1)
    with pytest.raises(vdbflow.TimeError, match=r"inside the series' times \[0.0, 5.0\], got t0=4.0, t1=6.0"):
        vdbflow.advect(gyre_series, seeds, 4, 6, 0.1)
    with pytest.raises(vdbflow.PointsError, match=r"expected seeds of shape \(N, 3\) or \(..., 3\)"):
        vdbflow.advect(rotation_shell, np.zeros((4, 2)), 0, 1, 0.1)
    scalar = vdbflow.Volume.from_dense(np.ones((8, 8, 8)), name="density")
    with pytest.raises(vdbflow.SamplingError, match="expected a vec3 velocity volume .* got 1 component"):
        vdbflow.advect(scalar, seeds, 0, 1, 0.1)
    with pytest.raises(
        vdbflow.SamplingError, match="expected a Volume, VolumeSeries, DistributedSeries, DistributedVolume"
    ):
        vdbflow.advect("velocity.nvdb", seeds, 0, 1, 0.1)
    with pytest.raises(vdbflow.PointsError, match="at least 2 seeds along each"):
        vdbflow.ftle(rotation_shell, np.zeros((1, 4, 3)), 0, 1, method="finite_difference")
    with pytest.raises(vdbflow.TimeError, match="nonzero integration time"):
        vdbflow.ftle(rotation_shell, seeds, 0, 0.0)


@pytest.mark.parametrize("rotated", [False, True], ids=["aligned", "rotated"])
@pytest.mark.parametrize("mode", ["closest", "linear", "lag4", "lag6", "m2q8", "fd8"])
def test_particle_inside_check_equals_coverage(mode, rotated, rng):
    """The particles' inside check (per-leaf masks of base cells learnt on first touch, then one
    lookup a point) against vdbflow.ops.coverage.stencil_inside, on a box with a spherical hole and
    tiles, for an axis-aligned and a rotated transform, with the masks learnt and then reused."""
    from vdbflow.temporal.particles import InsideCheck

    n = 40
    ijk = np.stack(np.meshgrid(*[np.arange(n)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
    keep = np.linalg.norm(ijk - 20, axis=1) > 9
    tiles = (np.array([[48, 0, 0], [48, 8, 0]]), np.array([8, 8]), np.zeros((2, 3)))
    matrix = np.diag([0.5, 0.5, 0.5, 1.0])
    matrix[:3, 3] = (1.0, -2.0, 0.5)
    if rotated:
        matrix[:3, :3] = rodrigues([1.0, 2.0, 0.5], 0.7) * 0.5
    vol = vdbflow.Volume.from_voxels(ijk[keep], np.ones((keep.sum(), 3)), transform=matrix, tiles=tiles)
    check = InsideCheck(vol.topology, mode)
    for _ in range(2):
        pts = vol.transform.apply(rng.uniform(-3, 59, (20000, 3)))
        pts[:3] = [np.nan, 0, 0]
        want = stencil_inside(vol, pts, mode)
        assert 0 < want.sum() < len(pts)
        np.testing.assert_array_equal(check(pts), want)


def test_decaying_taylor_green_from_files_matches_solve_ivp(tmp_path, rng):
    """A series on disk (times from the files, two steps open at a time): particles in the decaying
    Taylor-Green vortex against solve_ivp on the analytic velocity; each step file opened once."""
    f = unsteady.decaying_taylor_green(k=1.0, nu=0.1)
    times = np.linspace(0.0, 2.0, 21)
    unsteady.write_series(f, tmp_path, times, voxel_size=np.pi / 24, pad=3)
    series = vdbflow.open_series(str(tmp_path / "*.nvdb"), cache=2)
    seeds = np.column_stack([rng.uniform(0.3, 2.8, 10), rng.uniform(0.3, 2.8, 10), np.zeros(10)])
    ds = vdbflow.advect(series, seeds, 0.0, 2.0, 0.05, "rk4", "lag4", time="linear", save_every=40)
    sol = solve_ivp(
        lambda t, y: f.velocity(y.reshape(-1, 3), t).ravel(),
        (0.0, 2.0),
        seeds.ravel(),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
    )
    assert np.all(ds.status.values == 0)
    np.testing.assert_allclose(ds.position.values[:, -1], sol.y[:, -1].reshape(-1, 3), rtol=0, atol=2e-4)
    assert series.opened == len(times) and len(series.open_steps) <= 2


def test_particles_on_an_unknown_device_or_a_series_on_the_gpu_are_refused(rotation_shell, gyre_series):
    with pytest.raises(vdbflow.DeviceError, match="expected device 'cpu' or 'cuda', got 'tpu'"):
        vdbflow.advect(rotation_shell, [[3.0, 3.0, 0.5]], 0.0, 1.0, 0.1, device="tpu")
    with pytest.raises(vdbflow.DeviceError, match="for device='cuda'.*got a VolumeSeries with time='none'"):
        vdbflow.ftle(gyre_series, [[0.5, 0.5, 0.0]], 0.0, 1.0, time="none", device="cuda")


def test_advect_with_ftle_is_the_variational_ftle_of_the_same_run(abc_box, rng):
    seeds = rng.uniform(2.0, 4.0, (12, 3))
    ds = vdbflow.advect(abc_box, seeds, 0.0, 0.8, 0.05, "rk4", "lag4", save_every=4, with_ftle=True)
    want = vdbflow.ftle(abc_box, seeds, 0.0, 0.8, 0.05, mode="lag4")
    np.testing.assert_array_equal(ds.position.values[:, -1], want.final_position.values)
    np.testing.assert_array_equal(ds.ftle.values, want.ftle.values)
    assert ds.ftle.dims == ("particle",) and np.isfinite(ds.ftle.values).all()
    with pytest.raises(vdbflow.TimeError, match="expected t1 != t0 for with_ftle"):
        vdbflow.advect(abc_box, seeds, 0.5, 0.5, 0.05, with_ftle=True)


def test_times_and_steps_that_cannot_be_integrated_are_time_errors(rotation_shell):
    seeds = [[3.0, 3.0, 0.5]]
    with pytest.raises(vdbflow.TimeError, match="expected at most 10,000,000 steps"):
        vdbflow.advect(rotation_shell, seeds, 0.0, 1.0, 1e-12)  # not a MemoryError from the step plan
    with pytest.raises(vdbflow.TimeError, match="expected a real number for dt, got None"):
        vdbflow.advect(rotation_shell, seeds, 0.0, 1.0, None)
    with pytest.raises(vdbflow.TimeError, match="expected a real number for T, got '1'"):
        vdbflow.ftle(rotation_shell, seeds, 0.0, "1")
    ijk = np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), -1).reshape(-1, 3)
    integers = vdbflow.Volume.from_voxels(ijk, np.zeros((len(ijk), 3), np.int32))
    with pytest.raises(vdbflow.DeviceError, match="expected a float Volume.*for device='cuda'.*got a .*int32.* Volume"):
        vdbflow.advect(integers, seeds, 0.0, 1.0, 0.1, "euler", "closest", device="cuda")
