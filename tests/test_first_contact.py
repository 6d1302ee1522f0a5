"""What a new user meets first with real files: the wrong kind of file, a missing one, an index grid asked
to sample, an unnamed grid asked by name, and what ``vdbflow info`` and ``vdbflow convert`` print (the second
fresh-clone pass of issue 50, with Warp's .nvdb files)."""

import os

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import vdbflow
from vdbflow.jobs.cli.main import main


def _warp_asset(name: str) -> str:
    warp = pytest.importorskip("warp")
    return os.path.join(os.path.dirname(warp.__file__), name)


def _invoke(*args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_info_on_an_hdf5_file_says_what_it_is(tmp_path):
    path = tmp_path / "result.nc"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    result = _invoke("info", path)
    assert result.exit_code == 2
    assert "this is an HDF5 file" in result.output and "open_result" in result.output
    with pytest.raises(vdbflow.NanoVDBError, match="HDF5 file"):
        vdbflow.open(path)


def test_info_gives_the_file_size_and_says_the_tile_counts_are_the_active_ones():
    path = _warp_asset("tests/assets/test_vec_grid.nvdb")
    out = _invoke("info", path).output
    assert f"1 grid(s), {os.path.getsize(path):,} bytes" in out  # the zip-compressed file, beside the grid's size
    assert "active tiles" in out and "bytes uncompressed, codec zip" in out


def test_open_result_refuses_a_vtkhdf_file_and_a_missing_store_with_storage_errors(tmp_path):
    with pytest.raises(vdbflow.StorageError, match="VTKHDF/HDF5 file.*vtkHDFReader"):
        vdbflow.open_result(tmp_path / "out.vtkhdf")
    with pytest.raises(vdbflow.StorageError, match="expected a Zarr store of a vdbflow result"):
        vdbflow.open_result(tmp_path / "nothing.zarr")


def test_a_missing_file_is_a_storage_error_naming_it(tmp_path):
    with pytest.raises(vdbflow.StorageError, match=r"found nothing there") as err:
        vdbflow.open(tmp_path / "missing.nvdb")
    assert "missing.nvdb" in str(err.value)


def test_an_index_grid_asked_to_sample_says_to_attach_values():
    topo = vdbflow.open(_warp_asset("tests/assets/test_index_grid.nvdb"))
    assert isinstance(topo, vdbflow.Topology)
    with pytest.raises(vdbflow.SamplingError, match=r"sample_grad\(\), got a Topology.*with_data"):
        topo.sample_grad(np.zeros((1, 3)))
    assert not hasattr(topo, "sample") and getattr(topo, "statistics", None) is None  # still an AttributeError
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        topo.no_such_thing  # noqa: B018
    values = topo.with_data(np.arange(topo.value_count, dtype=np.float32))
    assert values.sample(np.zeros((1, 3)))["value"].shape == (1,)


def test_an_unnamed_grid_asked_by_name_shows_how_to_ask_for_it():
    path = _warp_asset("tests/assets/test_vec_grid.nvdb")
    with pytest.raises(vdbflow.NanoVDBError, match=r"\[\(unnamed: grid 0, sampled as 'value'\)\] or a grid index"):
        vdbflow.open(path, grid="velocity")
    assert "value" in vdbflow.open(path, grid=0).sample(np.zeros((1, 3)))


def test_convert_of_a_sparse_file_keeps_it_sparse_and_prints_a_summary(tmp_path):
    rocks = vdbflow.open(_warp_asset("examples/assets/rocks.nvdb"))
    rocks.to_nvdb(tmp_path / "rocks.nvdb")
    result = _invoke("convert", tmp_path / "rocks.nvdb", tmp_path / "again.nvdb", "--codec", "blosc")
    assert result.exit_code == 0, result.output
    assert "<vdbflow" not in result.output  # a summary, not a repr
    # a .nvdb source is re-saved as it is (was: read as a dense box, every voxel of it active)
    assert "grid 'surface', float32, 308,828 active voxels, 1,493 leaves, 329 tiles (0 active)" in result.output
    again = vdbflow.open(tmp_path / "again.nvdb")
    assert vdbflow.list_grids(tmp_path / "again.nvdb")[0].codec == "blosc"
    np.testing.assert_array_equal(again.leaf_values, rocks.leaf_values)
    np.testing.assert_array_equal(again.topology.masks, rocks.topology.masks)
