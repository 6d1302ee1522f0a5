"""Statistics reduced in the kernels' pass (vdbflow.histogram, moments, conditional_mean, statistics) against
NumPy on the point-wise outputs of the same points; reproducible to the bit whatever the threads, workers
or partitions; the r invariant against an analytic gradient."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

import vdbflow
from vdbflow import _core
from vdbflow.ops.reductions import Conditional, Histogram, Statistics, quantity
from vdbflow.synthetic import flow_volume, taylor_green


@pytest.fixture(scope="module")
def field():
    vol = flow_volume(taylor_green(), 32)  # a shell: points outside it read the background
    pts = np.random.default_rng(7).uniform(0.2, 6.0, (60_000, 3))
    pts[:50] = np.nan  # NaN points: NaN quantities, counted apart
    outputs = ("value", "jacobian", "q_criterion", "r_invariant", "vorticity", "vorticity_magnitude")
    ds = vol.sample_grad(pts, outputs=outputs)
    return vol, pts, ds


def test_histograms_count_as_numpy_histogramdd(field):
    vol, pts, ds = field
    Q, R = ds["q_criterion"].values, ds["r_invariant"].values
    eq, er = np.linspace(-3, 3, 41), np.linspace(-2, 2.5, 33)
    h = vdbflow.histogram(vol, pts, of=["q_criterion", "r_invariant"], bins=[eq, er])
    sample = np.stack([Q, R], axis=1)
    finite = np.isfinite(sample).all(axis=1)
    ref, _ = np.histogramdd(sample[finite], bins=[eq, er])
    np.testing.assert_array_equal(h["count"].values, ref.astype(np.int64))
    assert h["count"].dims == ("q_criterion_bin", "r_invariant_bin") and h["count"].dtype == np.int64
    assert int(h["nan"]) == int((~finite).sum()) >= 50
    assert int(h["outside"]) + int(h["count"].sum()) == int(finite.sum())
    np.testing.assert_array_equal(h["q_criterion_bin_bounds"].values[:, 0], eq[:-1])
    cell = np.diff(eq)[:, None] * np.diff(er)[None, :]
    np.testing.assert_allclose((h["pdf"] * cell).sum(), 1.0, rtol=1e-12)
    # 1-D with a range, and a vector entry and a Jacobian entry in 3-D
    w = ds["vorticity"].values[:, 2]
    h1 = vdbflow.histogram(vol, pts, of="vorticity[z]", bins=25, range=(-2, 2))
    np.testing.assert_array_equal(h1["count"].values, np.histogram(w[np.isfinite(w)], np.linspace(-2, 2, 26))[0])
    J = ds["velocity_jacobian"].values
    of3 = ["jacobian[u,x]", "jacobian[v,y]", "value[w]"]
    h3 = vdbflow.histogram(vol, pts, of=of3, bins=[6, 7, 8], range=[(-1, 1), (-1.5, 1), (-0.5, 0.5)])
    s3 = np.stack([J[:, 0, 0], J[:, 1, 1], ds["velocity"].values[:, 2]], axis=1)
    ok = np.isfinite(s3).all(axis=1)
    e3 = [np.linspace(-1, 1, 7), np.linspace(-1.5, 1, 8), np.linspace(-0.5, 0.5, 9)]
    np.testing.assert_array_equal(h3["count"].values, np.histogramdd(s3[ok], bins=e3)[0].astype(np.int64))


def test_a_value_on_the_last_edge_is_in_the_last_bin_as_numpy_counts_it(field):
    vol, pts, ds = field
    Q = ds["q_criterion"].values
    top = float(np.nanmax(Q))
    edges = np.linspace(float(np.nanmin(Q)), top, 11)
    h = vdbflow.histogram(vol, pts, of="q_criterion", bins=edges)
    np.testing.assert_array_equal(h["count"].values, np.histogram(Q[np.isfinite(Q)], edges)[0])
    assert int(h["outside"]) == 0
    auto = vdbflow.histogram(vol, pts, of="q_criterion", bins=10)  # range: min and max from a first pass
    np.testing.assert_array_equal(auto["count"].values, h["count"].values)


def test_weighted_histograms_sum_the_weights_of_each_bin(field):
    vol, pts, ds = field
    Q, w = ds["q_criterion"].values, ds["vorticity_magnitude"].values
    edges = np.linspace(-2, 2, 21)
    h = vdbflow.histogram(vol, pts, of="q_criterion", bins=edges, weights="vorticity_magnitude")
    ok = np.isfinite(Q)
    ref = np.histogram(Q[ok], edges, weights=w[ok].astype(np.float64))[0]
    np.testing.assert_allclose(h["weighted"].values, ref, rtol=1e-12)


def test_moments_match_numpy(field):
    vol, pts, ds = field
    m = vdbflow.moments(vol, pts, of=["jacobian[u,x]", "q_criterion", "r_invariant"])
    cols = [ds["velocity_jacobian"].values[:, 0, 0], ds["q_criterion"].values, ds["r_invariant"].values]
    for k, x in enumerate(cols):
        f = x[np.isfinite(x)].astype(np.float64)
        d = f - f.mean()
        var = (d * d).mean()
        row = m.isel(quantity=k)
        assert int(row["count"]) == len(f) and int(row["nan_count"]) == len(x) - len(f)
        np.testing.assert_allclose(float(row["mean"]), f.mean(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(float(row["variance"]), var, rtol=1e-11)
        np.testing.assert_allclose(float(row["skewness"]), (d**3).mean() / var**1.5, rtol=1e-9)
        np.testing.assert_allclose(float(row["flatness"]), (d**4).mean() / var**2, rtol=1e-9)
        assert float(row["min"]) == f.min() and float(row["max"]) == f.max()
    assert list(m["quantity"].values) == ["jacobian_u_x", "q_criterion", "r_invariant"]


def test_binned_means_match_numpy(field):
    vol, pts, ds = field
    edges = np.linspace(-2, 2, 17)
    c = vdbflow.conditional_mean(vol, pts, of=["vorticity_magnitude"], given="q_criterion", bins=edges)
    Q, w = ds["q_criterion"].values, ds["vorticity_magnitude"].values.astype(np.float64)
    ok = np.isfinite(Q) & np.isfinite(w) & (Q >= edges[0]) & (Q <= edges[-1])
    b = np.clip(np.searchsorted(edges, Q[ok], side="right") - 1, 0, 15)
    n = np.bincount(b, minlength=16)
    mean = np.bincount(b, w[ok], minlength=16) / np.where(n, n, 1)
    var = np.bincount(b, (w[ok] - mean[b]) ** 2, minlength=16) / np.where(n, n, 1)
    np.testing.assert_array_equal(c["count_vorticity_magnitude_by_q_criterion"].values, n)
    got = c["vorticity_magnitude_mean_by_q_criterion"].values
    np.testing.assert_allclose(got[n > 0], mean[n > 0], rtol=1e-12)
    np.testing.assert_allclose(c["vorticity_magnitude_variance_by_q_criterion"].values[n > 0], var[n > 0], rtol=1e-9)
    assert np.isnan(got[n == 0]).all()


def _everything(vol):
    q = [quantity(n, vol, "world") for n in ("q_criterion", "r_invariant", "jacobian[u,x]", "vorticity_magnitude")]
    return Statistics(
        histograms=[Histogram((q[0], q[1]), (np.linspace(-3, 3, 33), np.linspace(-2, 2, 29)), q[3])],
        moments=q,
        conditionals=[Conditional(q[3], q[0], np.linspace(-3, 3, 13))],
    )


def _same(a, b):
    assert set(a.variables) == set(b.variables)
    for name in a.variables:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_results_do_not_depend_on_threads_workers_or_partitions(field):
    import distributed

    vol, pts, _ = field
    stats = _everything(vol)
    threads = _core.get_max_threads()
    try:
        _core.set_num_threads(1)
        one = vdbflow.statistics(vol, pts, stats)
        _core.set_num_threads(2)
        two = vdbflow.statistics(vol, pts, stats)
    finally:
        _core.set_num_threads(threads)
    _same(one, two)
    lazy = da.from_array(pts, chunks=(9_000, 3))
    with dask.config.set(scheduler="threads", num_workers=1):
        a = vdbflow.statistics(vol, lazy, stats)
    with dask.config.set(scheduler="threads", num_workers=3):
        b = vdbflow.statistics(vol, lazy, stats)
    _same(a, b)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as client,
    ):
        for partitions in (2, 3):
            with vdbflow.distribute(vol, client, partitions) as dvol:
                _same(vdbflow.statistics(dvol, lazy, stats), a)


def test_the_fused_pass_equals_the_reduction_of_the_sampled_arrays(field):
    from vdbflow.ops.reductions import features_of

    vol, pts, ds = field
    stats = _everything(vol)
    spec, edges, empty, where = stats.layout()
    fused = vdbflow.statistics(vol, pts, stats)
    arrays = {
        "value": ds["velocity"].values,
        "jacobian": ds["velocity_jacobian"].values,
        **{n: ds[n].values for n in ("q_criterion", "r_invariant", "vorticity_magnitude")},
    }
    _core.reduce_features(spec, features_of(stats, arrays, 3), edges, empty.ints, empty.reals)
    from vdbflow.ops.statistics import dataset

    _same(fused, dataset(stats, empty, where))


def test_the_r_invariant_of_a_linear_field():
    """u = A x: Q = -tr(A^2)/2 and R = -det(A) for the traceless A, everywhere inside."""
    A = np.array([[0.3, -1.0, 0.2], [0.8, -0.1, 0.5], [-0.4, 0.6, -0.2]])
    i, j, k = np.meshgrid(*[np.arange(12.0)] * 3, indexing="ij")
    X = np.stack([i, j, k], -1)
    vol = vdbflow.Volume.from_dense(X @ A.T + 1.0)  # + 1: every voxel differs from the background
    pts = np.random.default_rng(1).uniform(2, 9, (500, 3))
    ds = vol.sample_grad(pts, space="index", outputs=("q_criterion", "r_invariant"))
    np.testing.assert_allclose(ds["r_invariant"].values, -np.linalg.det(A), rtol=1e-5)
    np.testing.assert_allclose(ds["q_criterion"].values, -np.trace(A @ A) / 2, rtol=1e-5)
    m = vdbflow.moments(vol, pts, of=["r_invariant"], space="index")
    np.testing.assert_allclose(float(m["mean"][0]), -np.linalg.det(A), rtol=1e-5)


def test_bad_requests_say_what_was_expected(field):
    vol, pts, _ = field
    with pytest.raises(vdbflow.SamplingError, match="expected a quantity: value, jacobian or one of"):
        vdbflow.moments(vol, pts, of="enstrophy")
    with pytest.raises(vdbflow.SamplingError, match="expected a component among u, v, w"):
        vdbflow.moments(vol, pts, of="value[q]")
    with pytest.raises(vdbflow.SamplingError, match="vorticity\\[axis\\]"):
        vdbflow.moments(vol, pts, of="vorticity")
    with pytest.raises(vdbflow.SamplingError, match="finite range lo < hi"):
        vdbflow.histogram(vol, pts, of="q_criterion", bins=4, range=(1, 1))
    with pytest.raises(vdbflow.SamplingError, match="one to three quantities"):
        vdbflow.histogram(vol, pts, of=["q_criterion"] * 4, bins=2, range=[(0, 1)] * 4)
    with pytest.raises(vdbflow.SamplingError, match="increasing bin edges"):
        vdbflow.histogram(vol, pts, of="q_criterion", bins=[0.0, 2.0, 1.0])
    scalar = vdbflow.Volume.from_dense(np.random.default_rng(0).standard_normal((8, 8, 8)))
    with pytest.raises(vdbflow.SamplingError, match="vec3 float field"):
        vdbflow.moments(scalar, pts, of="q_criterion")
    ints = vdbflow.Volume.from_dense(np.arange(512, dtype=np.int32).reshape(8, 8, 8))
    with pytest.raises(vdbflow.SamplingError):
        vdbflow.moments(ints, pts, of="value", mode="closest")
    with pytest.raises(ValueError, match="bin edges must increase"):
        spec, edges, empty, _ = Statistics(moments=[quantity("q_criterion", vol, "world")]).layout()
        bad = Statistics(
            histograms=[Histogram((quantity("q_criterion", vol, "world"),), (np.array([0.0, 1.0]),))]
        ).layout()
        _core.reduce_features(bad[0], np.zeros((3, 1), np.float32), np.array([1.0, 0.0]), bad[2].ints, bad[2].reals)


JOB = """
volume:
  synthetic: {{field: taylor_green, resolution: 24, write: {tmp}/tg.nvdb}}
