"""Grids named like the names a result gives its own coordinates, dims and variables (``z``, ``point``,
``component``, ``axis``, ``time``, ``position``, ``divergence``, ...): sampled into ``<name>_value``
(docs/results.md), with the same numbers as a grid of any other name, through every path: eager
sampling, Hessians, the accessor, gradient fields, particles, jobs, and named by ``vdbflow info``."""

import json

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import vdbflow
from vdbflow.core import schema
from vdbflow.jobs.cli.main import main

CLASHING = ["x", "y", "z", "i", "point", "component", "axis", "axis2", "time", "particle", "position", "ftle"]
CLASHING += ["stencil_inside", "lattice_x", "plane_s", "point_0"]
MATRIX = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 0.125]])


def linear_field(name: str, components: int = 3) -> vdbflow.Volume:
    """u = A x on a 16^3 box of unit voxels (trilinear sampling reproduces it exactly inside)."""
    ijk = np.stack(np.meshgrid(*[np.arange(16.0)] * 3, indexing="ij"), -1)
    arr = ijk @ MATRIX.T if components == 3 else ijk @ MATRIX[0]
    return vdbflow.Volume.from_dense(arr + 100.0, name=name)  # + 100: no voxel at the background


POINTS = np.array([[3.3, 4.4, 5.5], [7.25, 8.5, 2.75], [10.0, 11.5, 6.125]])


@pytest.mark.parametrize("components", [1, 3])
@pytest.mark.parametrize("name", CLASHING)
def test_a_grid_named_like_a_result_name_is_sampled_into_name_value(name, components):
    ds = linear_field(name, components).sample_grad(
        POINTS, outputs=("value", "jacobian", "inside") + (("divergence", "vorticity") if components == 3 else ())
    )
    vname = f"{name}_value"
    assert schema.value_name(name) == vname
    expected = POINTS @ (MATRIX.T if components == 3 else MATRIX[0]) + 100.0
    np.testing.assert_allclose(ds[vname].values, expected, rtol=1e-12)
    assert ds[vname].attrs["grid_name"] == name and ds[vname].attrs["long_name"] == name
    J = np.broadcast_to(MATRIX if components == 3 else MATRIX[0], ds[f"{name}_jacobian"].shape)
    np.testing.assert_allclose(ds[f"{name}_jacobian"].values, J, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ds.x.values, POINTS[:, 0])  # the coordinates keep their names
    assert ds.point.values.tolist() == [0, 1, 2] and ds.stencil_inside.values.all()
    if components == 3:
        np.testing.assert_allclose(ds.divergence.values, np.trace(MATRIX), rtol=1e-12)
        curl = [MATRIX[2, 1] - MATRIX[1, 2], MATRIX[0, 2] - MATRIX[2, 0], MATRIX[1, 0] - MATRIX[0, 1]]
        np.testing.assert_allclose(ds.vorticity.values, np.broadcast_to(curl, (3, 3)), rtol=1e-12)
        np.testing.assert_allclose(ds.vdbflow.helicity().values, np.sum(ds[vname].values * curl, axis=1), rtol=1e-12)


@pytest.mark.parametrize("name", ["velocity", "u", "value", "z_jacobian", "q_criterion"])
def test_other_names_are_kept(name):
    ds = linear_field(name).sample(POINTS)
    assert list(ds.data_vars) == [name] and "grid_name" not in ds[name].attrs


def test_hessian_and_gradient_fields_of_a_grid_named_z():
    vol = linear_field("z", 1)
    ds = vol.sample_hessian(POINTS[:1], mode="lag4")
    assert {"z_value", "z_jacobian", "z_hessian"} <= set(ds.data_vars)
    np.testing.assert_allclose(ds.z_hessian.values, 0.0, atol=1e-9)
    grad = vdbflow.gradient_field(vol)
    assert grad.name == "z_jacobian"
    np.testing.assert_allclose(grad.sample(POINTS)["z_jacobian"].values, np.broadcast_to(MATRIX[0], (3, 3)), rtol=1e-9)


