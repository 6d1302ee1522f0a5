"""Periodic domains (docs/periodic.md): every scheme and output on a periodic volume against independent
oracles - the same field tiled into a non-periodic volume with ``np.take(..., mode="wrap")``, a NumPy
Lagrange sampler reading through wrapped indices, the analytic ABC flow, and ``solve_ivp`` trajectories."""

from __future__ import annotations

import numpy as np
import pytest

import vdbflow
from vdbflow.core.periodic import Periodicity, resolve_periodic
from vdbflow.errors import VolumeError
from vdbflow.ops.sampling import MODES, STENCIL_RADIUS

SHAPE = (20, 18, 13)  # periods that are not multiples of a leaf, and one shorter than two leaves
PAD = 8  # the tiled copy's margin around the box: wider than any stencil


def periodic_field(rng, components=3, dtype=np.float64):
    data = rng.standard_normal(SHAPE + ((components,) if components > 1 else ())).astype(dtype)
    return data, vdbflow.Volume.from_dense(data, periodic=True)


def tiled_volume(data):
    """The periodic field as an ordinary volume over the box and PAD voxels around it, built with wrapped
    NumPy indexing: voxel (i, j, k) of it is voxel (i mod X, j mod Y, k mod Z) of ``data``."""
    idx = [np.arange(-PAD, n + PAD) for n in SHAPE]
    tiled = data
    for axis, ix in enumerate(idx):
        tiled = np.take(tiled, ix, axis=axis, mode="wrap")
    # voxel (0, 0, 0) of the tiled array is voxel -PAD of the box: sample it at index points + PAD (exact for the
    # dyadic points of box_points, so the fractions, weights and results are the periodic volume's)
    return vdbflow.Volume.from_dense(tiled)


