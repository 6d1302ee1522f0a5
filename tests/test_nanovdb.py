"""NanoVDB files: interoperability with warp-lang both ways, the .nvdb files shipped with Warp,
subsets, and bad files."""

import os
import struct
import warnings

import numpy as np
import pytest
from reference import probe_points, random_sparse_voxels

import vdbflow
from vdbflow.io.nanovdb import format as fmt

wo = pytest.importorskip("warp_oracle")
wp = wo.wp
WARP_DIR = os.path.dirname(wp.__file__)
ASSETS = {  # file: value type
    "tests/assets/test_grid.nvdb": "float32",
    "tests/assets/test_int32_grid.nvdb": "int32",
    "tests/assets/test_vec_grid.nvdb": "vec3f",
    "tests/assets/torus.nvdb": "float32",
    "examples/assets/rocks.nvdb": "float32",
}
TYPES = {
    "int32": (np.int32, 1),
    "int64": (np.int64, 1),
    "uint32": (np.uint32, 1),
    "float32": (np.float32, 1),
    "float64": (np.float64, 1),
    "vec3f": (np.float32, 3),
    "vec3d": (np.float64, 3),
    "vec4f": (np.float32, 4),
    "vec4d": (np.float64, 4),
}


def warp_load(path):
    with open(path, "rb") as fh:
        return wp.Volume.load_from_nvdb(fh, device="cpu")


def compare_with_warp(vol, wvol, type_name, points):
    is_float = np.dtype(TYPES[type_name][0]).kind == "f"
    want, _ = wo.warp_sample(wvol, type_name, points, "closest")
    got, _ = vdbflow.sample_grad_arrays(vol, points, "closest")
    np.testing.assert_array_equal(got, want.reshape(got.shape))
    if is_float:
        want_v, want_j = wo.warp_sample(wvol, type_name, points, "linear")
        got_v, got_j = vdbflow.sample_grad_arrays(vol, points, "linear")
        tol = 32 * np.finfo(np.float32).eps * max(1.0, float(np.abs(want_v).max()))
        np.testing.assert_allclose(got_v, want_v.reshape(got_v.shape), atol=tol, rtol=0)
        np.testing.assert_allclose(got_j, want_j.reshape(got_j.shape), atol=2 * tol, rtol=0)


def spread_points(rng, vol, n=3000):
    """Points near active voxels and across the whole index box (tiles, background)."""
    act = vol.active_voxels()
    box = vol.index_bbox
    near = act[rng.integers(0, len(act), n)] + rng.uniform(-2, 2, (n, 3))
    anywhere = rng.uniform(box[0] - 10, box[1] + 10, (n, 3))
    return np.concatenate([near, anywhere]).astype(np.float32)


@pytest.mark.parametrize("asset", list(ASSETS))
def test_warp_wheel_assets_sample_like_warp(rng, asset):
    path = os.path.join(WARP_DIR, asset)
    vol = vdbflow.open(path)
    assert isinstance(vol, vdbflow.Volume) and vol.value_type.name == ASSETS[asset]
    info = vdbflow.list_grids(path)[0]
    assert info.leaf_count == vol.leaf_count and info.active_voxel_count == vol.active_voxel_count
    np.testing.assert_allclose(info.index_to_world, vol.index_to_world)
    compare_with_warp(vol, warp_load(path), ASSETS[asset], spread_points(rng, vol))


def test_rocks_has_tiles_and_torus_a_rotation():
    rocks = vdbflow.open(os.path.join(WARP_DIR, "examples/assets/rocks.nvdb"))
    assert rocks.tile_count > 0
    torus = vdbflow.open(os.path.join(WARP_DIR, "tests/assets/torus.nvdb"))
    assert not torus.transform.is_axis_aligned


