"""VTKHDF results (issue 50): ``output.format: vtkhdf`` and ``ds.vdbflow.to_vtkhdf(path)`` write files that
VTK's own ``vtkHDFReader`` opens, every point and every array equal to the same job's Zarr result: point
sets as PolyData with one vertex a point, regular lattices (grid and plane points, dense boxes) as
ImageData."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr
from output_jobs import client, job  # noqa: F401

import vdbflow
from vdbflow.errors import WriteError
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.publish.results import not_a_result

vtk = pytest.importorskip("vtkmodules.vtkIOHDF", reason="vtk is in the test extra")
from vtkmodules.util.numpy_support import vtk_to_numpy  # noqa: E402

OUTPUTS = ["value", "jacobian", "q_criterion", "vorticity", "inside"]


def read_vtk(path) -> object:
    """The dataset VTK's own reader makes of a VTKHDF file."""
    reader = vtk.vtkHDFReader()
    reader.SetFileName(str(path))
    reader.Update()
    return reader.GetOutput()


def point_arrays(out) -> dict[str, np.ndarray]:
    data = out.GetPointData()
    return {data.GetArrayName(i): vtk_to_numpy(data.GetArray(i)) for i in range(data.GetNumberOfArrays())}


def vtk_points(out) -> np.ndarray:
    """Every point's world coordinates as VTK computes them (ImageData: from origin, spacing, direction)."""
    return np.array([out.GetPoint(n) for n in range(out.GetNumberOfPoints())])


def as_vtk_arrays(ds: xr.Dataset, dims: tuple[str, ...], image: bool) -> dict[str, np.ndarray]:
    """The oracle: each numeric variable of ``ds`` in VTK's point order (ImageData: the first point dim
    fastest), its other dims flattened in C order (the Jacobian: 3 c + a)."""
    out = {}
    for name, var in ds.variables.items():
        if name in ("x", "y", "z") or var.dtype.kind not in "biuf" or not set(dims) <= set(var.dims):
            continue
        rest = [d for d in var.dims if d not in dims]
        order = (*(dims[::-1] if image else dims), *rest)
        values = var.transpose(*order).values
        n = int(np.prod([ds.sizes[d] for d in dims]))
        values = values.reshape(n, -1) if rest else values.reshape(n)
        out[str(name)] = values.astype(np.uint8) if values.dtype == bool else values
    return out


def run_both(tmp_path, client, points: dict, name: str):  # noqa: F811
    """The same job written as Zarr and as VTKHDF; both results opened (the Zarr one loaded)."""
    results = {}
    for suffix in ("zarr", "vtkhdf"):
        cfg = job(tmp_path, tmp_path / f"{name}.{suffix}")
        cfg["points"] = points
        cfg["sampling"]["outputs"] = OUTPUTS
        results[suffix] = vdbflow.run(cfg, client).output
    with xr.open_zarr(results["zarr"]) as ds:
        return ds.load(), results["vtkhdf"]


