"""Unsteady synthetic fields, volume series and temporal interpolation (issue 17)."""

import numpy as np
import pytest

import vdbflow
from vdbflow import unsteady

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
    fd = np.stack([(field.velocity(p + e * np.eye(3)[a], t) - field.velocity(p - e * np.eye(3)[a], t)) / (2 * e)
                   for a in range(3)], axis=2)
    np.testing.assert_allclose(J, fd, atol=1e-8)
    assert np.abs(np.trace(J, axis1=1, axis2=2)).max() < 1e-12
    assert np.all(field.velocity(p, t)[:, 2] == 0) and np.all(J[:, :, 2] == 0)


def test_double_gyre_matches_shadden_2005():
    """At t = 0 the double gyre is psi = A sin(pi x) sin(pi y): u = -pi A sin(pi x) cos(pi y)."""
    f = unsteady.double_gyre()
    p = np.array([[0.25, 0.0, 0.0], [1.5, 0.5, 0.0], [0.5, 0.75, 0.3]])
    x, y = p[:, 0], p[:, 1]
    np.testing.assert_allclose(f.velocity(p, 0.0)[:, 0], -np.pi * 0.1 * np.sin(np.pi * x) * np.cos(np.pi * y),
                               atol=1e-15)
    np.testing.assert_allclose(f.velocity(p, 0.0)[:, 1], np.pi * 0.1 * np.cos(np.pi * x) * np.sin(np.pi * y),
                               atol=1e-15)
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
    assert [p.rsplit("/", 1)[1] for p in paths] == ["double_gyre_0000.nvdb", "double_gyre_0001.nvdb",
                                                    "double_gyre_0002.nvdb"]
    for path, t in zip(paths, times, strict=True):
        vol = vdbflow.open(path)
        assert vol.units == "m/s" and vol.component_names == ("u", "v", "w")
        ijk = vol.active_voxels()
        world = vol.transform.apply(ijk.astype(np.float64))
        # every voxel of the padded box is active and holds the field at its centre
        assert len(ijk) == (32 + 1 + 4) * (16 + 1 + 4) * (0 + 1 + 4)
        np.testing.assert_allclose(vol.active_values(), f.velocity(world, t), rtol=0, atol=1e-15)
        assert [r.name for r in vol.blind_data] == ["vdbflow.time"]