def test_warp_wheel_index_grids(rng):
    path = os.path.join(WARP_DIR, "tests/assets/test_index_grid.nvdb")
    infos = vdbflow.list_grids(path)
    assert [g.grid_type for g in infos] == ["OnIndex", "OnIndex"] and len({g.name for g in infos}) == 2
    topo = vdbflow.open(path, grid=infos[1].name)
    assert isinstance(topo, vdbflow.Topology) and topo.active_voxel_count == infos[1].active_voxel_count
    first = vdbflow.open(path, grid=0)
    wvol = warp_load(path)  # Warp loads the first grid
    data = rng.standard_normal(first.value_count).astype(np.float32)
    vol = first.with_data(data, 0.25)
    pts = probe_points(rng, first.active_voxels(), 200).astype(np.float32)
    want_v, want_j = wo.warp_sample_index(wvol, "float32", pts, "linear", data, 0.25)
    got_v, got_j = vdbflow.sample_grad_arrays(vol, pts)
    np.testing.assert_allclose(got_v, want_v, atol=1e-5)
    np.testing.assert_allclose(got_j, want_j, atol=1e-5)


def rotated_anisotropic():
    M = np.eye(4)
    c, s = np.cos(0.6), np.sin(0.6)
    M[:3, :3] = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ np.diag([0.5, 1.5, 0.75])
    M[:3, 3] = [2.0, -1.0, 0.5]
    return M


@pytest.mark.parametrize("type_name", list(TYPES))
@pytest.mark.parametrize("codec", ["none", "zip", "blosc"])
def test_files_written_by_warp_load(rng, tmp_path, type_name, codec):
    dtype, C = TYPES[type_name]
    ijk, values = random_sparse_voxels(rng, n_leaves=6, components=C, dtype=dtype)
    bg = np.arange(1, C + 1).astype(dtype) if C > 1 else dtype(2)
    M = rotated_anisotropic()
    wvol = wo.warp_value_volume(type_name, ijk, values, bg, matrix=M)
    path = tmp_path / f"warp_{type_name}_{codec}.nvdb"
    wvol.save_to_nvdb(str(path), codec=codec)
    vol = vdbflow.open(path)
    assert vol.value_type.name == type_name and vdbflow.list_grids(path)[0].codec == codec
    np.testing.assert_allclose(vol.index_to_world, M, atol=1e-6)  # Warp stores the map in float32 first
    compare_with_warp(vol, wvol, type_name, probe_points(rng, ijk, 150).astype(np.float32))


def test_index_grid_written_by_warp_loads(rng, tmp_path):
    ijk, _ = random_sparse_voxels(rng, n_leaves=6, fill=0.3)
    wvol = wo.warp_index_volume(ijk, matrix=rotated_anisotropic())
    path = tmp_path / "index.nvdb"
    wvol.save_to_nvdb(str(path), codec="zip")
    topo = vdbflow.open(path)
    np.testing.assert_array_equal(topo.active_voxels(), wvol.get_voxels().numpy())
    data = rng.standard_normal((topo.value_count, 4)).astype(np.float32)
    pts = probe_points(rng, ijk, 150).astype(np.float32)
    want_v, want_j = wo.warp_sample_index(wvol, "vec4f", pts, "linear", data, np.ones(4, np.float32))
    got_v, got_j = vdbflow.sample_grad_arrays(topo.with_data(data, 1.0), pts)
    np.testing.assert_allclose(got_v, want_v, atol=1e-5)
    np.testing.assert_allclose(got_j, want_j, atol=1e-5)


def tiled_volume(rng, type_name):
    dtype, C = TYPES[type_name]
    ijk, values = random_sparse_voxels(rng, n_leaves=6, components=C, dtype=dtype)
    shape = (4, C) if C > 1 else (4,)
    tiles = (
        np.array([[256, 0, 0], [-4096, 4096, 0], [512, 8, 16], [-8, -8, -200]]),
        np.array([128, 4096, 8, 8]),
        (rng.standard_normal(shape) * 10).astype(dtype),
    )
    return ijk, vdbflow.Volume.from_voxels(ijk, values, 0, rotated_anisotropic(), tiles=tiles, name=f"g_{type_name}")


