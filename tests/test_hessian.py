"""Second derivatives against independent oracles: exact polynomials, measured convergence orders,
symmetry, finite differences of the project's own Jacobians, the Taylor-Green Laplacian, world
space under a sheared transform, and the construction of m2q8 from its definition."""

import itertools

import numpy as np
import pytest

import vdbflow
from vdbflow.ops.hessian import HESSIAN_MODES, sample_hessian_arrays


def dense_volume(fn, lo=-10, hi=22, components=1, transform=None, dtype=np.float64):
    """Every voxel of [lo, hi)^3 active, values fn(i, j, k) at the voxel centres (index space)."""
    ijk = np.stack(np.meshgrid(*[np.arange(lo, hi)] * 3, indexing="ij"), -1).reshape(-1, 3)
    values = np.asarray(fn(*ijk.T.astype(np.float64)), dtype)
    if components > 1:
        values = values.T
    return vdbflow.Volume.from_voxels(ijk, values, transform=transform)


def poly_terms(rng, max_degree_per_axis, total=None, n=6):
    """Random monomials x^p y^q z^r (coefficient, powers) within the degree bounds."""
    terms = []
    while len(terms) < n:
        p = tuple(int(x) for x in rng.integers(0, max_degree_per_axis + 1, 3))
        if total is not None and sum(p) > total:
            continue
        terms.append((float(rng.uniform(-1, 1)), p))
    return terms


def poly(terms):
    def f(x, y, z):
        return sum(c * x**p * y**q * z**r for c, (p, q, r) in terms)

    return f


def poly_hessian(terms, x):
    """Analytic Hessian (N, 3, 3) of the polynomial at points x (N, 3)."""
    H = np.zeros((len(x), 3, 3))
    for c, powers in terms:
        for a, b in itertools.product(range(3), repeat=2):
            d = list(powers)
            coef = np.full(len(x), c)
            for axis in (a, b):
                coef = coef * d[axis]
                d[axis] = max(d[axis] - 1, 0)
            H[:, a, b] += coef * x[:, 0] ** d[0] * x[:, 1] ** d[1] * x[:, 2] ** d[2]
    return H


# scheme -> (degree per axis, total degree) of the polynomials whose Hessian it reproduces exactly
EXACT = {
    "lag4": (3, None),
    "lag6": (5, None),
    "lag8": (7, None),
    "catmull_rom": (2, 2),
    "bspline3": (2, 2),
    "m2q8": (5, 5),
    "fd2": (2, 2),
    "fd4": (3, 3),
    "fd6": (3, 3),
    "fd8": (3, 3),
    "fd4lag4": (5, 5),
}


@pytest.mark.parametrize("mode", sorted(EXACT))
def test_polynomials_are_reproduced_exactly(rng, mode):
    per_axis, total = EXACT[mode]
    terms = poly_terms(rng, per_axis, total)
    vol = dense_volume(poly(terms))
    pts = rng.uniform(0, 10, (200, 3))
    _, _, H = sample_hessian_arrays(vol, pts, mode)
    want = poly_hessian(terms, pts)
    scale = np.abs(want).max() + 1
    np.testing.assert_allclose(H, want, atol=1e-9 * scale * 10**per_axis)


def test_linear_has_the_mixed_terms_of_the_trilinear_interpolant(rng):
    terms = [(0.7, (1, 1, 0)), (-1.3, (0, 1, 1)), (0.4, (1, 1, 1)), (2.0, (1, 0, 0))]
    vol = dense_volume(poly(terms))
    pts = rng.uniform(0, 10, (100, 3))
    _, _, H = sample_hessian_arrays(vol, pts, "linear")
    np.testing.assert_allclose(H, poly_hessian(terms, pts), atol=1e-9)
    assert np.all(np.diagonal(H, axis1=1, axis2=2) == 0)


def smooth(k=0.3):
    return (
        lambda x, y, z: np.sin(k * x + 0.2) * np.cos(k * y - 0.1) * np.sin(k * z + 0.4),
        lambda x: _smooth_hessian(x, k),
    )


