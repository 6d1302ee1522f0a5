"""Hostile statistics specs and far periodic images (issue 49 rows 4, 7, 14, 17; issue 50 rows 2, 3, 5).

Bins whose product overflows are refused (in Python integers and in the kernels' spec check), the doors'
arguments are checked (the documented ``range=(lo, hi)`` for several quantities works; the rest give
``SamplingError``: ~1,500 fuzzed calls with no raw error), ``reduce:`` jobs are planned with their partials
and accumulators, a periodic image beyond 4e15 voxels reads its image's bits, ``moments(order=)``,
``statistics(normalize=)`` and the Q-R plot's labels when normalised.  Oracles: NumPy on the per-point
outputs of the same points, exact rational arithmetic (``fractions``) for the periodic images."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml

import vdbflow
from vdbflow import _core
from vdbflow.core import kernel
from vdbflow.core.periodic import Periodicity
from vdbflow.ops.reductions import MAX_BINS, Histogram, Statistics, quantity
from vdbflow.synthetic import flow_volume, taylor_green

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def field():
    vol = flow_volume(taylor_green(), 16)
    pts = np.random.default_rng(11).uniform(1.0, 5.0, (2_000, 3))
    outputs = ("value", "jacobian", "q_criterion", "r_invariant", "vorticity_magnitude")
    return vol, pts, vol.sample_grad(pts, outputs=outputs)


@pytest.fixture(scope="module")
def hostile():
    sys.path.insert(0, str(SCRIPTS))
    import hostile_statistics

    yield hostile_statistics
    sys.path.remove(str(SCRIPTS))


# ---- row 4: bin products that overflow -------------------------------------------------------------------


@pytest.mark.parametrize("bins", [2**21, 2**22, 2**40])
def test_bin_products_that_overflow_int64_are_refused(field, bins):
    """3 quantities x 2^22 bins made a count array of 2 entries the kernels wrote far outside (a segfault);
    2^21 a raw numpy ValueError."""
    vol, pts, _ = field
    of = ["value[u]", "value[v]", "value[w]"]
    with pytest.raises(vdbflow.SamplingError, match="bins"):
        vdbflow.histogram(vol, pts, of=of, bins=bins, range=(-1, 1))
    with pytest.raises(vdbflow.SamplingError, match="bins"):
        vdbflow.statistics(vol, pts, histograms=[{"of": of, "bins": bins, "range": (-1, 1)}])


def test_the_layout_counts_bins_in_python_integers(field):
    vol, _, _ = field
    qs = tuple(quantity(n, vol, "world") for n in ("value[u]", "value[v]", "value[w]"))
    e = np.linspace(0.0, 1.0, 2**22 + 1)
    with pytest.raises(vdbflow.SamplingError, match=r"4,194,304 x 4,194,304 x 4,194,304 = 73,786,976,294,838,206,464"):
        Statistics([Histogram(qs, (e, e, e))]).layout()
    small = np.linspace(0.0, 1.0, 2**13 + 1)  # 2^26 bins: the most a histogram has
    spec, _, empty, _ = Statistics([Histogram(qs[:2], (small, small))]).layout()
    assert len(empty.ints) == MAX_BINS + 2


def test_the_kernels_spec_check_refuses_a_product_beyond_the_counts(field):
    """A spec whose three dimensions of 2^22 bins multiply past 2^63 (wrapping to 0 in 64 bits) against a
    count array sized for one: refused by the kernels' own check, before anything is written."""
    vol, _, _ = field
    q = quantity("value[u]", vol, "world")
    e = np.linspace(0.0, 1.0, 2**22 + 1)
    spec, edges, empty, _ = Statistics([Histogram((q,), (e,))]).layout()
    s = np.frombuffer(spec, kernel.REDUCE_SPEC_DTYPE).copy()
    s["hist_dims"][0, 0] = 3
    s["hist_channel"][0, :3] = 0  # flat: 3 a histogram
    s["hist_bins"][0, :3] = 2**22
    s["hist_edges"][0, :3] = 0  # the three dimensions share the one edges array
    features = np.full((4, 1), 0.5)
    with pytest.raises(ValueError, match="histogram bins beyond the counts array"):
        _core.reduce_features(s.tobytes(), features, edges, empty.ints, empty.reals)
    assert not empty.ints.any()
    s["hist_dims"][0, 0] = 1  # the spec as made: accepted, the point counted
    _core.reduce_features(s.tobytes(), features, edges, empty.ints, empty.reals)
    assert int(empty.ints.sum()) == 4