@pytest.mark.slow
def test_point_job_is_polydata_equal_to_the_zarr_result(tmp_path, client):  # noqa: F811
    expected, path = run_both(tmp_path, client, {"kind": "random", "count": 3_000, "chunk": 500, "seed": 3}, "r")
    out = read_vtk(path)
    assert out.IsA("vtkPolyData") and out.GetNumberOfPoints() == 3_000
    xyz = np.stack([expected[c].values for c in "xyz"], axis=-1)
    np.testing.assert_array_equal(vtk_to_numpy(out.GetPoints().GetData()), xyz)
    verts = out.GetVerts()  # one vertex a point: cell n holds point n alone
    assert out.GetNumberOfCells() == out.GetNumberOfVerts() == 3_000
    np.testing.assert_array_equal(vtk_to_numpy(verts.GetConnectivityArray()), np.arange(3_000))
    np.testing.assert_array_equal(vtk_to_numpy(verts.GetOffsetsArray()), np.arange(3_001))
    got, want = point_arrays(out), as_vtk_arrays(expected, ("point",), image=False)
    assert sorted(got) == sorted(want) == sorted(["point", "q_criterion", "stencil_inside", "velocity",
                                                  "velocity_jacobian", "vorticity"])  # fmt: skip
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)
    jac = expected["velocity_jacobian"].values  # row-major: component 3 c + a is J[c, a]
    np.testing.assert_array_equal(got["velocity_jacobian"][:, 5], jac[:, 1, 2])
    assert not got["stencil_inside"].all() and got["stencil_inside"].any()  # both kinds of points are there
    with h5py.File(path) as f:
        comps = f["VTKHDF/PointData/velocity_jacobian"].attrs["components"]
        assert comps.split() == ["u/x", "u/y", "u/z", "v/x", "v/y", "v/z", "w/x", "w/y", "w/z"]
        for key in ("title", "input_sha256", "Conventions", "stencil_outside_points"):  # provenance
            assert f.attrs[key] == expected.attrs[key], key
        assert "r.vtkhdf" in f.attrs["vdbflow_config"] and f.attrs["created"]
    assert not_a_result(path) is None  # output.overwrite: always may replace it


def test_grid_job_is_image_data_equal_to_the_zarr_result(tmp_path, client):  # noqa: F811
    points = {"kind": "grid", "shape": [5, 6, 7], "chunk": 60, "bounds": [[0.5, 0.6, 0.7], [4.5, 5.0, 5.5]]}
    expected, path = run_both(tmp_path, client, points, "g")
    dims = ("lattice_x", "lattice_y", "lattice_z")
    out = read_vtk(path)
    assert out.IsA("vtkImageData") and out.GetDimensions() == (5, 6, 7)
    xyz = np.stack([expected[c].transpose(*dims[::-1]).values.reshape(-1) for c in "xyz"], axis=-1)
    np.testing.assert_allclose(vtk_points(out), xyz, rtol=0, atol=1e-12)
    got, want = point_arrays(out), as_vtk_arrays(expected, dims, image=True)
    assert sorted(got) == sorted(want) and "velocity_jacobian" in got
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)


@pytest.mark.slow
def test_tilted_plane_is_image_data_with_its_direction(tmp_path, client):  # noqa: F811
    u, v = [2.0, 1.0, 0.0], [-0.5, 1.0, 1.5]  # orthogonal, tilted against every axis
    points = {"kind": "plane", "origin": [0.7, 0.8, 0.9], "u": u, "v": v, "resolution": [9, 4], "chunk": 12}
    expected, path = run_both(tmp_path, client, points, "p")
    dims = ("plane_s", "plane_t")
    out = read_vtk(path)
    assert out.IsA("vtkImageData") and out.GetDimensions() == (9, 4, 1)
    xyz = np.stack([expected[c].transpose(*dims[::-1]).values.reshape(-1) for c in "xyz"], axis=-1)
    np.testing.assert_allclose(vtk_points(out), xyz, rtol=0, atol=1e-12)
    got, want = point_arrays(out), as_vtk_arrays(expected, dims, image=True)
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)


