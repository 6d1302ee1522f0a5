"""Inactive tiles: a level set's interior tiles hold a value (its inside distance) but no active voxels.
vdbflow keeps them for sampling and must write them back inactive; OpenVDB (pyopenvdb, through NanoVDB's own
``nanovdb_convert``) is the oracle for which voxels are active in what vdbflow writes."""

import os
import subprocess

import numpy as np
import pytest
from system_tools import require_tool, run_pyopenvdb

import vdbflow
from vdbflow.core.topology import Topology

COUNT_ACTIVE = """
import sys, pyopenvdb as vdb
grid = vdb.read(sys.argv[1], vdb.readAllGridMetadata(sys.argv[1])[0].name)
print(grid.activeVoxelCount(), grid.leafCount())
"""


def _openvdb_counts(nvdb: str, tmp_path, stem: str) -> tuple[int, int]:
    """(active voxels, leaves) of an .nvdb file as OpenVDB counts them, after NanoVDB's own conversion."""
    vdb_path = str(tmp_path / f"{stem}.vdb")
    subprocess.run([require_tool("nanovdb_convert"), "-f", nvdb, vdb_path], check=True, capture_output=True)
    active, leaves = run_pyopenvdb(COUNT_ACTIVE, vdb_path).stdout.split()
    return int(active), int(leaves)


def _rocks() -> str:
    warp = pytest.importorskip("warp")
    return os.path.join(os.path.dirname(warp.__file__), "examples/assets/rocks.nvdb")


def test_a_level_sets_inactive_tiles_are_written_back_inactive(tmp_path):
    rocks = _rocks()
    vol = vdbflow.open(rocks)
    assert vol.tile_count and vol.topology.active_tile_count == 0  # the interior: kept for its value only
    vol.to_nvdb(tmp_path / "again.nvdb")
    want = _openvdb_counts(rocks, tmp_path, "original")
    assert want[0] == vol.active_voxel_count  # 308,828: the narrow band alone
    assert _openvdb_counts(str(tmp_path / "again.nvdb"), tmp_path, "again") == want
    info = vdbflow.list_grids(tmp_path / "again.nvdb")[0]
    assert (info.tile_counts, info.active_voxel_count) == ((0, 0, 0), want[0])
    subprocess.run([require_tool("nanovdb_validate"), str(tmp_path / "again.nvdb")], check=True)
    again = vdbflow.open(tmp_path / "again.nvdb")
    np.testing.assert_array_equal(again.topology.tile_active, vol.topology.tile_active)
    np.testing.assert_array_equal(again.tile_values, vol.tile_values)
    points = np.random.default_rng(3).uniform(*vol.world_bbox, size=(5000, 3))
    a, b = vol.sample_grad(points), again.sample_grad(points)
    for name in ("surface", "surface_jacobian"):  # the interior tiles still give the inside distance
        np.testing.assert_array_equal(a[name].values, b[name].values)


def test_active_and_inactive_tiles_of_each_size_keep_their_state(tmp_path):
    # leaves at the origin, an active 8^3 tile, an inactive 128^3 tile and an inactive 4096^3 one
    leaf = np.zeros((1, 3), np.int32)
    masks = np.zeros((1, 8), np.uint64)
    masks[0, 0] = 0b111  # three active voxels
    origins = np.array([[8, 0, 0], [128, 0, 0], [4096, 0, 0]], np.int32)
    sizes = np.array([8, 128, 4096], np.int32)
    active = np.array([True, False, False])
    topo = Topology(leaf, masks, None, origins, sizes, tile_active=active)
    vol = topo.with_data(np.arange(1, 4, dtype=np.float32), background=0.0, tile_values=[-1.0, 2.0, -3.0])
    assert "3 tiles (1 active)" in repr(vol)
    vol.to_nvdb(tmp_path / "tiles.nvdb")
    back = vdbflow.open(tmp_path / "tiles.nvdb")
    t = back.topology  # read root first: compared by origin
    got = {
        tuple(o): (int(s), bool(a), float(v))
        for o, s, a, v in zip(t.tile_origins, t.tile_sizes, t.tile_active, back.tile_values[:, 0], strict=True)
    }
    assert got == {(8, 0, 0): (8, True, -1.0), (128, 0, 0): (128, False, 2.0), (4096, 0, 0): (4096, False, -3.0)}
    info = vdbflow.list_grids(tmp_path / "tiles.nvdb")[0]
    assert info.tile_counts == (1, 0, 0) and info.active_voxel_count == 3 + 8**3
    assert info.index_bbox == ((0, 0, 0), (15, 7, 7))  # the active voxels and the active tile only
    assert _openvdb_counts(str(tmp_path / "tiles.nvdb"), tmp_path, "tiles")[0] == 3 + 8**3
    vol.to_zarr(str(tmp_path / "tiles.zarr"))  # vdbflow's own volume store keeps the states too
    np.testing.assert_array_equal(vdbflow.open(tmp_path / "tiles.zarr").topology.tile_active, active)
    # each tile's value is still read where it lies, active or not (index space: voxel i at x = i)
    got = back.sample([[12.0, 4.0, 4.0], [200.0, 60.0, 60.0], [5000.0, 100.0, 100.0]], space="index")
    np.testing.assert_array_equal(got["value"].values, [-1.0, 2.0, -3.0])


def test_a_tile_active_state_per_tile_is_required():
    with pytest.raises(vdbflow.VolumeError, match=r"one active state per tile \(2\)"):
        Topology(np.zeros((0, 3)), np.zeros((0, 8)), None, [[0, 0, 0], [8, 0, 0]], [8, 8], tile_active=[True])