def test_mutated_kernel_specs_are_refused_or_stay_inside_their_arrays(field, hostile):
    """300 specs with fields overwritten by hostile numbers: the kernels refuse each with a ValueError or
    reduce inside the arrays (a write outside them would crash the process)."""
    vol, _, _ = field
    refused = 0
    for i in range(300):
        spec, edges, ints, reals, channels = hostile.mutated_spec(np.random.default_rng([49, 4, i]), vol)
        try:
            _core.reduce_features(spec, np.full((5, channels), 0.25), edges, ints, reals)
        except ValueError:
            refused += 1
    assert 30 < refused < 300


# ---- row 17: the doors' arguments --------------------------------------------------------------------------


def test_the_documented_range_pair_holds_for_every_quantity(field):
    vol, pts, ds = field
    of = ["value[u]", "value[v]"]
    h = vdbflow.histogram(vol, pts, of=of, bins=8, range=(-0.5, 0.5))
    each = vdbflow.histogram(vol, pts, of=of, bins=8, range=[(-0.5, 0.5), (-0.5, 0.5)])
    e = np.linspace(-0.5, 0.5, 9)
    ref = np.histogramdd(ds["velocity"].values[:, :2], bins=[e, e])[0].astype(np.int64)
    np.testing.assert_array_equal(h["count"].values, ref)
    np.testing.assert_array_equal(each["count"].values, ref)
    c = vdbflow.conditional_mean(vol, pts, of="value[w]", given="value[u]", bins=4, range=np.array([-0.5, 0.5]))
    assert int(c["count_value_w_by_value_u"].sum() + c["outside_value_w_by_value_u"]) == len(pts)


BAD = [
    ("histogram", {"of": "value[u]", "bins": None, "range": (0, 1)}, "bins"),
    ("histogram", {"of": "value[u]", "bins": 4, "range": (0, 1), "normalize": "yes"}, "normalize"),
    ("histogram", {"of": None, "bins": 4, "range": (0, 1)}, "of"),
    ("histogram", {"of": "value[u]", "bins": 4, "range": "ab"}, "range"),
    ("histogram", {"of": "value[u]", "bins": 4, "range": (0,)}, "range"),
    ("histogram", {"of": "value[u]", "bins": "ab", "range": (0, 1)}, "bins"),
    ("histogram", {"of": "value[u]", "bins": float("nan"), "range": (0, 1)}, "bins"),
    ("histogram", {"of": "value[u]", "bins": 1 + 2j, "range": (0, 1)}, "bins"),
    ("histogram", {"of": "value[u]", "bins": True, "range": (0, 1)}, "bins"),
    ("histogram", {"of": ["value[u]", "value[v]"], "bins": [[1, 2], [3, [4]]]}, "edges"),
    ("histogram", {"of": ["value[u]", "value[v]"], "bins": 4, "range": [(0, 1), (0, 1, 2)]}, "range"),
    ("histogram", {"of": "r_invariant", "bins": 4, "range": (0, 1), "normalize": 1e300}, "Q_w"),
    ("histogram", {"of": 5}, "of"),
    ("moments", {"of": 1.5}, "of"),
    ("moments", {"of": "value[u]", "order": 5}, "order"),
    ("moments", {"of": "value[u]", "order": "2"}, "order"),
    ("conditional_mean", {"of": "value[u]", "given": "value[v]", "bins": 4, "range": ("a", "b")}, "range"),
    ("statistics", {"histograms": None, "moments": 5}, "moments"),
    ("statistics", {"histograms": [5]}, "histograms"),
    ("statistics", {"moments": ["value[u]"], "space": 3}, "space"),
    ("statistics", {"stats": 5}, "Statistics"),
    ("statistics", {"conditional": [{"of": 5, "given": "value[u]", "bins": 2, "range": (0, 1)}]}, "of"),
]