def test_accessor_writes_samples_and_dense_boxes(tmp_path):
    vol = vdbflow.synthetic.flow_volume(
        vdbflow.synthetic.make_field("taylor_green"), 16, 2 * np.pi, np.dtype("float32")
    )
    rng = np.random.default_rng(1)
    pts = vol.transform.apply(rng.uniform(0, 15, (500, 3)))
    ds = vol.sample_grad(pts, outputs=("value", "jacobian", "q_criterion", "inside"))
    path = ds.vdbflow.to_vtkhdf(tmp_path / "s.vtkhdf")
    out = read_vtk(path)
    np.testing.assert_array_equal(vtk_to_numpy(out.GetPoints().GetData()), pts)
    got = point_arrays(out)
    for name, values in as_vtk_arrays(ds, ("point",), image=False).items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)
    vdbflow.save(tmp_path / "v.nvdb", {"velocity": vol})
    with xr.open_dataset(tmp_path / "v.nvdb", engine="vdbflow") as box:
        box.vdbflow.to_vtkhdf(tmp_path / "box.vtkhdf")
        out = read_vtk(tmp_path / "box.vtkhdf")
        dims = ("x", "y", "z")
        assert out.IsA("vtkImageData") and out.GetDimensions() == tuple(box.sizes[d] for d in dims)
        grid = np.stack(np.meshgrid(*(box[d].values for d in dims), indexing="ij"), axis=-1)
        np.testing.assert_allclose(vtk_points(out), grid.transpose(2, 1, 0, 3).reshape(-1, 3), rtol=0, atol=1e-12)
        got = point_arrays(out)
        for name, values in as_vtk_arrays(box, dims, image=True).items():
            np.testing.assert_array_equal(got[name], values, err_msg=name)


def test_bad_inputs_leave_nothing(tmp_path):
    import dask.array as da

    with pytest.raises(WriteError, match=r"expected a Dataset with point coordinates x, y, z .*found \[\]"):
        xr.Dataset({"count": ("bin", np.arange(4))}).vdbflow.to_vtkhdf(tmp_path / "h.vtkhdf")
    (tmp_path / "taken.vtkhdf").write_text("mine")
    ds = xr.Dataset(coords={c: ("point", np.arange(3.0)) for c in "xyz"})
    with pytest.raises(WriteError, match="expected no file at .*taken.vtkhdf .*overwrite=True"):
        ds.vdbflow.to_vtkhdf(tmp_path / "taken.vtkhdf")
    assert (tmp_path / "taken.vtkhdf").read_text() == "mine"

    def fail(block):
        raise RuntimeError("a chunk failed")

    broken = ds.assign(q=("point", da.ones(3, chunks=1).map_blocks(fail, dtype=float)))
    with pytest.raises(RuntimeError, match="a chunk failed"):
        broken.vdbflow.to_vtkhdf(tmp_path / "b.vtkhdf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.vtkhdf"]  # no file, no private directory


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reduce": {"moments": ["q_criterion"]}}, "expected output.format vtkhdf only for sampled points"),
        ({"output": {"path": "memory://bucket/r.vtkhdf"}}, "expected a local path for a VTKHDF result"),
        ({"output": {"path": "r.vtkhdf", "shard": 1_000}}, "expected zarr_format and shard only with format zarr"),
    ],
)
def test_configs_vtkhdf_cannot_write_are_refused(tmp_path, change, message):
    cfg = job(tmp_path, tmp_path / "r.vtkhdf")
    for key, value in change.items():
        cfg[key] = {**cfg.get(key, {}), **value} if key == "output" else value
    with pytest.raises(ConfigError, match=message):
        vdbflow.run(cfg)
    assert not list(tmp_path.glob("*.vtkhdf*"))


def test_the_paraview_page_python_block_runs(tmp_path, monkeypatch):
    """docs/paraview.md's Python block, run where ``vol``, ``pts`` and ``field.nvdb`` are the demo's kind."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "paraview.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
    monkeypatch.chdir(tmp_path)
    vol = vdbflow.synthetic.flow_volume(vdbflow.synthetic.make_field("taylor_green"), 16, 2 * np.pi)
    vdbflow.save("field.nvdb", {"velocity": vol})
    pts = vol.transform.apply(np.random.default_rng(2).uniform(0, 15, (200, 3)))
    exec(compile(code, "docs/paraview.md", "exec"), {"vol": vol, "pts": pts, "xr": xr})
    assert read_vtk("samples.vtkhdf").GetNumberOfPoints() == 200
    assert read_vtk("field.vtkhdf").IsA("vtkImageData")
