"""vdbflow.analysis.plot: figures rendered to PNG, their panels, titles, labels and colour bars checked."""

import io

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import vdbflow  # noqa: E402
from vdbflow import synthetic  # noqa: E402
from vdbflow.jobs.points import line, plane  # noqa: E402

RES = (40, 30)


@pytest.fixture(scope="module")
def plane_ds():
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=32)
    pts = plane((0.3, 0.2, np.pi), (5.6, 0, 0), (0, 5.8, 0), RES)
    return vol.sample_grad(pts)


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60)
    plt.close(fig)
    data = buf.getvalue()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    return data


def test_plane_points_are_s_major():
    pts = plane((1, 2, 3), (4, 0, 0), (0, 0, 2), (3, 2))
    np.testing.assert_allclose(pts, [[1, 2, 3], [1, 2, 5], [3, 2, 3], [3, 2, 5], [5, 2, 3], [5, 2, 5]])
    np.testing.assert_allclose(line((0, 0, 0), (1, 2, 3), 3), [[0, 0, 0], [0.5, 1, 1.5], [1, 2, 3]])


def test_slice_plot_of_a_field_component_and_derived_quantities(plane_ds):
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    plane_ds.vdbflow.plot.slice("velocity", component="u", shape=RES, ax=axes[0])
    vdbflow.analysis.plot.slice_plot(plane_ds, "vorticity_magnitude", shape=RES, ax=axes[1])
    vdbflow.analysis.plot.slice_plot(plane_ds, "q_criterion", shape=RES, ax=axes[2])
    png_bytes(fig)
    assert [a.get_title() for a in axes] == ["velocity u", "vorticity_magnitude", "q_criterion"]
    assert axes[0].get_xlabel() == "x [m]" and axes[0].get_ylabel() == "y [m]"
    bars = [a for a in fig.axes if a not in axes]
    assert [b.get_ylabel() for b in bars] == ["velocity u [m/s]", "vorticity_magnitude [1/s]", "q_criterion [1/s^2]"]
    # the image holds the sampled values on the (s, t) grid, and Q changes sign: a diverging map
    img = axes[2].collections[0]
    q = plane_ds.vdbflow.q_criterion().values.reshape(RES)
    np.testing.assert_allclose(np.asarray(img.get_array()).reshape(RES), q, rtol=1e-6)
    assert img.get_cmap().name == "RdBu_r" and img.norm.vmin == -img.norm.vmax


def test_jacobian_grid_has_one_labelled_panel_per_component_and_axis(plane_ds):
    fig = plane_ds.vdbflow.plot.jacobian_grid(shape=RES)
    png_bytes(fig)
    panels = [a for a in fig.axes if a.get_title()]
    titles = [a.get_title() for a in panels]
    assert titles == [f"∂{c}/∂{a}" for c in "uvw" for a in "xyz"]
    bars = [a for a in fig.axes if not a.get_title()]
    assert len(bars) == 1 and bars[0].get_ylabel() == "∂velocity/∂axis [1/s]"
    assert panels[6].get_xlabel() == "x [m]" and panels[0].get_ylabel() == "y [m]"
    J = plane_ds["velocity_jacobian"].values
    np.testing.assert_allclose(
        np.asarray(panels[1].collections[0].get_array()).ravel(), J[:, 0, 1].reshape(RES).ravel(), rtol=1e-6
    )  # du/dy in row u, column y
    assert fig.get_suptitle() == "Jacobian of velocity (linear)"


def test_line_plot_compares_schemes(plane_ds):
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=32)
    pts = line((0.5, 3.0, 3.3), (5.8, 3.0, 3.3), 200)
    ax = vol.sample_grad(pts).vdbflow.plot.line("velocity_jacobian", component="u", axis="x")
    vol.sample_grad(pts, mode="catmull_rom").vdbflow.plot.line("velocity_jacobian", component="u", axis="x", ax=ax)
    png_bytes(ax.figure)
    assert [ln.get_label() for ln in ax.get_lines()] == ["linear", "catmull_rom"]
    assert ax.get_xlabel() == "distance along the line [m]" and ax.get_ylabel() == "∂velocity[u]/∂x [1/s]"
    np.testing.assert_allclose(ax.get_lines()[0].get_xdata()[-1], 5.3)


def test_plot_errors(plane_ds):
    with pytest.raises(vdbflow.SamplingError, match="shape=\\(ns, nt\\)"):
        vdbflow.analysis.plot.slice_plot(plane_ds, "velocity", component="u")
    with pytest.raises(vdbflow.SamplingError, match="ns \\* nt = 1200"):
        vdbflow.analysis.plot.slice_plot(plane_ds, "velocity", component="u", shape=(10, 10))
    with pytest.raises(vdbflow.SamplingError, match="pass component="):
        vdbflow.analysis.plot.slice_plot(plane_ds, "velocity", shape=RES)
    with pytest.raises(vdbflow.SamplingError, match="derived quantity"):
        vdbflow.analysis.plot.slice_plot(plane_ds, "pressure", shape=RES)
    plt.close("all")