def _smooth_hessian(x, k):
    sx, cx = np.sin(k * x[:, 0] + 0.2), np.cos(k * x[:, 0] + 0.2)
    sy, cy = np.sin(k * x[:, 1] - 0.1), np.cos(k * x[:, 1] - 0.1)
    sz, cz = np.sin(k * x[:, 2] + 0.4), np.cos(k * x[:, 2] + 0.4)
    f = sx * cy * sz
    H = np.empty((len(x), 3, 3))
    H[:, 0, 0] = H[:, 1, 1] = H[:, 2, 2] = -k * k * f
    H[:, 0, 1] = H[:, 1, 0] = -k * k * cx * sy * sz
    H[:, 0, 2] = H[:, 2, 0] = k * k * cx * cy * cz
    H[:, 1, 2] = H[:, 2, 1] = -k * k * sx * sy * cz
    return H


# scheme -> order of its Hessian between nodes (at nodes for the node-difference schemes)
ORDERS = {
    "lag4": 2,
    "lag6": 4,
    "lag8": 6,
    "m2q8": 4,
    "catmull_rom": 1,
    "bspline3": 2,
    "fd2": 2,
    "fd4": 4,
    "fd6": 6,
    "fd8": 8,
    "fd4lag4": 4,
}


@pytest.mark.parametrize("mode", sorted(ORDERS))
def test_measured_convergence_orders(rng, mode):
    """The error of the Hessian falls as h^order: the same smooth field sampled at two wavenumbers
    (in voxels) k and k/2, at the same points in units of the wavelength."""
    errors = []
    unit = rng.uniform(0.2, 0.8, (60, 3))
    for k in (0.4, 0.2):
        f, hess = smooth(k)
        span = int(np.ceil(1.2 * 6 / k))
        vol = dense_volume(f, -8, span + 8)
        pts = unit * (6 / k)
        if mode.startswith("fd") and mode != "fd4lag4":
            pts = np.round(pts)  # at the nodes (JHTDB's NoInt): the order of the difference itself
        _, _, H = sample_hessian_arrays(vol, pts, mode)
        errors.append(np.abs(H - hess(pts)).max() / (k * k))
    order = np.log2(errors[0] / errors[1])
    assert order > ORDERS[mode] - 0.35, (mode, errors, order)


@pytest.mark.parametrize("mode", HESSIAN_MODES)
def test_symmetric_and_equal_to_finite_differences_of_the_jacobian(rng, mode):
    vol = dense_volume(lambda x, y, z: np.stack([np.sin(0.3 * x) * y, np.cos(0.2 * y + z), x * z * 0.05]), components=3)
    pts = rng.uniform(2, 8, (50, 3))
    _, J, H = sample_hessian_arrays(vol, pts, mode)
    np.testing.assert_array_equal(H, np.swapaxes(H, -1, -2))
    if mode == "linear" or mode.startswith("fd"):
        return  # trilinear / node-difference Hessians are not derivatives of the interpolated Jacobian
    eps = 1e-5
    for b in range(3):
        step = np.zeros(3)
        step[b] = eps
        _, Jp, _ = sample_hessian_arrays(vol, pts + step, mode)
        _, Jm, _ = sample_hessian_arrays(vol, pts - step, mode)
        np.testing.assert_allclose(H[:, :, :, b], (Jp - Jm) / (2 * eps), atol=2e-6)
    _, J2 = vdbflow.sample_grad_arrays(vol, pts, mode)
    np.testing.assert_array_equal(J, J2)  # the Jacobian is sample_grad's, bit for bit