points: {{kind: voxels, per_voxel: 3, seed: 5, chunk: 20000}}
reduce:
  histograms:
    - of: [q_criterion, r_invariant]
      bins: [24, 20]
      range: [[-3, 1.5], [-1.5, 1.5]]
  moments: ["jacobian[u,x]", q_criterion]
  conditional:
    - of: [vorticity_magnitude]
      given: q_criterion
      bins: 12
      range: [-3, 1.5]
output: {{path: {tmp}/stats.{suffix}, overwrite: always}}
"""


@pytest.mark.parametrize("suffix", ["nc", "zarr"])
def test_a_reduce_job_writes_the_statistics_of_every_voxel(tmp_path, suffix):
    """``reduce:`` with ``points: {kind: voxels}``: a small published result whose counts equal NumPy's on
    the same points sampled point by point (made again here from the written volume)."""
    import distributed
    import xarray as xr

    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.points import make_points

    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(tmp=tmp_path, suffix=suffix))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        result = vdbflow.run(path, client=client)
    assert result.points == 3 * vdbflow.open(tmp_path / "tg.nvdb").topology.active_voxel_count
    assert result.worker_seconds["reduction"] > 0  # the chunk tasks' time, in the summary's step
    with xr.open_dataset(tmp_path / f"stats.{suffix}", engine=None if suffix == "nc" else "zarr") as ds:
        ds = ds.load()
    vol = vdbflow.open(tmp_path / "tg.nvdb")
    cfg = load_config(path)
    pts = make_points(cfg.points, vol.topology, vol.topology.data_bounds("world", inner=True)).points.compute()
    ref = vol.sample_grad(pts, outputs=("jacobian", "q_criterion", "r_invariant", "vorticity_magnitude"))
    Q, R = ref["q_criterion"].values, ref["r_invariant"].values
    edges = [np.linspace(-3, 1.5, 25), np.linspace(-1.5, 1.5, 21)]
    np.testing.assert_array_equal(
        ds["q_criterion_r_invariant_count"].values, np.histogramdd(np.stack([Q, R], 1), edges)[0]
    )
    q = ds.sel(quantity="q_criterion")
    np.testing.assert_allclose(float(q["mean"]), Q.astype(np.float64).mean(), rtol=1e-12)
    assert int(q["count"]) == len(pts) and int(ds["count_vorticity_magnitude_by_q_criterion"].sum()) <= len(pts)
    assert ds.attrs["reduced_points"] == len(pts) and ds.attrs["points_kind"] == "voxels"
    assert (tmp_path / f"stats.{suffix}").exists() and not list(tmp_path.glob(".stats*"))


def test_reduce_configs_are_checked():
    from vdbflow.jobs.config.model import JobConfig

    base = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "voxels"},
        "output": {"path": "out.nc"},
    }
    ok = JobConfig.model_validate({**base, "reduce": {"moments": ["q_criterion", "jacobian[u,x]"]}})
    assert ok.reduce.moments == ["q_criterion", "jacobian[u,x]"]
    bad = [
        ({"moments": ["enstrophy"]}, "expected a quantity"),
        ({}, "expected at least one of histograms, moments or conditional"),
        ({"histograms": [{"of": ["q_criterion"], "range": [[1, 0]]}]}, "lo < hi"),
        ({"histograms": [{"of": ["q_criterion", "r_invariant"], "range": [[0, 1]]}]}, "a range for each"),
        ({"histograms": [{"of": ["q_criterion"], "bins": 1 << 25, "range": [[0, 1]]}]}, "bins in all"),
    ]
    for reduce, message in bad:
        with pytest.raises(ValueError, match=message):
            JobConfig.model_validate({**base, "reduce": reduce})
    import re
    from pathlib import Path

    import yaml

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    block = yaml.safe_load(re.search(r"```yaml\n(points: \{kind: voxels.*?)```", readme, re.S).group(1))
    shown = JobConfig.model_validate({**base, **block})  # the user guide's reduce section is a valid config
    assert shown.points.per_voxel == 4 and shown.reduce.histograms[0].bin_counts() == [256, 256]
    with pytest.raises(ValueError, match="expected 'reduce' or 'advect'"):
        JobConfig.model_validate({**base, "reduce": {"moments": ["q_criterion"]}, "advect": {"t1": 1.0, "dt": 0.1}})


def test_the_qr_plot_draws_the_log_density_and_the_vieillefosse_line(field):
    """The picture, checked: its mesh holds log10 of the histogram's density where there are counts (NaN
    elsewhere), its dashed line satisfies 27 R^2 / 4 + Q^3 = 0, and the Taylor-Green teardrop has mass on
    both sides of R = 0 below it (vortex stretching and compression)."""
    import matplotlib

    matplotlib.use("Agg")
    vol, pts, ds = field
    h = vdbflow.histogram(vol, pts, of=["q_criterion", "r_invariant"], bins=[30, 40], range=[(-3, 1.5), (-1.5, 1.5)])
    mesh = h.vdbflow.plot.qr()
    shown = np.ma.filled(mesh.get_array(), np.nan).reshape(30, 40)
    want = np.where(h["count"].values > 0, np.log10(np.where(h["pdf"].values > 0, h["pdf"].values, 1)), np.nan)
    np.testing.assert_allclose(shown, want, rtol=1e-12)
    R, Q = mesh.axes.lines[0].get_data()
    np.testing.assert_allclose(27 * R**2 / 4 + Q**3, 0, atol=1e-9)
    # drawn to be seen over the empty bins (blank, white), and named in a legend
    from matplotlib.colors import to_rgb

    assert to_rgb(mesh.axes.lines[0].get_color()) == (0.0, 0.0, 0.0)
    legend = mesh.axes.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == ["27R²/4 + Q³ = 0"]
    below = h["count"].where(h["q_criterion_bin"] < 0)
    assert (
        float(below.where(h["r_invariant_bin"] > 0).sum()) > 0
        and float(below.where(h["r_invariant_bin"] < 0).sum()) > 0
    )
    ax = vdbflow.histogram(vol, pts, of="q_criterion", bins=30, range=(-3, 1.5)).vdbflow.plot.pdf()
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "q_criterion"


def test_the_qr_plane_normalised_by_the_mean_enstrophy(field):
    """normalize=True: Q / <Q_w> and R / <Q_w>^(3/2) with <Q_w> = <|omega|^2> / 4 of the same points;
    counts as NumPy's of the quotients (ties at an edge aside: none here), bins in the normalised units."""
    vol, pts, ds = field
    Q, R, w = (ds[n].values.astype(np.float64) for n in ("q_criterion", "r_invariant", "vorticity_magnitude"))
    q_w = np.nanmean(w * w) / 4
    h = vdbflow.histogram(
        vol, pts, of=["q_criterion", "r_invariant"], bins=[20, 16], range=[(-3, 1), (-1, 1)], normalize=True
    )
    np.testing.assert_allclose(h.attrs["normalized_by_mean_q_w"], q_w, rtol=1e-12)
    edges = [np.linspace(-3, 1, 21), np.linspace(-1, 1, 17)]
    ref = np.histogramdd(np.stack([Q / q_w, R / q_w**1.5], 1), edges)[0]
    np.testing.assert_array_equal(h["count"].values, ref)
    np.testing.assert_allclose(h["q_criterion_bin"].values, (edges[0][:-1] + edges[0][1:]) / 2)
    given = vdbflow.histogram(vol, pts, of="q_criterion", bins=10, range=(-3, 1), normalize=2.0)
    np.testing.assert_array_equal(
        given["count"].values, np.histogram(Q[np.isfinite(Q)] / 2.0, np.linspace(-3, 1, 11))[0]
    )
    with pytest.raises(vdbflow.SamplingError, match="positive, finite <Q_w>"):
        vdbflow.histogram(vol, pts, of="q_criterion", bins=10, range=(-3, 1), normalize=-1.0)


