"""Level sets: their tiles (the constant inside of the narrow band, at minus the background) are not data by
default - stencil checks, the ``inside`` flags and plots blank them - and the gradient of a scalar grid is
called a gradient in ``long_name`` and titles (the variable keeps its ``<grid>_jacobian`` name)."""

import numpy as np
import pytest

import vdbflow
from vdbflow.ops.coverage import stencil_inside

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

BG = 3.0  # the narrow band's half width, the background


def plane_level_set(grid_class: str = "level set") -> tuple[vdbflow.Volume, np.ndarray]:
    """phi = x - 20 (the plane x = 20): an active band 17 <= x <= 23 over y, z in [0, 16), its inside
    (8 <= x < 16) as four 8^3 tiles at -BG, as OpenVDB stores a level set; and the band's dense mask."""
    ijk = np.stack(np.meshgrid(np.arange(17, 24), np.arange(16), np.arange(16), indexing="ij"), -1).reshape(-1, 3)
    origins = np.array([[8, y, z] for y in (0, 8) for z in (0, 8)])
    vol = vdbflow.Volume.from_voxels(
        ijk, ijk[:, 0] - 20.0, BG, tiles=(origins, np.full(4, 8), np.full(4, -BG)), name="phi"
    )
    vol.grid_class = grid_class
    mask = np.zeros((32, 16, 16), bool)
    mask[17:24] = True
    return vol, mask


def oracle(mask: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """linear: the 8 corners of the point's cell are active voxels of the band (tiles not counted)."""
    b = np.floor(pts).astype(int)
    ok = np.ones(len(pts), bool)
    for o in np.ndindex(2, 2, 2):
        c = b + o
        inb = ((c >= 0) & (c < mask.shape)).all(axis=1)
        ok &= inb
        ok[inb] &= mask[tuple(c[inb].T)]
    return ok


PTS = np.stack([np.linspace(8.0, 23.0, 61), np.full(61, 5.5), np.full(61, 7.25)], -1)


def test_a_level_sets_tiles_are_not_data_by_default():
    vol, mask = plane_level_set()
    inside = vol.stencil_inside(PTS)
    np.testing.assert_array_equal(inside, oracle(mask, PTS))
    assert not inside[PTS[:, 0] < 16].any() and inside[(PTS[:, 0] >= 17) & (PTS[:, 0] < 23)].all()
    assert vol.stencil_inside(PTS, tiles=True)[PTS[:, 0] < 15].all()  # the option: tiles as data
    other, _ = plane_level_set("fog volume")
    assert other.stencil_inside(PTS)[PTS[:, 0] < 15].all()  # other grids: tiles are data
    assert not other.stencil_inside(PTS, tiles=False)[PTS[:, 0] < 16].any()
    np.testing.assert_array_equal(stencil_inside(vol.topology, PTS, tiles=False), oracle(mask, PTS))


def test_level_set_files_blank_their_tiles(tmp_path):
    vol, mask = plane_level_set()
    vdbflow.save(str(tmp_path / "ls.nvdb"), {"phi": vol})
    back = vdbflow.open(tmp_path / "ls.nvdb")
    assert back.grid_class == "level set" and back.tile_count == 4
    ds = back.sample_grad(PTS, outputs=("value", "jacobian", "inside"))
    np.testing.assert_array_equal(ds.stencil_inside.values, oracle(mask, PTS))
    assert ds.stencil_inside.attrs["tiles_are_data"] == 0 and "a level set" in ds.stencil_inside.attrs["long_name"]
    band = ds.stencil_inside.values
    np.testing.assert_allclose(ds.phi_jacobian.values[band], np.broadcast_to([1.0, 0, 0], (band.sum(), 3)), atol=1e-12)


def test_the_gradient_of_a_scalar_grid_is_called_a_gradient():
    vol, _ = plane_level_set()
    ds = vol.sample_grad(PTS)
    assert ds.phi_jacobian.attrs["long_name"] == "gradient of phi"
    assert "phi_jacobian[axis] = d phi / d axis" in ds.phi_jacobian.attrs["convention"]  # the schema unchanged
    assert ds.phi_jacobian.dims == ("point", "axis")
    vec = vdbflow.Volume.from_dense(np.ones((8, 8, 8, 3)), name="velocity").sample_grad(PTS[:1] * 0 + 3.5)
    assert vec.velocity_jacobian.attrs["long_name"] == "Jacobian of velocity"


def test_a_level_set_plot_blanks_the_tiles_and_says_gradient():
    """A slice through the band and the tiles: the tiles' points are blank (NaN), the band's show |grad phi| = 1,
    and the title and colour bar say "gradient"."""
    import matplotlib.pyplot as plt

    vol, mask = plane_level_set()
    s, t = np.meshgrid(np.linspace(8.0, 23.0, 31), np.linspace(1.0, 14.0, 14), indexing="ij")
    pts = np.stack([s, t, np.full_like(s, 7.25)], -1)
    ds = vol.sample_grad(pts, outputs=("value", "jacobian", "inside"), dims=("s", "t"))
    ax = ds.vdbflow.plot.slice("phi_jacobian", component="magnitude")
    shown = np.ma.filled(ax.collections[0].get_array().astype(float), np.nan).reshape(s.shape)
    expected = oracle(mask, pts.reshape(-1, 3)).reshape(s.shape)
    np.testing.assert_array_equal(np.isfinite(shown), expected)
    np.testing.assert_allclose(shown[expected], 1.0, rtol=1e-12)
    assert ax.get_title().startswith("|gradient of phi|") and "blanked" in ax.get_title()
    assert "gradient of phi" in ax.figure.axes[-1].get_ylabel()
    fig = ds.vdbflow.plot.jacobian_grid()
    assert fig.get_suptitle().startswith("Gradient of phi")
    plt.close("all")


# -- issue 41 row 10: FTLE units ----------------------------------------------------------------------------


def test_ftle_has_units_of_one_over_time():
    """u = A x in m/s over a box in m: the FTLE is per second, in vdbflow.ftle and in advect's ftle output;
    a field without units gives none (no units invented)."""
    ijk = np.stack(np.meshgrid(*[np.arange(16.0)] * 3, indexing="ij"), -1)
    vol = vdbflow.Volume.from_dense(ijk @ np.diag([0.1, -0.05, -0.05]).T + 10.0, name="velocity")
    seeds = np.stack(np.meshgrid([6.0, 7.0], [6.0, 7.0], [7.0], indexing="ij"), -1)[:, :, 0]
    bare = vdbflow.ftle(vol, seeds, 0.0, 0.2, 0.1, dims=("s", "t"))
    assert "units" not in bare.ftle.attrs
    vol.units, vol.length_units = "m/s", "m"
    field = vdbflow.ftle(vol, seeds, 0.0, 0.2, 0.1, dims=("s", "t"))
    assert field.ftle.attrs["units"] == "1/s" and field.ftle.attrs["long_name"] == "finite-time Lyapunov exponent"
    np.testing.assert_allclose(field.ftle.values, 0.1, rtol=1e-6)  # the largest stretching rate of A
    paths = vdbflow.advect(vol, seeds.reshape(-1, 3), 0.0, 0.2, 0.1, with_ftle=True)
    assert paths.ftle.attrs["units"] == "1/s"
    vol.units, vol.length_units = "km/h", "km"
    assert vdbflow.ftle(vol, seeds, 0.0, 0.2, 0.1, dims=("s", "t")).ftle.attrs["units"] == "1/h"