def test_taylor_green_laplacian_is_minus_three_u(rng):
    """u = (sin x cos y cos z, -cos x sin y cos z, 0) has Laplacian -3u."""
    h = 2 * np.pi / 64
    tg = dense_volume(
        lambda x, y, z: np.stack(
            [np.sin(h * x) * np.cos(h * y) * np.cos(h * z), -np.cos(h * x) * np.sin(h * y) * np.cos(h * z), 0 * x]
        ),
        -8,
        40,
        components=3,
        transform=vdbflow.Transform.from_voxel_size(h),
    )
    pts = rng.uniform(0.2, 1.4, (100, 3))
    for mode, tol in (("lag6", 1e-5), ("m2q8", 1e-4), ("fd6", 5e-3), ("fd4lag4", 5e-3), ("lag4", 5e-3)):
        ds = tg.sample_hessian(pts, mode)
        laplacian = np.trace(ds["value_hessian"].values, axis1=-2, axis2=-1)
        np.testing.assert_allclose(laplacian, -3 * ds["value"].values, atol=tol, err_msg=mode)


def test_world_space_hessians_under_a_sheared_transform(rng):
    """A quadratic defined in world coordinates, stored on a sheared, scaled grid: the world-space
    Hessian is its constant Hessian, and equals M^-T H_index M^-1 of the index-space one."""
    M = np.eye(4)
    M[:3, :3] = [[0.5, 0.2, 0.0], [0.0, 0.4, 0.1], [0.05, 0.0, 0.6]]
    M[:3, 3] = [1.0, -2.0, 0.5]
    xf = vdbflow.Transform(M)
    A = np.array([[2.0, 0.5, -1.0], [0.5, -3.0, 0.25], [-1.0, 0.25, 1.5]])  # f(x) = x.A.x / 2

    def f(i, j, k):
        w = xf.apply(np.stack([i, j, k], -1))
        return 0.5 * np.einsum("na,ab,nb->n", w, A, w)

    vol = dense_volume(f, transform=xf)
    pts = xf.apply(rng.uniform(0, 10, (40, 3)))
    for mode in ("lag4", "m2q8", "fd4"):
        ds = vol.sample_hessian(pts, mode)
        np.testing.assert_allclose(ds["value_hessian"].values, np.broadcast_to(A, (40, 3, 3)), atol=1e-8)
        _, _, Hi = sample_hessian_arrays(vol, pts, mode, space="world", jacobian_space="index")
        inv = xf.world_to_index[:3, :3]
        np.testing.assert_allclose(np.einsum("ra,nrs,sb->nab", inv, Hi, inv), ds["value_hessian"].values, atol=1e-10)
    assert ds["value_hessian"].dims == ("point", "axis", "axis2")
    assert list(ds["axis2"].values) == ["x", "y", "z"]


def test_m2q8_is_the_quintic_hermite_spline_of_its_definition(rng):
    """Along one axis m2q8 is the degree-5 polynomial on [0, 1] matching value, first and second
    derivative at both nodes, the derivatives from 6th-order centred differences (radius 3)."""
    samples = rng.standard_normal(30)
    vol = vdbflow.Volume.from_voxels(
        np.stack([np.arange(30), np.zeros(30, int), np.zeros(30, int)], 1), samples, background=0.0
    )
    d1 = np.array([-1 / 60, 9 / 60, -45 / 60, 0, 45 / 60, -9 / 60, 1 / 60])
    d2 = np.array([1 / 90, -3 / 20, 3 / 2, -49 / 18, 3 / 2, -3 / 20, 1 / 90])
    for base in (10, 17):
        f0, f1 = samples[base], samples[base + 1]
        g0, g1 = d1 @ samples[base - 3 : base + 4], d1 @ samples[base - 2 : base + 5]
        c0, c1 = d2 @ samples[base - 3 : base + 4], d2 @ samples[base - 2 : base + 5]
        # solve for the quintic a0..a5 from the six conditions
        rows = [
            [1, 0, 0, 0, 0, 0],
            [0, 1, 0, 0, 0, 0],
            [0, 0, 2, 0, 0, 0],
            [1, 1, 1, 1, 1, 1],
            [0, 1, 2, 3, 4, 5],
            [0, 0, 2, 6, 12, 20],
        ]
        a = np.linalg.solve(np.array(rows, float), [f0, g0, c0, f1, g1, c1])
        for t in (0.0, 0.3, 0.75):
            pts = np.array([[base + t, 0.0, 0.0]])
            v, J, H = sample_hessian_arrays(vol, pts, "m2q8")
            powers = t ** np.arange(6)
            assert v[0] == pytest.approx(a @ powers, abs=1e-12)
            assert J[0, 0] == pytest.approx(a[1:] @ (np.arange(1, 6) * t ** np.arange(5)), abs=1e-12)
            assert H[0, 0, 0] == pytest.approx(
                a[2:] @ (np.arange(2, 6) * np.arange(1, 5) * t ** np.arange(4)), abs=1e-11
            )