@pytest.mark.parametrize(("door", "kwargs", "word"), BAD, ids=[f"{d}-{i}" for i, (d, _, _) in enumerate(BAD)])
def test_bad_door_arguments_give_a_sampling_error(field, door, kwargs, word):
    vol, pts, _ = field
    with pytest.raises(vdbflow.SamplingError, match=word):
        getattr(vdbflow, door)(vol, pts, **kwargs)


def _fuzz(hostile, vol, calls: int, seed: int) -> dict[str, int]:
    outcomes = {"same": 0, "refused": 0}
    for i in range(calls):
        door, kwargs = hostile.door_call(np.random.default_rng([seed, i]))
        try:
            outcomes[hostile.call_door(vol, door, kwargs)] += 1
        except Exception as err:  # noqa: BLE001 - the point: any other exception is a defect
            raise AssertionError(f"{hostile.describe(door, kwargs)}: {type(err).__name__}: {err}") from err
    return outcomes


def test_200_fuzzed_door_calls_give_results_or_vdbflow_errors(field, hostile):
    vol, _, _ = field
    outcomes = _fuzz(hostile, vol, 200, 17)
    assert outcomes["same"] > 20 and outcomes["refused"] > 100, outcomes


@pytest.mark.slow
def test_1500_fuzzed_door_calls_give_results_or_vdbflow_errors(field, hostile):
    """The audit's 1,500 calls (132 raw errors then): every one a checked Dataset or a VdbflowError."""
    vol, _, _ = field
    outcomes = _fuzz(hostile, vol, 1500, 49)
    assert sum(outcomes.values()) == 1500 and outcomes["same"] > 150, outcomes


# ---- issue 50: moments(order=), statistics(normalize=), the Q-R plot's labels ---------------------------------


def test_moments_order_selects_what_is_returned(field):
    vol, pts, ds = field
    u = ds["velocity"].values[:, 0].astype(np.float64)
    full = vdbflow.moments(vol, pts, of="value[u]")
    assert full.attrs["order"] == 4
    for order, names in ((1, ()), (2, ("variance", "m2")), (3, ("variance", "m2", "skewness", "m3"))):
        got = vdbflow.moments(vol, pts, of="value[u]", order=order)
        left = {"variance", "m2", "skewness", "m3", "flatness", "m4"} - set(names)
        assert set(names) <= set(got.data_vars) and not left & set(got.data_vars), order
        for v in ("count", "mean", "min", "max", *names):
            np.testing.assert_array_equal(got[v].values, full[v].values)
    np.testing.assert_allclose(full["mean"].values[0], u.mean(), rtol=1e-12)
    np.testing.assert_allclose(full["variance"].values[0], u.var(), rtol=1e-10)
    d = u - u.mean()
    np.testing.assert_allclose(full["flatness"].values[0], (d**4).mean() / (d**2).mean() ** 2, rtol=1e-9)


def test_statistics_normalize_bins_and_returns_everything_in_units_of_q_w(field):
    vol, pts, ds = field
    Q, R, W = (ds[n].values.astype(np.float64) for n in ("q_criterion", "r_invariant", "vorticity_magnitude"))
    q_w = float(np.mean(W**2) / 4)
    spec = {"of": ["q_criterion", "r_invariant"], "bins": 8, "range": [(-2, 2), (-1.5, 1.5)]}
    cond = {"of": "vorticity_magnitude", "given": "q_criterion", "bins": 4, "range": (-2, 2)}
    got = vdbflow.statistics(vol, pts, histograms=[spec], moments=["q_criterion"], conditional=[cond], normalize=q_w)
    assert got.attrs["normalized_by_mean_q_w"] == q_w
    door = vdbflow.histogram(vol, pts, of=spec["of"], bins=8, range=spec["range"], normalize=q_w)
    np.testing.assert_array_equal(got["q_criterion_r_invariant_count"].values, door["count"].values)
    eq, er = np.linspace(-2, 2, 9), np.linspace(-1.5, 1.5, 9)
    np.testing.assert_array_equal(got["q_criterion_bin_bounds"].values[:, 0], eq[:-1])
    ref = np.histogramdd(np.stack([Q / q_w, R / q_w**1.5], 1), bins=[eq, er])[0]
    assert np.abs(got["q_criterion_r_invariant_count"].values - ref).sum() <= 2  # points within rounding of edges
    np.testing.assert_allclose(got["mean"].values[0], Q.mean() / q_w, rtol=1e-10)
    np.testing.assert_allclose(got["variance"].values[0], Q.var() / q_w**2, rtol=1e-9)
    np.testing.assert_allclose(got["max"].values[0], Q.max() / q_w, rtol=1e-12)
    b = np.clip(np.searchsorted(np.linspace(-2, 2, 5), Q / q_w, side="right") - 1, 0, 3)
    inside = (Q / q_w >= -2) & (Q / q_w <= 2)
    means = [W[inside & (b == k)].mean() / q_w**0.5 for k in range(4)]
    np.testing.assert_allclose(got["vorticity_magnitude_mean_by_q_criterion"].values, means, rtol=1e-9)
    measured = vdbflow.statistics(vol, pts, histograms=[spec], normalize=True)  # <Q_w> from a first pass
    np.testing.assert_allclose(measured.attrs["normalized_by_mean_q_w"], q_w, rtol=1e-12)
    plain = vdbflow.statistics(vol, pts, histograms=[spec])
    assert "normalized_by_mean_q_w" not in plain.attrs