def box_points(rng, n, margin=1.0):
    """Index-space points over the box and ``margin`` voxels around it, many near the faces."""
    hi = np.array(SHAPE, float) - 1
    pts = rng.uniform(-margin, hi + margin, (n, 3))
    faces = rng.integers(0, 3, n // 2)
    pts[: n // 2][np.arange(n // 2), faces] = rng.choice([-0.5, 0.25, hi.min() - 0.3], n // 2)
    return np.round(pts * 2**30) / 2**30


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_scheme_equals_the_tiled_field_bit_for_bit(rng, mode):
    data, vol = periodic_field(rng)
    ref = tiled_volume(data)
    pts = box_points(rng, 3000)
    got = vol.sample_grad(pts, mode=mode, space="index")
    want = ref.sample_grad(pts + PAD, mode=mode, space="index")
    for var in ("value", "value_jacobian"):
        np.testing.assert_array_equal(got[var].values, want[var].values, err_msg=f"{mode} {var}")
    if mode != "closest":
        h_got = vol.sample_hessian(pts[:500], mode=mode, space="index")["value_hessian"].values
        h_want = ref.sample_hessian(pts[:500] + PAD, mode=mode, space="index")["value_hessian"].values
        np.testing.assert_array_equal(h_got, h_want, err_msg=f"{mode} hessian")


def _lagrange_weights(n, f):
    """Lagrange basis through nodes 1 - n/2 .. n/2 at f, and its derivative (NumPy polynomials)."""
    nodes = np.arange(1 - n // 2, n // 2 + 1)
    w, d = np.empty(n), np.empty(n)
    for k in range(n):
        others = np.delete(nodes, k)
        poly = np.poly1d(others, r=True) / np.prod(nodes[k] - others)
        w[k], d[k] = poly(f), poly.deriv()(f)
    return nodes, w, d


@pytest.mark.parametrize("mode, n", [("linear", 2), ("lag4", 4), ("lag6", 6), ("lag8", 8)])
def test_numpy_lagrange_sampler_with_wrapped_indexing(rng, mode, n):
    """An oracle that shares nothing with the kernels: weights from NumPy polynomials, voxels read with
    ``np.take(..., mode="wrap")`` along each axis."""
    data, vol = periodic_field(rng, components=1)
    pts = np.concatenate([box_points(rng, 60), rng.uniform(-60, 60, (20, 3))])
    got = vol.sample_grad(pts, mode=mode, space="index")
    for p, u in enumerate(pts):
        b = np.floor(u).astype(int)
        nodes, w, d = zip(*(_lagrange_weights(n, u[a] - b[a]) for a in range(3)), strict=True)
        block = data
        for a in range(3):
            block = np.take(block, b[a] + nodes[a], axis=a, mode="wrap")
        value = np.einsum("ijk,i,j,k", block, w[0], w[1], w[2])
        grad = [
            np.einsum("ijk,i,j,k", block, d[0], w[1], w[2]),
            np.einsum("ijk,i,j,k", block, w[0], d[1], w[2]),
            np.einsum("ijk,i,j,k", block, w[0], w[1], d[2]),
        ]
        np.testing.assert_allclose(got["value"].values[p], value, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(got["value_jacobian"].values[p], grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["closest", "linear", "lag8", "m2q8", "fd6", "bspline3"])
def test_points_any_number_of_periods_away_read_the_same_bits(rng, mode):
    data, _ = periodic_field(rng, components=3, dtype=np.float32)
    vol = vdbflow.Volume.from_dense(data, voxel_size=0.5, origin=(1.0, -2.0, 0.25), periodic=True)
    world_period = 0.5 * np.array(SHAPE, float)
    # dyadic coordinates: u + k P is exact in float64 for |k| up to thousands of periods
    pts = np.round(rng.uniform(0, 10, (800, 3)) * 2**20) / 2**20
    base = vol.sample_grad(pts, mode=mode)
    for k in ([1, 0, 0], [-3, 7, 2], [1000, -999, 5000]):
        moved = vol.sample_grad(pts + np.array(k) * world_period, mode=mode)
        for var in ("value", "value_jacobian"):
            np.testing.assert_array_equal(moved[var].values, base[var].values, err_msg=f"{mode} shifted by {k}")


def test_inside_has_no_edge_along_periodic_axes(rng):
    data = rng.standard_normal(SHAPE)
    vol = vdbflow.Volume.from_dense(data, periodic="xy")  # z keeps its edges
    pts = np.array([[-0.5, 5.0, 6.0], [19.5, 17.9, 6.0], [-30.2, 40.0, 6.0], [5.0, 5.0, 11.5], [5.0, 5.0, -0.5]])
    inside = vol.stencil_inside(pts, mode="lag8", space="index")
    np.testing.assert_array_equal(inside, [True, True, True, False, False])
    flat = vdbflow.Volume.from_dense(data)
    assert not flat.stencil_inside(pts[:3], mode="lag8", space="index").any()


def test_adjoints_scatter_to_the_wrapped_voxels(rng):
    """The VJP of a periodic volume equals the tiled volume's VJP folded back onto the box."""
    data, vol = periodic_field(rng, components=3)
    ref = tiled_volume(data)
    pts = box_points(rng, 400, margin=0.9)
    adj_v, adj_j = rng.standard_normal((400, 3)), rng.standard_normal((400, 3, 3))
    got = vdbflow.sample_grad_vjp(vol, pts, adj_v, adj_j)
    want = vdbflow.sample_grad_vjp(ref, pts + PAD, adj_v, adj_j)
    np.testing.assert_allclose(_folded(vol, got.voxel_data), _folded(ref, want.voxel_data), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.points, want.points, rtol=1e-12, atol=1e-12)


def _folded(vol, rows):
    """Per-leaf layout rows (L * 512, C) of ``vol`` summed onto the box by wrapped voxel index."""
    r = np.arange(len(rows))
    offset = r % 512
    ijk = vol.topology.leaf_origins[r // 512].astype(np.int64) + np.stack(
        [(offset >> 6) & 7, (offset >> 3) & 7, offset & 7], -1
    )
    if vol.periodic is None:  # the tiled copy: its voxel 0 is voxel -PAD of the box
        ijk -= PAD
    box = np.zeros(SHAPE + (rows.shape[1],))
    np.add.at(box, tuple(np.mod(ijk[:, a], SHAPE[a]) for a in range(3)), rows)
    return box


def test_grid_gradients_are_centred_differences_across_the_faces(rng):
    data = rng.standard_normal(SHAPE)
    vol = vdbflow.Volume.from_dense(data, periodic=True)
    grad = vdbflow.gradient_field(vol, "fd4")
    ijk = grad.active_voxels()
    got = grad.active_values().reshape(-1, 3)
    want = np.stack(
        [
            (8 * (np.roll(data, -1, a) - np.roll(data, 1, a)) - (np.roll(data, -2, a) - np.roll(data, 2, a))) / 12
            for a in range(3)
        ],
        -1,
    )[ijk[:, 0], ijk[:, 1], ijk[:, 2]]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def abc_box(n, periodic=True, dtype=np.float64):
    field = vdbflow.synthetic.abc_flow()
    h = 2 * np.pi / n
    i = np.arange(n)
    x = np.stack(np.meshgrid(i, i, i, indexing="ij"), -1).reshape(-1, 3) * h
    values = field.velocity(x).reshape(n, n, n, 3).astype(dtype)
    vol = vdbflow.Volume.from_dense(values, voxel_size=h, periodic=periodic, name="velocity")
    return field, vol, h


def test_abc_error_within_a_stencil_of_a_face_equals_the_error_inside(rng):
    n = 32
    field, vol, h = abc_box(n)
    flat = vol.with_periodic(False)
    pts = rng.uniform(0, 2 * np.pi, (20000, 3))
    u = pts / h
    near = np.any((u < 4) | (u > n - 5), axis=1)
    errors = {}
    for name, v in (("periodic", vol), ("not periodic", flat)):
        ds = v.sample_grad(pts, mode="lag6")
        err = np.abs(ds["velocity_jacobian"].values - field.jacobian(pts)).max(axis=(1, 2))
        errors[name] = err[near].max(), err[~near].max()
    face, inside = errors["periodic"]
    assert 0.5 < face / inside < 1.5, errors
    assert inside < 1e-3, errors
    assert errors["not periodic"][0] > 100 * inside, errors  # without the period the faces are wrong


def test_particles_in_periodic_abc_follow_solve_ivp_over_several_periods(rng):
    from scipy.integrate import solve_ivp

    field, vol, _ = abc_box(48)
    seeds = rng.uniform(0, 2 * np.pi, (6, 3))
    t1 = 16.0
    ds = vdbflow.advect(vol, seeds, 0.0, t1, 0.01, mode="lag6")
    assert (ds["status"].values == 0).all()
    pos = ds["position"].values
    assert np.abs(pos[:, -1] - seeds).max() > 2 * (2 * np.pi)  # some particle crossed at least two periods
    for p, s in enumerate(seeds):
        ref = solve_ivp(
            lambda t, x: field.velocity(x[None])[0], (0.0, t1), s, t_eval=ds.time.values, rtol=1e-11, atol=1e-11
        )
        np.testing.assert_allclose(pos[p], ref.y.T, atol=2e-3)
    wrapped = ds["position_wrapped"].values
    np.testing.assert_allclose(np.mod(pos, 2 * np.pi), wrapped, atol=1e-9)
    assert ((wrapped >= 0) & (wrapped < 2 * np.pi)).all()


def test_periods_resolve_and_bad_specs_are_refused():
    box = np.array([[2, 0, -8], [21, 15, 7]])
    assert resolve_periodic(True, box) == Periodicity((2, 0, -8), (20, 16, 16))
    assert resolve_periodic("x,z", box) == Periodicity((2, 0, -8), (20, 0, 16))
    assert resolve_periodic((False, 64, True), box) == Periodicity((0, 0, -8), (0, 64, 16))
    assert resolve_periodic(False, box) is None and resolve_periodic((False,) * 3, box) is None
    for bad in ("xw", "xx", (True, True), (True, -4, True), (True, 2.5, True), 3):
        with pytest.raises(VolumeError, match="expected"):
            resolve_periodic(bad, box)
    with pytest.raises(VolumeError, match="empty"):
        resolve_periodic(True, None)


def test_periods_are_kept_by_files_stores_and_listings(rng, tmp_path):
    data = rng.standard_normal(SHAPE).astype(np.float32)
    vol = vdbflow.Volume.from_dense(data, periodic="xz", units="m/s")
    vol.to_nvdb(str(tmp_path / "box.nvdb"))
    vol.to_zarr(str(tmp_path / "box.zarr"))
    for path in ("box.nvdb", "box.zarr"):
        back = vdbflow.open(str(tmp_path / path))
        assert back.periodic == Periodicity((0, 0, 0), (20, 0, 13)), path
    assert vdbflow.list_grids(str(tmp_path / "box.nvdb"))[0].periodic == vol.periodic
    assert vdbflow.open(str(tmp_path / "box.nvdb"), periodic=False).periodic is None
    assert vdbflow.open(str(tmp_path / "box.nvdb"), periodic=True).periodic.size == SHAPE
    pts = box_points(rng, 500)
    np.testing.assert_array_equal(
        vdbflow.open(str(tmp_path / "box.nvdb")).sample(pts, mode="lag4", space="index")["value"].values,
        vol.sample(pts, mode="lag4", space="index")["value"].values,
    )
    # Warp ignores vdbflow's blind data: it opens the file and samples inside the box alike
    warp = pytest.importorskip("warp")
    warp.init()
    with open(tmp_path / "box.nvdb", "rb") as f:
        wvol = warp.Volume.load_from_nvdb(f, device="cpu")
    assert wvol.get_voxel_size() == pytest.approx((1.0, 1.0, 1.0))


def test_synthetic_fields_are_periodic_where_the_field_is():
    from vdbflow.synthetic.steady import burgers_vortex, flow_volume, taylor_green

    assert flow_volume(taylor_green(), 16).periodic == Periodicity((0, 0, 0), (16, 16, 16))
    assert flow_volume(taylor_green(k=2.0), 16).periodic is not None
    assert flow_volume(taylor_green(), 16, extent=5.0).periodic is None  # not a whole period
    assert flow_volume(burgers_vortex(), 16).periodic is None
    assert flow_volume(taylor_green(), 16, periodic=False).periodic is None


@pytest.mark.parametrize("mode", ["linear", "lag8", "m2q8"])
def test_distributed_periodic_volume_equals_one_process(rng, mode, tmp_path):
    from distributed import Client, LocalCluster

    data, vol = periodic_field(rng, components=3)
    vol = vol.with_periodic((True, False, True))
    path = tmp_path / "box.nvdb"
    vol.to_nvdb(str(path))
    pts = np.concatenate([box_points(rng, 3000), rng.uniform(-50, 50, (1000, 3))])
    want = vol.sample_grad(pts, mode=mode, space="index")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            for source in (vol, str(path)):
                with vdbflow.distribute(source, client, partitions=5, halo=STENCIL_RADIUS[mode]) as dv:
                    got = dv.sample_grad(pts, mode=mode, space="index").compute()
                for var in ("value", "value_jacobian"):
                    np.testing.assert_array_equal(got[var].values, want[var].values, err_msg=f"{source} {var}")


def test_resident_particles_migrate_across_the_period(rng):
    from distributed import Client, LocalCluster

    _, vol, _ = abc_box(32, dtype=np.float64)
    seeds = rng.uniform(0, 2 * np.pi, (40, 3))
    want = vdbflow.advect(vol, seeds, 0.0, 8.0, 0.02, mode="linear")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            with vdbflow.distribute(vol, client, partitions=4, halo=8) as dv:
                got = vdbflow.advect(dv, seeds, 0.0, 8.0, 0.02, mode="linear").compute()
    assert got.attrs["migrations"] > 0
    np.testing.assert_array_equal(got["position"].values, want["position"].values)
    np.testing.assert_array_equal(got["status"].values, want["status"].values)


def test_the_periodic_page_examples_run(capsys):
    """docs/periodic.md's python blocks run as written, and print what the page says they print."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "periodic.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/periodic.md", "exec"), {})
    assert capsys.readouterr().out.split("\n")[:2] == [
        "x: 32 voxels from 0, y: 32 voxels from 0, z: 32 voxels from 0",
        "True",
    ]


@pytest.mark.parametrize("mode", ["linear", "lag6"])
def test_reductions_of_a_periodic_box_equal_the_tiled_fields(rng, mode):
    """The kernels' statistics pass (histograms, moments) wraps like sampling: Q-R counts and moments of
    points near the faces equal those of the tiled copy at the same points."""
    data, vol = periodic_field(rng, components=3)
    ref = tiled_volume(data)
    pts = box_points(rng, 4000, margin=0.9)
    of, rng_qr = ["q_criterion", "r_invariant"], [(-20, 20), (-40, 40)]
    got = vdbflow.histogram(vol, pts, of=of, bins=32, range=rng_qr, mode=mode, space="index")
    want = vdbflow.histogram(ref, pts + PAD, of=of, bins=32, range=rng_qr, mode=mode, space="index")
    np.testing.assert_array_equal(got["count"].values, want["count"].values)
    assert int(got["count"].sum()) > 3000
    m_got = vdbflow.moments(vol, pts, of=["q_criterion"], mode=mode, space="index")
    m_want = vdbflow.moments(ref, pts + PAD, of=["q_criterion"], mode=mode, space="index")
    for var in m_got.data_vars:
        np.testing.assert_array_equal(m_got[var].values, m_want[var].values, err_msg=var)