def test_fd8_gradient_is_eighth_order_at_nodes(rng):
    errs = []
    for k in (0.5, 0.25):
        f = lambda x, y, z, k=k: np.sin(k * x) * np.cos(k * y) + np.sin(k * z)  # noqa: E731
        vol = dense_volume(f, -12, int(12 / k) + 12)
        pts = np.round(rng.uniform(0.2, 0.8, (30, 3)) * (12 / k))
        _, J = vdbflow.sample_grad_arrays(vol, pts, "fd8")
        want = np.stack(
            [
                k * np.cos(k * pts[:, 0]) * np.cos(k * pts[:, 1]),
                -k * np.sin(k * pts[:, 0]) * np.sin(k * pts[:, 1]),
                k * np.cos(k * pts[:, 2]),
            ],
            1,
        )
        errs.append(np.abs(J - want).max() / k)
    assert np.log2(errs[0] / errs[1]) > 7.5


def test_float32_data_and_bad_requests(rng):
    vol32 = dense_volume(lambda x, y, z: x * y, dtype=np.float32)
    v, J, H = sample_hessian_arrays(vol32, rng.uniform(0, 5, (4, 3)), "lag4")
    assert (v.dtype, J.dtype, H.dtype) == (np.float32, np.float32, np.float32)
    np.testing.assert_allclose(H[:, 0, 1], 1.0, rtol=1e-5)
    with pytest.raises(vdbflow.SamplingError, match="expected a mode with a second derivative.*'lag4'"):
        vol32.sample_hessian([[0, 0, 0]], "closest")
    ints = vdbflow.Volume.from_voxels([[0, 0, 0]], np.array([3], np.int32))
    with pytest.raises(vdbflow.SamplingError, match="expected float32 or float64 data for Hessians"):
        ints.sample_hessian([[0, 0, 0]], "lag4")
    v, J, H = sample_hessian_arrays(vol32, np.array([[np.nan, 0, 0]]), "lag4")
    assert np.isnan(H).all()


def test_distributed_hessians_equal_single_process_bit_for_bit(rng):
    distributed = pytest.importorskip("distributed")
    da = pytest.importorskip("dask.array")
    from reference import random_sparse_voxels

    ijk, values = random_sparse_voxels(rng, n_leaves=30, spread=4, fill=0.6, components=3)
    vol = vdbflow.Volume.from_voxels(ijk, values.astype(np.float64), 0.5, voxel_size=0.25)
    lo, hi = ijk.min(0) - 2, ijk.max(0) + 2
    pts = da.from_array(rng.uniform(lo, hi, (3000, 3)) * 0.25, chunks=(700, 3))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as c,
        distributed.Client(c) as client,
    ):
        with vdbflow.distribute(vol, client, 5, halo=5) as dvol:
            for mode in ("lag4", "m2q8", "fd6", "fd8"):
                got = dvol.sample_hessian(pts, mode, jacobian_space="index").compute()
                want = vol.sample_hessian(pts.compute(), mode, jacobian_space="index")
                for name in ("value", "value_jacobian", "value_hessian"):
                    np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=f"{mode} {name}")
                assert got["value_hessian"].dims == want["value_hessian"].dims
            with pytest.raises(vdbflow.SamplingError, match="second derivative"):
                dvol.sample_hessian(pts, "closest")
            np.testing.assert_array_equal(
                vdbflow.hessian_field(vol, "fd4", distributed=dvol).voxel_data,
                vdbflow.hessian_field(vol, "fd4").voxel_data,
            )