def test_the_qr_plot_labels_normalised_axes(field):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from vdbflow.analysis.plot import qr_plot

    vol, pts, _ = field
    of, rng = ["q_criterion", "r_invariant"], [(-2, 2), (-1.5, 1.5)]
    mesh = qr_plot(vdbflow.histogram(vol, pts, of=of, bins=8, range=rng, normalize=True))
    assert mesh.axes.get_ylabel() == r"$Q/\langle Q_w\rangle$"
    assert mesh.axes.get_xlabel() == r"$R/\langle Q_w\rangle^{3/2}$"
    mesh = qr_plot(vdbflow.histogram(vol, pts, of=of, bins=8, range=rng))
    assert (mesh.axes.get_ylabel(), mesh.axes.get_xlabel()) == ("Q", "R")


# ---- row 14: periodic images far away --------------------------------------------------------------------

FAR = [
    3.0 + 2**40 * 32,
    3.5 + 2**47 * 32 - 64,
    2.0**52 + 5,
    2.0**52 + 6,
    4.1e15 + 0.5,
    2.0**60 + 2**10,
    1e17,
    1e300,
    -1e300,
    -(2.0**53) - 2,
    3 * 9007199254740993.0,
    -4.2e15 - 0.25,
    2.0**63,
    -(2.0**70) + 2**20,
]


