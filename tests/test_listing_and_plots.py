"""What a user reads: `vdbflow info` shows the units and component names a file stores, a wrong
quantity name lists the right ones, and FTLE fields plot against x and y with equal aspect."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import vdbflow
from vdbflow import synthetic
from vdbflow.analysis.grid_fields import FIELD_QUANTITIES, derived_field
from vdbflow.errors import SamplingError
from vdbflow.jobs.cli.main import main


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
    rows: dict[str, str] = {}  # the first grid's rows
    for line in table.splitlines():
        if line.count("│") == 3:
            rows.setdefault(line.split("│")[1].strip(), line.split("│")[2].strip())
    assert rows["units"] == "m/s" and rows["components"] == "u, v, w" and " m " in table
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


def test_a_lattice_spans_the_voxel_centres_by_default(tmp_path):
    """A dense field sampled at x = 0 .. 2 pi: the default bounds of a `grid` job and `data_bounds` are
    the span of the samples (voxel centres), not the voxel cells NanoVDB's world bbox records, so no
    lattice point lies beyond the data; `vdbflow info` shows the voxel centres' box as the data box."""
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.points import make_points

    n, h = 24, 2 * np.pi / 23
    vol = vdbflow.Volume.from_dense(np.ones((n, n, n), np.float32), voxel_size=h, origin=(0, 0, 0), background=0)
    np.testing.assert_allclose(vol.data_bounds("world"), [[0, 0, 0], [2 * np.pi] * 3])
    np.testing.assert_allclose(vol.data_bounds("index"), [[0, 0, 0], [n - 1] * 3])
    assert vol.world_bbox[1][0] > 2 * np.pi + 0.5 * h  # the cells reach a voxel beyond the last centre
    cfg = load_config(
        data={
            "volume": {"path": str(tmp_path / "v.nvdb")},
            "points": {"kind": "grid", "shape": [5, 5, 5]},
            "output": {"path": str(tmp_path / "o.zarr")},
        }
    )
    pts = make_points(cfg.points, vol.topology, vol.data_bounds("world", inner=True)).points.compute()
    assert pts.max() == pytest.approx(2 * np.pi) and pts.min() == 0.0
    assert vol.stencil_inside(pts).all()  # every lattice point reads only data, the last faces included
    outer = make_points(cfg.points, vol.topology, vol.data_bounds("world")).points.compute()
    assert not vol.stencil_inside(outer).all()  # on the last centres the sampler takes the cell beyond
    vdbflow.save(tmp_path / "v.nvdb", {"density": vol})
    table = CliRunner(env={"COLUMNS": "120"}).invoke(main, ["info", str(tmp_path / "v.nvdb")]).output
    assert "│ data box (world) │ [0.0, 0.0, 0.0] .. [6.28319, 6.28319, 6.28319] (voxel centres)" in table


@pytest.mark.slow
def test_a_script_that_starts_a_cluster_unguarded_is_refused_at_once(tmp_path):
    """A README example saved as a script: Dask's worker processes import the main module, so an
    unguarded call would start clusters in every worker; it is refused before any process starts, in
    one message, and the same code under `if __name__ == "__main__":` runs."""
    import subprocess
    import sys

    body = (
        "import vdbflow\n"
        "{indent}vdbflow.run({config!r}, overrides={{'points.count': 500, 'volume.synthetic.resolution': 16}},\n"
        "{indent}            **{{'output.path': 'out.zarr', 'cluster.workers': 1}})\n"
        "{indent}print('ran')\n"
    )
    config = str(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml")
    (tmp_path / "bare.py").write_text(body.format(indent="", config=config))
    guarded = body.format(indent="    ", config=config).replace(
        "import vdbflow\n", "import vdbflow\n\nif __name__ == '__main__':\n"
    )
    (tmp_path / "guarded.py").write_text(guarded)
    bare = subprocess.run([sys.executable, "bare.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bare.returncode == 1 and "ran" not in bare.stdout
    assert 'under `if __name__ == "__main__":`, found the call at its top level (line 2)' in bare.stderr
    assert len(bare.stderr.splitlines()) < 30 and "Nanny" not in bare.stderr
    ok = subprocess.run([sys.executable, "guarded.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "ran" in ok.stdout, ok.stderr[-2000:]
