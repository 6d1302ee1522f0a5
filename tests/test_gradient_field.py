"""Gradient fields over the grid: design orders of fd2/fd4/fd6, analytic Taylor-Green quantities,
distributed equal to single-process, and output as volumes."""

import numpy as np
import pytest
from test_schemes import grid_volume, smooth, smooth_grad

import vdbflow
from vdbflow import synthetic


def interior(vol, n, margin=0):
    ijk = vol.active_voxels()
    return np.all((ijk >= margin) & (ijk < n - margin), axis=1)


@pytest.mark.parametrize(("scheme", "order"), [("fd2", 2), ("fd4", 4), ("fd6", 6)])
def test_design_order_at_the_voxels(scheme, order):
    errors, hs = [], []
    for n in (8, 16, 32):
        h = 2.0 / n
        vol = grid_volume(smooth, n, h)
        field = vdbflow.gradient_field(vol, scheme)
        keep = interior(vol, n)
        J = field.active_values().reshape(-1, 3)[keep]
        x = vol.active_voxels()[keep] * h
        errors.append(np.abs(J - smooth_grad(x)).max())
        hs.append(h)
    slope = np.polyfit(np.log(hs), np.log(errors), 1)[0]
    print(f"{scheme}: measured order {slope:.2f}")
    assert order - 0.3 < slope < order + 0.7, (scheme, slope, errors)


def test_taylor_green_vorticity_divergence_and_q_on_the_grid():
    n, h = 32, 2 * np.pi / 32
    tg = synthetic.taylor_green()
    axis = np.arange(-4, n + 4)
    ijk = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    vol = vdbflow.Volume.from_voxels(ijk, tg.velocity(ijk * h), voxel_size=h, name="velocity")
    field = vdbflow.gradient_field(vol, "fd4")
    assert field.components == 9 and field.component_names[1] == "dx/dy"
    keep = np.all((vol.active_voxels() >= 0) & (vol.active_voxels() < n), axis=1)
    x = vol.active_voxels()[keep] * h
    J = field.active_values()[keep].reshape(-1, 3, 3)
    np.testing.assert_allclose(J, tg.jacobian(x), atol=5 * h**4)
    q = vdbflow.q_criterion_field(vol, "fd4").active_values()[keep]
    exact = tg.jacobian(x)
    np.testing.assert_allclose(q, -0.5 * np.einsum("nij,nji->n", exact, exact), atol=10 * h**4)
    div = vdbflow.derived_field(vol, "divergence", "fd4").active_values()[keep]
    np.testing.assert_allclose(div, 0.0, atol=5 * h**4)


def test_distributed_gradient_field_equals_single_process(rng, tmp_path):
    distributed = pytest.importorskip("distributed")
    vol = synthetic.flow_volume(synthetic.abc_flow(), resolution=24, dtype=np.float64)
    with (
        distributed.LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        dvol = vdbflow.distribute(vol, client, 5, halo=vdbflow.ops.sampling.STENCIL_RADIUS["fd4"])
        a = vdbflow.gradient_field(vol, "fd4")
        b = vdbflow.gradient_field(vol, "fd4", distributed=dvol)
        np.testing.assert_array_equal(a.active_values(), b.active_values())
        qa = vdbflow.q_criterion_field(vol, "fd4")
        qb = vdbflow.q_criterion_field(vol, "fd4", distributed=dvol)
        np.testing.assert_array_equal(qa.active_values(), qb.active_values())
        dvol.close()
    qa.to_nvdb(str(tmp_path / "q.nvdb"))  # a scalar field goes to .nvdb
    back = vdbflow.open(tmp_path / "q.nvdb")
    np.testing.assert_array_equal(back.active_values(), qa.active_values())


def test_bad_requests():
    vol = grid_volume(smooth, 4, 0.5)
    with pytest.raises(vdbflow.SamplingError, match="'fd2', 'fd4', 'fd6'"):
        vdbflow.gradient_field(vol, "lag4")
    with pytest.raises(vdbflow.SamplingError, match="vec3 volume"):
        vdbflow.q_criterion_field(vol)


def test_burgers_vortex_vorticity_and_divergence_on_the_grid():
    bv = synthetic.burgers_vortex(circulation=2.0, strain=1.0, core_radius=0.5)
    n, h = 40, 0.05
    axis = np.arange(-n // 2 - 4, n // 2 + 4)
    ijk = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    vol = vdbflow.Volume.from_voxels(ijk, bv.velocity(ijk * h), voxel_size=h, name="velocity")
    keep = np.all(np.abs(vol.active_voxels()) < n // 2, axis=1)
    x = vol.active_voxels()[keep] * h
    r2 = x[:, 0] ** 2 + x[:, 1] ** 2
    omega_z = 2.0 / (np.pi * 0.25) * np.exp(-r2 / 0.25)
    J = vdbflow.gradient_field(vol, "fd6").active_values()[keep].reshape(-1, 3, 3)
    np.testing.assert_allclose(J, bv.jacobian(x), atol=2e-4)
    np.testing.assert_allclose(J[:, 1, 0] - J[:, 0, 1], omega_z, atol=2e-4)
    div = vdbflow.derived_field(vol, "divergence", "fd6").active_values()[keep]
    np.testing.assert_allclose(div, 0.0, atol=2e-4)


def test_gradient_field_device_errors():
    vol = vdbflow.Volume.from_voxels(np.zeros((1, 3), int), np.ones(1, np.float32))
    with pytest.raises(vdbflow.SamplingError, match="device 'cpu' or 'cuda'"):
        vdbflow.gradient_field(vol, "fd2", device="tpu")
    with pytest.raises(vdbflow.SamplingError, match="float data"):
        vdbflow.gradient_field(vdbflow.Volume.from_voxels(np.zeros((1, 3), int), np.ones(1, np.int32)), "fd2")


def test_derived_fields_carry_the_units_sample_grad_gives():
    """q_criterion_field and derived_field fill in units as sample_grad does for the same quantity (the
    new-user pass found Q's field without units, so they never reached a saved .nvdb)."""
    i, j, k = np.meshgrid(np.arange(12.0), np.arange(12.0), np.arange(12.0), indexing="ij")
    u = np.stack([5.5 - j, i - 5.5, 0.1 * k], axis=-1)
    vel = vdbflow.Volume.from_dense(u, voxel_size=0.5, name="velocity", units="m/s", length_units="m")
    from vdbflow.analysis.grid_fields import FIELD_QUANTITIES as FLOW

    sampled = vel.sample_grad([[3.0, 3.0, 3.0]], outputs=("value", "jacobian", *FLOW))
    for name in FLOW:
        field = vdbflow.derived_field(vel, name, "fd2")
        assert field.units == sampled[name].attrs["units"] and field.length_units == "m", name
    assert vdbflow.q_criterion_field(vel, "fd2").units == "1/s^2"
    bare = vdbflow.Volume.from_dense(u, name="velocity")
    assert vdbflow.q_criterion_field(bare, "fd2").units is None
