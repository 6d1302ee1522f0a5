"""Higher-order schemes: exactness on polynomials, measured convergence orders, continuity."""

import numpy as np
import pytest

import vdbflow
from vdbflow.ops.sampling import STENCIL_RADIUS


def grid_volume(fn, n, h, margin=6):
    """A dense block of n^3 voxels (+ margin) of fn(x) sampled at x = ijk * h."""
    axis = np.arange(-margin, n + margin)
    ijk = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    return vdbflow.Volume.from_voxels(ijk, fn(ijk * h), voxel_size=h)


def smooth(x):
    return np.sin(x[:, 0]) * np.cos(0.7 * x[:, 1]) * np.sin(0.5 * x[:, 2] + 0.3)


def smooth_grad(x):
    s0, c0 = np.sin(x[:, 0]), np.cos(x[:, 0])
    s1, c1 = np.sin(0.7 * x[:, 1]), np.cos(0.7 * x[:, 1])
    s2, c2 = np.sin(0.5 * x[:, 2] + 0.3), np.cos(0.5 * x[:, 2] + 0.3)
    return np.stack([c0 * c1 * s2, -0.7 * s0 * s1 * s2, 0.5 * s0 * c1 * c2], axis=1)


@pytest.mark.parametrize(("mode", "degree"), [("lag4", 3), ("lag6", 5), ("lag8", 7), ("catmull_rom", 2)])
def test_interpolating_schemes_are_exact_on_polynomials(rng, mode, degree):
    coef = rng.standard_normal(3)

    def poly(x):
        return sum(coef[a] * x[:, a] ** degree for a in range(3)) + x[:, 0] * x[:, 1] * x[:, 2]

    def grad(x):
        return np.stack(
            [degree * coef[a] * x[:, a] ** (degree - 1) + np.prod(np.delete(x, a, axis=1), axis=1) for a in range(3)],
            axis=1,
        )

    if mode == "catmull_rom":  # exact on quadratics only

        def poly(x):  # noqa: F811
            return coef[0] * x[:, 0] ** 2 + coef[1] * x[:, 1] * x[:, 2] + coef[2] * x[:, 2]

        def grad(x):  # noqa: F811
            return np.stack([2 * coef[0] * x[:, 0], coef[1] * x[:, 2], coef[1] * x[:, 1] + coef[2]], axis=1)

    vol = grid_volume(poly, 8, 1.0)
    pts = rng.uniform(1, 6, (200, 3))
    v, j = vdbflow.sample_grad_arrays(vol, pts, mode)
    scale = np.abs(vol.voxel_data).max()
    np.testing.assert_allclose(v, poly(pts), atol=1e-9 * scale)
    np.testing.assert_allclose(j, grad(pts), atol=1e-8 * scale)


@pytest.mark.parametrize(
    ("mode", "order"),
    [
        ("linear", 1),
        ("lag4", 3),
        ("lag6", 5),
        ("fd4", 2),
        ("fd6", 2),
        ("fd4lag4", 4),
        ("catmull_rom", 2),
        ("bspline3", 2),
    ],
)
def test_measured_convergence_order_of_the_gradient(rng, mode, order):
    """Fit the slope of log(max |J - J_exact|) against log(h) over a refinement."""
    pts_unit = rng.uniform(0.3, 0.7, (300, 3))  # inside the block, away from its margins
    errors, hs = [], []
    for n in (12, 24, 48):
        h = 2.0 / n
        vol = grid_volume(smooth, n, h)
        pts = pts_unit * n * h
        _, j = vdbflow.sample_grad_arrays(vol, pts, mode, space="world")
        errors.append(np.abs(j - smooth_grad(pts)).max())
        hs.append(h)
    slope = np.polyfit(np.log(hs), np.log(errors), 1)[0]
    assert order - 0.35 < slope < order + 1.0, (mode, slope, errors)


@pytest.mark.parametrize("mode", ["catmull_rom", "bspline3", "fd4", "fd4lag4"])
def test_jacobian_is_continuous_across_cell_faces(rng, mode):
    vol = grid_volume(smooth, 10, 0.2)
    base = rng.uniform(2, 7, (50, 3))
    base[:, 0] = np.round(base[:, 0])  # on a cell face in x
    eps = 1e-9
    _, below = vdbflow.sample_grad_arrays(vol, base - [eps, 0, 0], mode)
    _, above = vdbflow.sample_grad_arrays(vol, base + [eps, 0, 0], mode)
    np.testing.assert_allclose(below, above, atol=1e-6)
    if mode in ("catmull_rom", "bspline3", "fd4", "fd4lag4"):
        _, lin_below = vdbflow.sample_grad_arrays(vol, base - [eps, 0, 0], "linear")
        _, lin_above = vdbflow.sample_grad_arrays(vol, base + [eps, 0, 0], "linear")
        assert np.abs(lin_below - lin_above).max() > 1e-3  # the trilinear Jacobian jumps there


def test_schemes_read_background_and_tiles_like_linear(rng):
    ijk = np.argwhere(np.ones((6, 6, 6), bool))
    vol = vdbflow.Volume.from_voxels(
        ijk, np.ones(len(ijk)), background=1.0, tiles=(np.array([[8, 0, 0]]), np.array([8]), np.array([1.0]))
    )
    pts = rng.uniform(-3, 14, (300, 3))
    for mode in STENCIL_RADIUS:
        v, j = vdbflow.sample_grad_arrays(vol, pts, mode)
        np.testing.assert_allclose(v, 1.0, atol=1e-12)  # a constant field everywhere
        np.testing.assert_allclose(j, 0.0, atol=1e-12)


def test_distributed_needs_a_wide_enough_halo(rng):
    distributed = pytest.importorskip("distributed")
    from vdbflow.distribution.volume import distribute

    vol = grid_volume(smooth, 20, 0.1)
    pts = rng.uniform(0, 19, (2000, 3))
    with (
        distributed.LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        narrow = distribute(vol, client, 5)
        with pytest.raises(vdbflow.SamplingError, match="halo=4"):
            narrow.sample_grad(pts, "lag8", space="index")
        narrow.close()
        wide = distribute(vol, client, 5, halo=4)
        for mode in ("lag8", "fd4lag4", "bspline3"):
            got = wide.sample_grad(pts, mode, space="index").compute()
            want = vol.sample_grad(pts, mode, space="index")
            np.testing.assert_array_equal(got["value_jacobian"].values, want["value_jacobian"].values)
        wide.close()