def test_a_reduce_job_gives_the_same_bits_whole_or_partitioned(tmp_path):
    """The one-pass path (every worker reads the volume, the fused pass) and the partitioned path (routed
    samples reduced by chunk) write the same statistics, bit for bit."""
    import distributed
    import xarray as xr

    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(tmp=tmp_path, suffix="nc"))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        whole = vdbflow.run(path, client=client, **{"output.path": str(tmp_path / "whole.nc")})
        parts = vdbflow.run(path, client=client, partitions=2, **{"output.path": str(tmp_path / "parts.nc")})
    assert whole.partitions == 0 and parts.partitions == 2
    with xr.open_dataset(tmp_path / "whole.nc") as a, xr.open_dataset(tmp_path / "parts.nc") as b:
        assert set(a.data_vars) == set(b.data_vars)
        for name in a.data_vars:
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_edge_cases_a_review_found(field):
    vol, pts, ds = field
    Q = ds["q_criterion"].values.astype(np.float64)
    # normalize= with the caller's edges equals normalize= with a range; with the data's range nothing is lost
    a = vdbflow.histogram(vol, pts, "q_criterion", bins=4, range=(-1, 1), normalize=0.5)
    b = vdbflow.histogram(vol, pts, "q_criterion", bins=np.linspace(-1, 1, 5), normalize=0.5)
    _same(a, b)
    np.testing.assert_array_equal(a["count"].values, np.histogram(Q[np.isfinite(Q)] / 0.5, np.linspace(-1, 1, 5))[0])
    auto = vdbflow.histogram(vol, pts, ["q_criterion", "r_invariant"], bins=8, normalize=0.3)
    assert int(auto["outside"]) == 0 and int(auto["count"].sum()) == int(np.isfinite(Q).sum())
    # two items of the same quantities with other edges keep a variable each
    q, w = quantity("q_criterion", vol, "world"), quantity("vorticity_magnitude", vol, "world")
    two = Statistics(
        histograms=[Histogram((q,), (np.linspace(-2, 2, 5),)), Histogram((q,), (np.linspace(-1, 1, 9),))],
        conditionals=[Conditional(w, q, np.linspace(-2, 2, 3)), Conditional(w, q, np.linspace(-1, 1, 4))],
    )
    got = vdbflow.statistics(vol, pts, two)
    assert got["q_criterion_count"].shape == (4,) and got["q_criterion_2_count"].shape == (8,)
    assert got["count_vorticity_magnitude_by_q_criterion"].shape == (2,)
    assert got["vorticity_magnitude_mean_by_q_criterion_2"].shape == (3,)
    finite = Q[np.isfinite(Q)]
    np.testing.assert_array_equal(got["q_criterion_2_count"].values, np.histogram(finite, np.linspace(-1, 1, 9))[0])
    # the same quantity twice in one histogram, as numpy.histogramdd takes it
    same = vdbflow.histogram(vol, pts, ["q_criterion", "q_criterion"], bins=[[-1, 0, 1]] * 2)
    ref = np.histogramdd(np.stack([finite, finite], 1), [[-1, 0, 1]] * 2)[0]
    np.testing.assert_array_equal(same["count"].values, ref)
    # bins=[10] is 10 bins; no points with the default range: (0, 1), as numpy
    assert vdbflow.histogram(vol, pts, "q_criterion", bins=[10])["count"].shape == (10,)
    empty = vdbflow.histogram(vol, np.zeros((0, 3)), "q_criterion", bins=4)
    assert int(empty["count"].sum()) == 0 and empty["q_criterion_bin_bounds"].values[[0, -1], [0, 1]].tolist() == [0, 1]
    with pytest.raises(vdbflow.SamplingError, match="at most 32 moments"):
        vdbflow.moments(vol, pts, of=["q_criterion"] * 33)


