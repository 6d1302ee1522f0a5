"""The edge of the data: points whose stencil reaches the background are flagged on request
(``outputs=[..., "inside"]``), by the same rule as a NumPy reference, and plots blank them."""

import numpy as np
import pytest

import vdbflow
from vdbflow import synthetic


def _reference_inside(active: set, points_index: np.ndarray, period: tuple | None = None) -> np.ndarray:
    """Trilinear stencil: the 8 corners of the cell floor(u) .. floor(u) + 1 are all active voxels (voxel
    indices taken modulo ``period`` (3,) where given: a periodic box from voxel 0)."""
    out = np.zeros(len(points_index), bool)
    wrap = (lambda c: tuple(np.mod(c, period).tolist())) if period is not None else tuple
    for n, u in enumerate(points_index):
        if not np.isfinite(u).all():
            continue
        b = np.floor(u).astype(int)
        out[n] = all(wrap(b + (dx, dy, dz)) in active for dx in (0, 1) for dy in (0, 1) for dz in (0, 1))
    return out


@pytest.fixture(scope="module")
def shell():
    return synthetic.flow_volume(synthetic.taylor_green(), resolution=24)


def test_inside_flag_matches_a_reference_and_costs_nothing_else(shell, rng):
    pts = rng.random((3000, 3)) * 2 * np.pi
    pts[:3] = np.nan
    plain = shell.sample_grad(pts)
    flagged = shell.sample_grad(pts, outputs=["value", "jacobian", "inside"])
    M = np.asarray(shell.index_to_world)
    index = (np.linalg.inv(M) @ np.c_[pts, np.ones(len(pts))].T).T[:, :3]
    assert shell.periodic.lo == (0, 0, 0)  # the synthetic box is periodic: the reference wraps too
    expected = _reference_inside({tuple(v) for v in shell.active_voxels().tolist()}, index, shell.periodic.size)
    assert flagged["stencil_inside"].dtype == bool and flagged["stencil_inside"].dims == ("point",)
    np.testing.assert_array_equal(flagged["stencil_inside"].values, expected)
    assert 0.05 < expected.mean() < 0.95  # both kinds of point are there
    assert "background" in flagged["stencil_inside"].attrs["flag_meanings"]
    for name in plain.data_vars:  # the flag changes nothing else
        np.testing.assert_array_equal(flagged[name].values, plain[name].values)


def test_inside_flag_is_lazy_for_dask_points_and_keeps_their_shape(shell, rng):
    da = pytest.importorskip("dask.array")
    pts = rng.random((6, 50, 3)) * 2 * np.pi
    eager = shell.sample_grad(pts, outputs=["q_criterion", "inside"])
    lazy = vdbflow.sample_grad(shell, da.from_array(pts, chunks=(3, 25, 3)), outputs=["q_criterion", "inside"])
    assert lazy["stencil_inside"].chunks is not None and lazy["stencil_inside"].dims == ("point_0", "point_1")
    np.testing.assert_array_equal(lazy["stencil_inside"].values, eager["stencil_inside"].values)
    np.testing.assert_array_equal(lazy["q_criterion"].values, eager["q_criterion"].values)


def test_plots_blank_the_points_at_the_edge_and_say_how_many(shell):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vdbflow.analysis import plot
    from vdbflow.jobs.points import plane

    res = (30, 20)
    ds = shell.sample_grad(
        plane((0.2, 0.2, np.pi), (5.8, 0, 0), (0, 5.8, 0), res), outputs=["value", "jacobian", "inside"]
    )
    outside = int((~ds["stencil_inside"].values).sum())
    assert outside > 0
    ax = plot.slice_plot(ds, "q_criterion", shape=res)
    image = np.ma.filled(np.asarray(ax.collections[0].get_array(), np.float64), np.nan).reshape(res)
    assert np.isnan(image).sum() == outside and np.isnan(image[~ds["stencil_inside"].values.reshape(res)]).all()
    assert f"{outside:,} points blanked: stencil leaves the data" in ax.get_title()
    plt.close("all")
    ax = plot.slice_plot(ds, "q_criterion", shape=res, mask_edge=False)
    assert np.isfinite(np.asarray(ax.collections[0].get_array(), np.float64)).all() and "blanked" not in ax.get_title()
    fig = plot.jacobian_grid(ds, shape=res)
    assert "blanked" in fig._suptitle.get_text()
    plt.close("all")


def test_a_misspelt_output_names_the_nearest_one(shell):
    from vdbflow.errors import SamplingError

    with pytest.raises(SamplingError, match=r"'qcriterion' \(did you mean 'q_criterion'\?\) unknown") as err:
        shell.sample_grad(np.zeros((1, 3)), outputs=["qcriterion"])
    assert "'inside'" in str(err.value) and "distinct" not in str(err.value)


@pytest.mark.parametrize("u, v", [((6, 0, 0), (6, 0, 0)), ((1, 0, 0), (-2, 0, 0)), ((0, 0, 0), (0, 1, 0))])
def test_plane_refuses_axes_that_span_no_plane_as_the_job_config_does(u, v):
    from vdbflow.errors import PointsError
    from vdbflow.jobs.points import plane

    with pytest.raises(PointsError, match="expected u and v to span a plane"):
        plane((0, 0, 0), u, v, (10, 10))