@pytest.mark.parametrize("type_name", list(TYPES))
@pytest.mark.parametrize("codec", ["none", "zip", "blosc"])
def test_files_written_by_vdbflow_load_in_warp(rng, tmp_path, type_name, codec):
    ijk, vol = tiled_volume(rng, type_name)
    path = tmp_path / "out.nvdb"
    vol.to_nvdb(str(path), codec=codec)
    pts = np.concatenate(
        [probe_points(rng, ijk, 100), [[300.5, 5, 5], [-3000, 5000, 7], [515, 9, 17.5], [-4.5, -3.5, -196.25]]]
    ).astype(np.float32)
    compare_with_warp(vol, warp_load(path), type_name, pts)


@pytest.mark.parametrize("version", [None, "32.4", "32.6", "32.7", "32.8", "32.9"])
def test_every_version_written_loads_in_warp(rng, tmp_path, version):
    """Warp 1.19's load_from_nvdb takes every layout vdbflow writes (file magic NanoVDB0 or NanoVDB2,
    grid magic NanoVDB0 or NanoVDB1) and samples it as vdbflow does; vdbflow reads each back with its
    checksum verified."""
    ijk, vol = tiled_volume(rng, "float32")
    path = tmp_path / "out.nvdb"
    vol.to_nvdb(str(path), version=version)
    want = "32.4.2" if version in (None, "32.4") else f"{version}.0"
    assert vdbflow.list_grids(path)[0].version == want
    pts = np.concatenate([probe_points(rng, ijk, 100), [[300.5, 5, 5], [-3000, 5000, 7]]]).astype(np.float32)
    compare_with_warp(vol, warp_load(path), "float32", pts)
    back = vdbflow.open(path, checksum="strict")
    np.testing.assert_array_equal(back.active_values(), vol.active_values())
    back = vdbflow.open(path)
    assert back.name == vol.name and back.tile_count == vol.tile_count
    for mode in ("closest",) + (("linear",) if vol.value_type.is_float else ()):
        a = vdbflow.sample_grad_arrays(vol, pts, mode)
        b = vdbflow.sample_grad_arrays(back, pts, mode)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_index_topology_written_by_vdbflow_loads_in_warp(rng, tmp_path):
    ijk, _ = random_sparse_voxels(rng, n_leaves=8, spread=600, fill=0.3)
    topo = vdbflow.Volume.from_active(ijk, rotated_anisotropic())
    path = tmp_path / "idx.nvdb"
    topo.to_nvdb(str(path), codec="zip")
    wvol = warp_load(path)
    np.testing.assert_array_equal(wvol.get_voxels().numpy(), topo.active_voxels())
    data = rng.standard_normal(topo.active_voxel_count)
    pts = probe_points(rng, ijk, 150).astype(np.float32)
    want_v, want_j = wo.warp_sample_index(wvol, "float64", pts, "linear", data, -1.0)
    back = vdbflow.open(path)
    got_v, got_j = vdbflow.sample_grad_arrays(back.with_data(data, -1.0), pts)
    np.testing.assert_allclose(got_v, want_v, atol=1e-5)
    np.testing.assert_allclose(got_j, want_j, atol=1e-5)


def test_several_grids_names_and_classes(rng, tmp_path):
    _, a = tiled_volume(rng, "vec3f")
    _, b = tiled_volume(rng, "float64")
    b.grid_class = "fog volume"
    topo = vdbflow.Volume.from_active(a.active_voxels())
    path = tmp_path / "many.nvdb"
    vdbflow.save(path, {"velocity": a, "density": b, "cells": topo}, codec="zip")
    infos = vdbflow.list_grids(path)
    assert [(g.name, g.grid_type, g.grid_class) for g in infos] == [
        ("velocity", "Vec3f", "unknown"),
        ("density", "Double", "fog volume"),
        ("cells", "OnIndex", "index grid"),
    ]
    assert vdbflow.open(path, "density").grid_class == "fog volume"
    assert isinstance(vdbflow.open(path, 2), vdbflow.Topology)
    with pytest.raises(vdbflow.NanoVDBError, match="grid names"):
        vdbflow.open(path, "pressure")
    with pytest.raises(vdbflow.NanoVDBError, match=r"grid index in \[0, 3\)"):
        vdbflow.open(path, 3)