def test_laplacian_quantity_and_grid_fields_on_the_taylor_green_shell(rng):
    from vdbflow import synthetic

    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=80, dtype=np.float64)
    nodes = vol.active_voxels()
    pts = vol.transform.apply(nodes[rng.choice(len(nodes), 4000)] + rng.uniform(0, 1, (4000, 3)))
    pts = pts[vol.stencil_inside(pts, "lag6")][:200]
    assert len(pts) > 50
    ds = vol.sample_hessian(pts, "lag6")
    lap = ds.vdbflow.laplacian()
    assert lap.dims == ("point", "component") and lap.attrs["long_name"] == "Laplacian"
    np.testing.assert_allclose(lap.values, -3 * ds["velocity"].values, atol=2e-3)
    np.testing.assert_array_equal(lap.values, vdbflow.analysis.flow.laplacian(ds["velocity_hessian"]).values)
    # grid fields: the node Hessians at every active voxel, the same numbers as sampling there
    field = vdbflow.hessian_field(vol, "fd6")
    inside = vol.stencil_inside(nodes.astype(float), "fd6", space="index")
    _, _, H = sample_hessian_arrays(vol, nodes.astype(float), "fd6", space="index", hessian_space="world")
    stored = field.voxel_data.reshape(len(nodes), 3, 6)
    np.testing.assert_array_equal(stored[:, :, 3], H[:, :, 0, 1])
    np.testing.assert_array_equal(stored[:, :, 2], H[:, :, 2, 2])
    assert field.component_names[:4] == ("d2u/dxdx", "d2u/dydy", "d2u/dzdz", "d2u/dxdy")
    laplacian = vdbflow.derived_field(vol, "laplacian", "fd6")
    assert laplacian.component_names == ("u", "v", "w") and vdbflow.core.units.same(laplacian.units, "m/s/m^2")
    world = vol.transform.apply(nodes[inside])
    u = vol.sample(world, "closest")["velocity"].values
    np.testing.assert_allclose(laplacian.voxel_data[inside], -3 * u, atol=2e-3)


@pytest.mark.slow
def test_job_writes_hessians_and_laplacians(tmp_path):
    """`sampling.outputs: [hessian, laplacian]` in a job: the stored Hessians equal single-process
    sample_hessian at the same points, and the Laplacian of Taylor-Green is -3u where the stencil is inside."""
    import xarray as xr
    import yaml
    from click.testing import CliRunner

    from vdbflow import synthetic
    from vdbflow.jobs.cli.main import main

    cfg = {
        "volume": {
            "synthetic": {
                "field": "taylor_green",
                "resolution": 64,
                "dtype": "float64",
                "write": str(tmp_path / "tg.nvdb"),
            }
        },
        "points": {"kind": "random", "count": 6_000, "chunk": 2_000, "seed": 5},
        "sampling": {"mode": "lag4", "outputs": ["value", "hessian", "laplacian", "inside"]},
        "cluster": {"kind": "local", "workers": 2, "dashboard": False},
        "output": {"path": str(tmp_path / "result.zarr")},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "job.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "result.zarr").compute()
    assert ds["velocity_hessian"].dims == ("point", "component", "axis", "axis2")
    vol = vdbflow.open(str(tmp_path / "tg.nvdb"))
    pts = np.stack([ds["x"].values, ds["y"].values, ds["z"].values], 1)
    want = vol.sample_hessian(pts, "lag4")
    np.testing.assert_array_equal(ds["velocity_hessian"].values, want["velocity_hessian"].values)
    inside = ds["stencil_inside"].values.astype(bool)
    assert inside.sum() > 500
    exact = synthetic.taylor_green().velocity(pts[inside])
    np.testing.assert_allclose(ds["laplacian"].values[inside], -3 * exact, atol=0.02)
    assert vdbflow.core.units.same(ds["laplacian"].attrs["units"], "1/(m s)")