def test_statistics_takes_the_specs_of_a_reduce_section(field):
    """vdbflow.statistics(vol, pts, histograms=[...], moments=[...], conditional=[...]) - the call a new user
    guessed from the guide - gives what the Statistics built by hand gives, bit for bit; bad specs say why."""
    vol, pts, _ = field
    q = {n: quantity(n, vol, "world") for n in ("q_criterion", "r_invariant", "vorticity_magnitude", "jacobian[u,x]")}
    by_hand = Statistics(
        histograms=[
            Histogram((q["q_criterion"], q["r_invariant"]), (np.linspace(-3, 1.5, 17), np.linspace(-1.5, 1.5, 9))),
            Histogram((q["vorticity_magnitude"],), (np.array([0.0, 0.5, 1.0, 2.0, 4.0]),), weight=q["q_criterion"]),
        ],
        moments=[q["jacobian[u,x]"], q["q_criterion"]],
        conditionals=[Conditional(q["vorticity_magnitude"], q["q_criterion"], np.linspace(-3, 1.5, 7))],
    )
    want = vdbflow.statistics(vol, pts, by_hand)
    got = vdbflow.statistics(
        vol,
        pts,
        histograms=[
            {"of": ["q_criterion", "r_invariant"], "bins": [16, 8], "range": [(-3, 1.5), (-1.5, 1.5)]},
            {"of": "vorticity_magnitude", "bins": [0.0, 0.5, 1.0, 2.0, 4.0], "weights": "q_criterion"},
        ],
        moments=["jacobian[u,x]", "q_criterion"],
        conditional=[{"of": ["vorticity_magnitude"], "given": "q_criterion", "bins": 6, "range": (-3, 1.5)}],
    )
    assert sorted(got.data_vars) == sorted(want.data_vars)
    for name in want.data_vars:
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    once = vdbflow.statistics(
        vol, pts, histograms=[{"of": ["q_criterion", "r_invariant"], "bins": 8, "range": (-2, 2)}]
    )
    assert once["q_criterion_r_invariant_count"].shape == (8, 8)
    for bad, match in (
        ({"histograms": [{"of": "q_criterion", "bins": 8}]}, "range"),
        ({"histograms": [{"of": "q_criterion", "range": (0, 1), "colour": "red"}]}, "keys among"),
        ({"conditional": [{"of": "q_criterion", "bins": 4, "range": (0, 1)}]}, "given"),
        ({"moments": ["pressure"]}, "quantity"),
    ):
        with pytest.raises(vdbflow.SamplingError, match=match):
            vdbflow.statistics(vol, pts, **bad)
    with pytest.raises(vdbflow.SamplingError, match="not both"):
        vdbflow.statistics(vol, pts, by_hand, moments=["q_criterion"])