@pytest.mark.parametrize("type_name", list(fmt.GRID_TYPE_OF_VALUE_TYPE))
def test_listed_value_type_is_the_volumes(rng, tmp_path, type_name):
    """list_grids gives each grid's value type, the one open_grid reads it as, so that no caller parses
    grid type names for components and item size; an OnIndex grid (values external) has none."""
    _, vol = tiled_volume(rng, type_name)
    topo = vdbflow.Volume.from_active(vol.active_voxels())
    path = tmp_path / "typed.nvdb"
    vdbflow.save(path, {"values": vol, "cells": topo})
    values, cells = vdbflow.list_grids(path)
    assert values.value_type == vol.value_type == vdbflow.open(path, "values").value_type
    assert (values.value_type.dtype, values.value_type.components) == TYPES[type_name]
    assert cells.value_type is None


def test_raw_grid_buffer_and_segments(rng, tmp_path):
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float32)
    wvol = wo.warp_value_volume("vec3f", ijk, values, (0.0, 0.0, 0.0))
    raw = wvol.array().numpy().tobytes()  # a grid buffer without a file header
    vol = vdbflow.open(raw)
    pts = probe_points(rng, ijk, 100).astype(np.float32)
    compare_with_warp(vol, wvol, "vec3f", pts)
    # two segments back to back in one file
    vdbflow.save(tmp_path / "a.nvdb", {"a": vol})
    vdbflow.save(tmp_path / "b.nvdb", {"b": vol}, codec="zip")
    both = tmp_path / "ab.nvdb"
    both.write_bytes((tmp_path / "a.nvdb").read_bytes() + (tmp_path / "b.nvdb").read_bytes())
    assert [g.name for g in vdbflow.list_grids(both)] == ["a", "b"]
    np.testing.assert_array_equal(
        vdbflow.sample_grad_arrays(vdbflow.open(both, "b"), pts)[0], vdbflow.sample_grad_arrays(vol, pts)[0]
    )


def test_subsets_by_bbox_and_leaves(rng, tmp_path):
    path = os.path.join(WARP_DIR, "examples/assets/rocks.nvdb")
    full = vdbflow.open(path)
    box = np.array([[0, 0, 0], [40, 40, 40]])
    part = vdbflow.open(path, bbox=box)
    assert 0 < part.leaf_count < full.leaf_count
    inside = rng.uniform(1, 39, (2000, 3))
    np.testing.assert_array_equal(
        vdbflow.sample_grad_arrays(part, inside)[0], vdbflow.sample_grad_arrays(full, inside)[0]
    )
    chosen = [0, 5, 7]
    some = vdbflow.open(path, leaves=chosen)
    np.testing.assert_array_equal(some.topology.leaf_origins, full.topology.leaf_origins[chosen])
    with pytest.raises(vdbflow.NanoVDBError, match="leaf indices"):
        vdbflow.open(path, leaves=[full.leaf_count])


# ---------------------------------------------------------------------------------------------
# bad files
@pytest.fixture
def good_file(rng, tmp_path):
    _, vol = tiled_volume(rng, "vec3f")
    path = tmp_path / "good.nvdb"
    vol.to_nvdb(str(path))
    return path, bytearray(path.read_bytes())


def grid_start(data):
    count = struct.unpack_from("<H", data, 12)[0]
    pos = fmt.FILE_HEADER_SIZE
    for _ in range(count):
        pos += fmt.FILE_METADATA_SIZE + struct.unpack_from("<I", data, pos + 136)[0]
    return pos


