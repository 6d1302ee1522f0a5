"""What a user reads: `vdbflow info` shows the units and component names a file stores, a wrong
quantity name lists the right ones, and FTLE fields plot against x and y with equal aspect."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import vdbflow
from vdbflow import synthetic
from vdbflow.analysis.grid_fields import FIELD_QUANTITIES, derived_field
from vdbflow.errors import SamplingError
from vdbflow.jobs.cli import main


@pytest.fixture(scope="module")
def tg():
    return synthetic.flow_volume(synthetic.taylor_green(), resolution=16)


def test_info_shows_stored_units_and_component_names(tmp_path, tg):
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    vol.units, vol.length_units, vol.component_names = "m/s", "m", ("u", "v", "w")
    plain = vdbflow.Volume.from_voxels(np.argwhere(np.ones((8, 8, 8), bool)), np.ones(512, np.float32))
    vdbflow.save(tmp_path / "two.nvdb", {"velocity": vol, "bare": plain})
    grids = vdbflow.list_grids(tmp_path / "two.nvdb")
    assert (grids[0].units, grids[0].length_units, grids[0].component_names) == ("m/s", "m", ("u", "v", "w"))
    assert (grids[1].units, grids[1].component_names) == (None, None)
    runner = CliRunner(env={"COLUMNS": "120"})
    table = runner.invoke(main, ["info", str(tmp_path / "two.nvdb")]).output
    assert "│ units         │ m/s" in table and "│ components    │ u, v, w" in table and " m " in table
    assert "(none stored)" in table
    listing = json.loads(runner.invoke(main, ["info", "--json", str(tmp_path / "two.nvdb")]).output)
    first = listing[0]["grids"][0]
    assert first["units"] == "m/s" and first["length_units"] == "m" and first["component_names"] == ["u", "v", "w"]


@pytest.mark.parametrize("wrong, near", [("magnitude", "vorticity_magnitude"), ("q_criteron", "q_criterion")])
def test_a_wrong_quantity_lists_the_valid_ones(tg, wrong, near):
    with pytest.raises(SamplingError) as err:
        derived_field(tg, wrong)
    assert all(repr(q) in str(err.value) for q in ("laplacian", *FIELD_QUANTITIES))
    assert f"did you mean {near!r}?" in str(err.value)


def test_module_names_of_analysis_flow_are_not_quantities(tg):
    with pytest.raises(SamplingError, match="expected a quantity among"):
        derived_field(tg, "xr")


def test_an_ftle_field_plots_x_across_and_y_up_with_equal_aspect(tg):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, Y = np.meshgrid(np.linspace(1, 5, 12), np.linspace(1.5, 3.5, 6))  # rows follow y, columns x
    seeds = np.stack([X, Y, np.full_like(X, np.pi)], axis=-1)
    field = vdbflow.ftle(tg, seeds, 0.0, 0.5, dt=0.1)
    ax = field.vdbflow.plot.slice("ftle")
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_aspect()) == ("x [m]", "y [m]", 1.0)
    x0, x1 = ax.get_xlim()
    assert x0 <= 1.0 and x1 >= 5.0  # the image spans the seeds' x across
    plt.close("all")