def test_plane_shape_from_an_earlier_job_result_attr(plane_ds):
    """Results of `vdbflow run` before points kept their shape stored it as JSON text; still read."""
    ds = plane_ds.assign_attrs(points_shape="[40, 30]")
    ax = ds.vdbflow.plot.slice("divergence")
    png_bytes(ax.figure)
    assert np.asarray(ax.collections[0].get_array()).size == 1200


def test_plane_sampled_with_its_shape_plots_without_a_shape(plane_ds):
    """(ns, nt, 3) points give values on two point dims; the helpers take the plane from them."""
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=32)
    pts = plane((0.3, 0.2, np.pi), (5.6, 0, 0), (0, 5.8, 0), RES, keep_shape=True)
    assert pts.shape == RES + (3,)
    shaped = vol.sample_grad(pts, dims=("s", "t"))
    assert shaped["velocity_jacobian"].dims == ("s", "t", "component", "axis") and shaped["x"].dims == ("s", "t")
    ax = shaped.vdbflow.plot.slice("q_criterion")
    png_bytes(ax.figure)
    np.testing.assert_allclose(
        np.asarray(ax.collections[0].get_array()).reshape(RES),
        plane_ds.vdbflow.q_criterion().values.reshape(RES),
        rtol=1e-6,
    )
    assert ax.get_xlabel() == "x [m]" and ax.get_ylabel() == "y [m]"
    fig = shaped.vdbflow.plot.jacobian_grid()
    png_bytes(fig)
    panels = [a for a in fig.axes if a.get_title()]
    np.testing.assert_allclose(
        np.asarray(panels[1].collections[0].get_array()).ravel(),
        plane_ds["velocity_jacobian"].values[:, 0, 1],
        rtol=1e-6,
    )  # du/dy
    with pytest.raises(vdbflow.SamplingError, match=r"expected shape=\(40, 30\)"):
        shaped.vdbflow.plot.slice("q_criterion", shape=(30, 40))
    with pytest.raises(vdbflow.SamplingError, match="one point dim"):
        shaped.vdbflow.plot.line("velocity", component="u")
    plt.close("all")


def test_slice_panels_share_one_colour_scale_spanning_every_panel():
    """Two FTLE estimates side by side (as the notebook shows them): each panel's colours and the one colour
    bar span the values of both fields, so a colour reads the same value in either panel."""
    tg = synthetic.taylor_green()
    seeds = plane((0.5, 0.5, 1.0), (5.2, 0, 0), (0, 5.2, 0), (24, 18)).reshape(24, 18, 3)
    a = vdbflow.ftle(tg, seeds, 0.0, 1.5, 0.1, dims=("s", "t"))
    b = vdbflow.ftle(tg, seeds, 0.0, 1.5, 0.1, dims=("s", "t"), method="finite_difference")
    va, vb = a.ftle.values, b.ftle.values
    lo, hi = min(np.nanmin(va), np.nanmin(vb)), max(np.nanmax(va), np.nanmax(vb))
    assert (np.nanmin(va), np.nanmax(va)) != (np.nanmin(vb), np.nanmax(vb))  # the fields' own ranges differ
    fig = vdbflow.plot.slice_panels([a, b], "ftle", ["variational", "finite differences"])
    panels = [ax for ax in fig.axes if ax.collections]
    bars = [ax for ax in fig.axes if not ax.collections or ax.get_label() == "<colorbar>"]
    assert [ax.get_title() for ax in panels[:2]] == ["variational", "finite differences"]
    assert len(fig.axes) == 3 and len(bars) == 1  # two panels, one colour bar
    for ax, values in zip(panels[:2], (va, vb), strict=True):
        (mesh,) = ax.collections
        assert mesh.get_clim() == pytest.approx((lo, hi))
        shown = np.ma.filled(mesh.get_array().astype(float), np.nan).ravel()
        np.testing.assert_array_equal(np.sort(shown[np.isfinite(shown)]), np.sort(values[np.isfinite(values)]))
    bar = fig.axes[-1]
    assert bar.get_ylim() == pytest.approx((lo, hi))  # the bar's scale is the panels' one
    assert "finite-time Lyapunov exponent" in bar.get_ylabel()
    png_bytes(fig)


def test_slice_plot_takes_colour_limits(plane_ds):
    ax = plane_ds.vdbflow.plot.slice("velocity", component="u", shape=RES, vmin=-3.0, vmax=2.0)
    assert ax.collections[0].get_clim() == (-3.0, 2.0)
    png_bytes(ax.figure)