def test_points_named_like_the_grid_are_refused():
    with pytest.raises(vdbflow.PointsError, match="named apart from the result's variables.*'u'"):
        linear_field("u").sample(POINTS[None], dims=("u", "t"))


def test_particles_through_a_grid_named_position():
    ds = vdbflow.advect(linear_field("position"), POINTS, 0.0, 0.01, 0.005, with_velocity=True, with_jacobian=True)
    assert ds.position.dims == ("particle", "time", "axis")
    np.testing.assert_allclose(ds.position_value.isel(time=0).values, POINTS @ MATRIX.T + 100.0, rtol=1e-12)
    assert ds.position_value.attrs["grid_name"] == "position"
    np.testing.assert_allclose(ds.position_jacobian.isel(time=0).values, np.broadcast_to(MATRIX, (3, 3, 3)))


@pytest.fixture(scope="module")
def client():
    import distributed

    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
        distributed.Client(lc) as c,
    ):
        yield c


def test_jobs_sample_and_advect_grids_named_z_and_time(tmp_path, client):
    """A sampling job on a grid named ``z`` and a particle job on one named ``time``: ``z_value`` beside the
    ``z`` coordinate, ``time_value`` beside the ``time`` coordinate."""
    path = tmp_path / "named.nvdb"
    vdbflow.save(str(path), {"z": linear_field("z"), "time": linear_field("time")})
    cfg = {
        "volume": {"path": str(path), "grids": ["z"]},
        "points": {"kind": "line", "start": [2, 3, 4], "end": [12, 11, 10], "count": 40},
        "sampling": {"outputs": ["value", "jacobian", "divergence"]},
        "output": {"path": str(tmp_path / "z.zarr")},
    }
    result = vdbflow.run(cfg, client=client)
    ds = xr.open_zarr(result.output)
    pts = np.stack([ds.x.values, ds.y.values, ds.z.values], -1)
    np.testing.assert_allclose(ds.z_value.values, pts @ MATRIX.T + 100.0, rtol=1e-10)
    np.testing.assert_allclose(ds.divergence.values, np.trace(MATRIX), rtol=1e-6)
    cfg["volume"]["grids"] = ["time"]
    cfg["points"] = {"kind": "line", "start": [5, 5, 5], "end": [9, 9, 9], "count": 4}
    cfg["advect"] = {"t0": 0.0, "t1": 0.01, "dt": 0.005, "outputs": ["velocity"]}
    cfg["output"] = {"path": str(tmp_path / "time.zarr")}
    result = vdbflow.run(cfg, client=client)
    ds = xr.open_zarr(result.output)
    assert ds.time.values.tolist() == pytest.approx([0.0, 0.005, 0.01])
    np.testing.assert_allclose(ds.time_value.isel(time=0).values, np.linspace(5, 9, 4)[:, None] * MATRIX.sum(1) + 100)


def test_info_names_the_variable_of_a_clashing_grid(tmp_path):
    path = tmp_path / "named.nvdb"
    vdbflow.save(str(path), {"z": linear_field("z"), "velocity": linear_field("velocity")})
    runner = CliRunner(env={"COLUMNS": "200"})
    out = runner.invoke(main, ["info", str(path)], catch_exceptions=False).output
    assert "sampled as 'z_value'" in out and out.count("sampled as") == 1
    listing = json.loads(runner.invoke(main, ["info", "--json", str(path)], catch_exceptions=False).output)
    assert [g["variable"] for g in listing[0]["grids"]] == ["z_value", "velocity"]


def test_a_grid_named_for_a_derived_quantity_keeps_its_name():
    """A grid named ``divergence`` (or a grid field such as ``q_criterion_field``'s) keeps its name; a derived
    quantity of the same name beside it is ``<grid>_<quantity>``."""
    ds = linear_field("divergence").sample_grad(POINTS, outputs=("value", "jacobian", "divergence", "vorticity"))
    np.testing.assert_allclose(ds.divergence.values, POINTS @ MATRIX.T + 100.0, rtol=1e-12)
    np.testing.assert_allclose(ds.divergence_divergence.values, np.trace(MATRIX), rtol=1e-12)
    assert ds.vorticity.dims == ("point", "axis")