def write(tmp_path, data, name="bad.nvdb"):
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def test_truncated_file(good_file, tmp_path):
    _, data = good_file
    for cut in (3, 20, 200, len(data) // 2, len(data) - 1):
        with pytest.raises(vdbflow.NanoVDBError, match="byte"):
            vdbflow.open(write(tmp_path, data[:cut]))


def test_wrong_magic_and_versions(good_file, tmp_path):
    _, data = good_file
    bad = data.copy()
    bad[0:8] = b"NOTNANO!"
    with pytest.raises(vdbflow.NanoVDBError, match="magic"):
        vdbflow.open(write(tmp_path, bad))
    bad = data.copy()
    struct.pack_into("<I", bad, 8, (31 << 21) | (9 << 10))
    with pytest.raises(vdbflow.NanoVDBError, match=r"version 31\.9\.0 at byte 8"):
        vdbflow.open(write(tmp_path, bad))
    bad = data.copy()
    struct.pack_into("<H", bad, 14, 7)
    with pytest.raises(vdbflow.NanoVDBError, match="unknown codec 7"):
        vdbflow.open(write(tmp_path, bad))


def test_unsupported_value_type_is_named(good_file, tmp_path):
    _, data = good_file
    g = grid_start(data)
    for code, name in ((12, "RGBA8"), (3, "Int16"), (23, "PointIndex"), (99, "unknown type 99")):
        bad = data.copy()
        struct.pack_into("<I", bad, g + fmt.GRID_OFF_TYPE, code)
        with pytest.raises(vdbflow.NanoVDBError, match=f"value type {name}"):
            vdbflow.open(write(tmp_path, bad))


def test_offsets_outside_and_looping_children(good_file, tmp_path):
    _, data = good_file
    g = grid_start(data)
    t = g + fmt.GRID_SIZE
    bad = data.copy()
    struct.pack_into("<Q", bad, t, 1 << 40)  # leaf array offset far outside
    with pytest.raises(vdbflow.NanoVDBError, match="past the grid's end|byte"):
        vdbflow.open(write(tmp_path, bad))
    # a root tile child pointing back at the root (a loop) or between nodes
    lay = fmt.LAYOUTS[6]
    root = t + struct.unpack_from("<Q", data, t + 24)[0]
    for child in (0 - 0, 8, -(root - g)):
        bad = data.copy()
        struct.pack_into("<q", bad, root + lay.root_size + fmt.ROOT_TILE_OFF_CHILD, child or 16)
        with pytest.raises(vdbflow.NanoVDBError, match="child offset points to byte|checksum"):
            vdbflow.open(write(tmp_path, bad))


def test_absurd_sizes(good_file, tmp_path):
    _, data = good_file
    bad = data.copy()
    struct.pack_into("<Q", bad, fmt.FILE_HEADER_SIZE, 1 << 62)  # grid size in the metadata
    with pytest.raises(vdbflow.NanoVDBError, match="absurd"):
        vdbflow.open(write(tmp_path, bad))
    g = grid_start(data)
    bad = data.copy()
    struct.pack_into("<Q", bad, g + fmt.GRID_OFF_GRID_SIZE, 1 << 45)
    with pytest.raises(vdbflow.NanoVDBError, match="grid size"):
        vdbflow.open(write(tmp_path, bad))


def test_checksum_is_written_and_verified(good_file, tmp_path):
    _, data = good_file
    g = grid_start(data)
    info = vdbflow.list_grids(write(tmp_path, data, "ok.nvdb"))[0]
    assert info.checksum >> 32 != 0xFFFFFFFF and info.checksum & 0xFFFFFFFF != 0xFFFFFFFF  # head and tail CRCs
    bad = data.copy()
    bad[g + fmt.GRID_OFF_VOXEL_SIZE] ^= 0x40  # a header byte the decoder itself does not use
    path = write(tmp_path, bad)
    with pytest.raises(vdbflow.NanoVDBError, match="checksum mismatch"):
        vdbflow.open(path, checksum="strict")
    # by default (as NanoVDB's reader and Warp) the grid is read, with a warning naming grid, version and spans
    with pytest.warns(vdbflow.ChecksumWarning, match=r"grid 'g_vec3f' \(NanoVDB 32\.4\.2\).*tried bytes \["):
        back = vdbflow.open(path)
    assert back.leaf_count == vdbflow.open(write(tmp_path, data, "ok.nvdb")).leaf_count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vdbflow.open(path, checksum=False)  # not checked: no warning
        vdbflow.open(write(tmp_path, data, "ok.nvdb"))  # a good checksum: no warning
    assert issubclass(vdbflow.ChecksumWarning, UserWarning) and "ChecksumWarning" in vdbflow.__all__
    with pytest.raises(vdbflow.NanoVDBError, match="expected checksum True, False, 'strict' or 'head', got 'warn'"):
        vdbflow.open(path, checksum="warn")


def fuzz_bases(rng, tmp_path):
    """Real files to mutate: vdbflow-written (tiles, rotation), Warp-written, an index grid, zip."""
    _, vol = tiled_volume(rng, "vec3f")
    vol.to_nvdb(str(tmp_path / "v.nvdb"))
    ijk, values = random_sparse_voxels(rng, n_leaves=4, dtype=np.float32)
    wo.warp_value_volume("float32", ijk, values, 0.0).save_to_nvdb(str(tmp_path / "w.nvdb"))
    vdbflow.Volume.from_active(ijk).to_nvdb(str(tmp_path / "i.nvdb"))
    vol.to_nvdb(str(tmp_path / "z.nvdb"), codec="zip")
    return [bytearray((tmp_path / n).read_bytes()) for n in ("v.nvdb", "w.nvdb", "i.nvdb", "z.nvdb")]


@pytest.mark.slow
def test_mutation_fuzz(rng, tmp_path):
    """2,400 mutated files (truncations, bit flips, field overwrites) either load consistently or raise
    NanoVDBError - nothing else."""
    bases = fuzz_bases(rng, tmp_path)
    extremes = [0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 1 << 31, 12345678]
    outcomes = {"loaded": 0, "error": 0}
    pts = rng.uniform(-50, 600, (64, 3))
    for case in range(2400):
        data = bases[case % len(bases)].copy()
        kind = case % 3
        if kind == 0:
            data = data[: int(rng.integers(0, len(data)))]
        elif kind == 1:
            head = min(len(data), 4096)  # mostly headers and top nodes, where the pointers are
            for _ in range(int(rng.integers(1, 9))):
                pos = int(rng.integers(0, head if rng.random() < 0.7 else len(data)))
                data[pos] ^= 1 << int(rng.integers(0, 8))
        else:
            pos = int(rng.integers(0, min(len(data), 4096) - 8)) & ~3
            struct.pack_into("<I", data, pos, extremes[int(rng.integers(0, len(extremes)))])
        buf = bytes(data)
        try:
            for g in range(len(vdbflow.list_grids(buf))):
                obj = vdbflow.open(buf, grid=g, checksum="strict")  # mutants the checksum catches are refused
                vol = obj.with_data(np.zeros(obj.value_count), 0.0) if isinstance(obj, vdbflow.Topology) else obj
                mode = "linear" if vol.value_type.is_float else "closest"
                v, j = vdbflow.sample_grad_arrays(vol, pts, mode)
                assert v.shape[0] == len(pts)
            outcomes["loaded"] += 1
        except vdbflow.NanoVDBError:
            outcomes["error"] += 1
    print(f"fuzz outcomes: {outcomes}")
    assert outcomes["loaded"] + outcomes["error"] == 2400
    assert outcomes["error"] > 500 and outcomes["loaded"] > 100  # both paths exercised


def test_blind_data_and_class_survive_round_trips(rng, tmp_path):
    _, vol = tiled_volume(rng, "float32")
    vol.grid_class = "level set"
    payload = np.arange(10, dtype=np.float32).tobytes()
    vol.blind_data = (
        vdbflow.BlindData("weights", semantic=0, data_class=1, data_type=1, value_size=4, data=payload),
        vdbflow.BlindData("tag", 0, 1, 0, 1, b"hello"),
    )
    path = tmp_path / "blind.nvdb"
    vol.to_nvdb(str(path))
    back = vdbflow.open(path)
    assert back.grid_class == "level set"
    assert back.blind_data == vol.blind_data and back.blind_data[0].value_count == 10
    back.to_nvdb(str(tmp_path / "again.nvdb"), codec="zip")
    again = vdbflow.open(tmp_path / "again.nvdb")
    assert again.blind_data == vol.blind_data and again.grid_class == "level set"
    pts = rng.uniform(-20, 40, (200, 3)).astype(np.float32)
    compare_with_warp(again, warp_load(tmp_path / "again.nvdb"), "float32", pts)  # Warp still reads it


def test_value_index_grids(rng, tmp_path):
    """Index (ValueIndex) grids index every voxel of a leaf: an OnIndex file whose leaves are full
    reads the same once its type says Index."""
    ijk = np.argwhere(np.ones((16, 8, 8), bool)) - [8, 0, 0]
    topo = vdbflow.Volume.from_active(ijk)
    topo.to_nvdb(str(tmp_path / "on.nvdb"))
    data = bytearray((tmp_path / "on.nvdb").read_bytes())
    g = grid_start(data)
    struct.pack_into("<I", data, g + fmt.GRID_OFF_TYPE, fmt.GRID_TYPE_INDEX)
    struct.pack_into("<Q", data, g + fmt.GRID_OFF_CHECKSUM, 0xFFFFFFFFFFFFFFFF)
    index_topo = vdbflow.open(bytes(data))
    values = rng.standard_normal(topo.value_count)
    pts = rng.uniform(-8, 7, (300, 3))
    np.testing.assert_array_equal(
        vdbflow.sample_grad_arrays(index_topo.with_data(values, 0), pts)[0],
        vdbflow.sample_grad_arrays(topo.with_data(values, 0), pts)[0],
    )


def test_values_stay_in_the_mapped_file(rng, tmp_path):
    """Opening a value grid copies no leaf values: the volume views the mapped file, and samples,
    writes and differentiates exactly like an in-memory copy."""
    ijk, vol = tiled_volume(rng, "vec3d")
    path = tmp_path / "mapped.nvdb"
    vol.to_nvdb(str(path))
    mapped = vdbflow.open(path)
    assert mapped._leaf_values_at is not None and not mapped.leaf_values.flags.owndata
    np.testing.assert_array_equal(mapped.leaf_values, vol.leaf_values)
    pts = probe_points(rng, ijk, 200)
    for a, b in zip(vdbflow.sample_grad_arrays(mapped, pts), vdbflow.sample_grad_arrays(vol, pts), strict=True):
        np.testing.assert_array_equal(a, b)
    adj = rng.standard_normal((len(pts), 3))
    np.testing.assert_array_equal(
        vdbflow.sample_grad_vjp(mapped, pts, adj).voxel_data, vdbflow.sample_grad_vjp(vol, pts, adj).voxel_data
    )
    part = vdbflow.open(path, leaves=[1, 3])  # a subset views the same mapping, leaf by leaf
    np.testing.assert_array_equal(part.leaf_values, vol.leaf_values[[1, 3]])


def test_save_wants_a_dict_of_grids(tmp_path):
    vol = vdbflow.Volume.from_dense(np.ones((8, 8, 8), np.float32), name="density")
    with pytest.raises(
        vdbflow.NanoVDBError, match=r"expected grids as a dict .* got a Volume: save\(path, \{'density': volume\}\)"
    ):
        vdbflow.save(tmp_path / "x.nvdb", vol)
    with pytest.raises(vdbflow.NanoVDBError, match="expected grids as a dict .* got list"):
        vdbflow.save(tmp_path / "x.nvdb", [vol])
    assert not list(tmp_path.iterdir())