def _image(x: float, lo: int, size: int) -> float:
    """x moved by whole periods into [lo, lo + size), in exact rational arithmetic."""
    fx = Fraction(x)
    return float(fx - ((fx - lo) // size) * size)


def test_wrap_index_points_is_exact_far_away_and_leaves_non_finite_coordinates():
    p = Periodicity((-5, 3, 0), (32, 7, 0))
    rng = np.random.default_rng(3)
    x = np.concatenate([FAR, rng.uniform(-1e3, 1e3, 40), [-1e-20, 27.0, -5.0]])
    u = np.stack([x, x[::-1], x], 1)
    w = p.wrap_index_points(u)
    for a in (0, 1):
        lo, size = p.lo[a], p.size[a]
        assert np.all((w[:, a] >= lo) & (w[:, a] < lo + size))
        far = np.abs(u[:, a]) >= 2.0**52  # whole numbers: exact
        np.testing.assert_array_equal(w[far, a], [_image(v, lo, size) for v in u[far, a]])
        np.testing.assert_allclose(w[:, a], [_image(v, lo, size) for v in u[:, a]], atol=1e-9)
    np.testing.assert_array_equal(w[:, 2], u[:, 2])  # not periodic
    odd = p.wrap_index_points([[np.nan, np.inf, -np.inf]])
    assert np.isnan(odd[0, 0]) and odd[0, 1] == np.inf and odd[0, 2] == -np.inf
    assert p.images([[1e300, 0, 0]])[0, 0] == 2**62  # saturated, no overflow


@pytest.mark.parametrize("mode", ["closest", "linear", "lag4"])
def test_a_far_periodic_image_reads_the_bits_of_its_image(mode):
    """Beyond 4e15 voxels the kernels clamped the base voxel to 4e9 and read that voxel's image (finite,
    wrong values); now the residue comes from fmod, exact, so every far point reads its image's bits."""
    n = 32
    rng = np.random.default_rng(1)
    box = vdbflow.Volume.from_dense(rng.standard_normal((n, n, n)), periodic=True)
    far = np.stack([np.array(FAR), np.full(len(FAR), 7.0), np.full(len(FAR), 11.25)], 1)
    near = far.copy()
    near[:, 0] = [_image(x, 0, n) for x in FAR]
    a = box.sample(near, mode=mode, space="index")["value"].values
    b = box.sample(far, mode=mode, space="index")["value"].values
    assert np.all(np.isfinite(a))
    np.testing.assert_array_equal(b, a)
    gone = box.sample([[np.inf, 7.0, 11.25], [-np.inf, 7.0, 11.25], [np.nan, 7.0, 11.25]], mode=mode, space="index")
    assert np.isnan(gone["value"].values).all()  # no image: NaN


# ---- row 7: reduce: jobs planned with their partials --------------------------------------------------------


def _reduce_job(tmp_path: Path, bins: int, memory: str = "1GiB") -> Path:
    hist = {"of": ["q_criterion", "r_invariant"], "bins": bins, "range": [[-3, 3], [-2, 2]], "weights": "q_criterion"}
    cfg = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "random", "count": 20_000, "chunk": 5_000, "seed": 3},
        "reduce": {"histograms": [hist, {**hist, "weights": "r_invariant"}]},
        "cluster": {"kind": "local", "workers": 1, "memory_limit": memory, "dashboard": False},
        "output": {"path": str(tmp_path / "stats.zarr")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_a_reduce_job_whose_partials_exceed_a_worker_is_refused_naming_the_reduce_entry(tmp_path):
    """Two allowed 4096^2 weighted histograms (537 MB a partial) on workers of 1 GiB passed the dry run
    (0 bytes a point) and the workers were killed; now the plan counts partials and accumulators."""
    from click.testing import CliRunner

    from vdbflow.jobs.cli.main import main
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.plan import plan_job

    run = CliRunner(env={"COLUMNS": "250"}).invoke
    path = _reduce_job(tmp_path, 4096)
    result = run(main, ["run", str(path), "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert f"reduce.histograms[0] ({path}, line" in said, said
    assert "the statistics' partial takes 536.9 MB" in said and "4,096 x 4,096 bins, weighted" in said, said
    assert "more than a worker's memory limit (1.1 GB" in said and "points.chunk cannot help" in said, said
    forced = plan_job(load_config(path), force=True, dry_run=True)
    assert any(n.endswith("allowed by --force") and "reduce.histograms[0]" in n for n in forced.notes)
    small = _reduce_job(tmp_path, 256)  # 2 x 1 MB partials: planned without a word of memory
    result = run(main, ["run", str(small), "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0 and "statistics partials of 2.1 MB" in result.output, result.output
    assert "memory limit" not in result.output
    assert not (tmp_path / "stats.zarr").exists()


def test_the_statistics_page_python_block_runs_and_prints_what_it_says(capsys):
    page = (Path(__file__).resolve().parents[1] / "docs" / "statistics.md").read_text(encoding="utf-8")
    (block,) = [b.split("```", 1)[0] for b in page.split("```python\n")[1:]]
    exec(compile(block, "docs/statistics.md", "exec"), {})
    shown = [line.split("# ", 1)[1] for line in block.splitlines() if line.startswith("# [")]
    assert capsys.readouterr().out.splitlines() == shown


def test_a_killed_worker_in_a_reduce_job_is_said_in_terms_of_its_partials(tmp_path):
    """A KilledWorker of a reduce: job advised a smaller points.chunk, which cannot help."""
    from distributed.scheduler import KilledWorker

    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.plan import plan_job
    from vdbflow.jobs.runner import killed_worker_error

    plan = plan_job(load_config(_reduce_job(tmp_path, 256)), dry_run=True)
    said = str(killed_worker_error(KilledWorker("vdbflow-reduce-1", "tcp://w", 3), plan, 1 << 30))
    assert "the statistics' partials of reduce (" in said and "take 2.1 MB each" in said, said
    assert "a smaller points.chunk cannot help" in said and "No result was published" in said, said
