"""NanoVDB's and OpenVDB's own tools as oracles (Debian's libnanovdb-tools, libopenvdb-tools and
python3-openvdb: NanoVDB 32.4.2, OpenVDB 10.0).

* ``.nvdb`` files that ``nanovdb_convert`` makes from ``.vdb`` files written here by pyopenvdb, in every
  mode (codecs none/zip/blosc, Fp4/Fp8/Fp16/FpN, checksum none/partial/full), read by vdbflow with
  OpenVDB's voxels, tiles, values (exact; quantised within one step) and transform, checksums strict.
* vdbflow-written files (float, double, int32, vec3f, vec3d; tiles at every level; each codec; version
  32.4 and the default) pass ``nanovdb_validate``, ``nanovdb_print`` shows their counts and boxes, and
  ``nanovdb_convert x.nvdb x.vdb`` gives an OpenVDB file whose values, activity and transform pyopenvdb
  reads equal to vdbflow's.  Debian's pyopenvdb knows only Float, Bool and Vec3S grids: every type is
  also checked by ``vdb_print`` (counts, box, background, min/max, transform) and, every type, read back by
  vdbflow's own .vdb reader (values, activity, tiles, background, transform), and float, double and
  vec3f go back through ``nanovdb_convert x.vdb y.nvdb``, which gives vdbflow's bytes exactly (32.4's
  converter refuses int32 and vec3d OpenVDB grids).

Outside CI a missing tool skips; under CI=true it fails (tests/system_tools.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from system_tools import require_tool, run_pyopenvdb

import vdbflow

# the OpenVDB grids written by pyopenvdb: random voxels, an active 8^3 tile and 128^3 tile, an affine
# transform with a translation (OpenVDB's row-vector matrix: world = [i j k 1] @ M)
MATRIX = [[0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 0.5, 0], [1.25, -2.0, 3.5, 1]]
MAKE_VDB = """
import json, sys
import numpy as np
import pyopenvdb as vdb
out, matrix = sys.argv[1], json.loads(sys.argv[2])
rng = np.random.default_rng(7)
grids = []
for cls, name, c in ((vdb.FloatGrid, "float", 1), (vdb.Vec3SGrid, "vec3f", 3)):
    g = cls()
    g.name = name
    g.transform = vdb.createLinearTransform(matrix)
    acc = g.getAccessor()
    ijk = np.unique(rng.integers(-60, 60, (1500, 3)), axis=0)
    vals = rng.standard_normal((len(ijk), c)) * 5
    for p, v in zip(ijk, vals):
        acc.setValueOn(tuple(int(x) for x in p), float(v[0]) if c == 1 else tuple(float(x) for x in v))
    g.fill((256, 0, 0), (383, 127, 127), 2.5 if c == 1 else (1.0, 2.0, 3.0), True)
    g.fill((-64, 200, 8), (-57, 207, 15), -1.5 if c == 1 else (-1.0, 0.5, 4.0), True)
    grids.append(g)
vdb.write(out, grids=grids)
"""
# what pyopenvdb reads from a .vdb: per grid, its active voxels and values, active tiles (min, size,
# value) and the index-to-world images of the origin and the unit vectors
DUMP_VDB = """
import sys
import numpy as np
import pyopenvdb as vdb
path, out = sys.argv[1], sys.argv[2]
arrays = {}
for meta in vdb.readAllGridMetadata(path):
    g = vdb.read(path, meta.name)
    vox, vals, tiles, tvals = [], [], [], []
    for it in g.citerOnValues():
        v = it.value if isinstance(it.value, tuple) else (it.value,)
        if it.count == 1:
            vox.append(it.min)
            vals.append(v)
        else:
            tiles.append((*it.min, it.max[0] - it.min[0] + 1))
            tvals.append(v)
    n = g.name
    arrays[n + "/ijk"] = np.array(vox, np.int64).reshape(-1, 3)
    arrays[n + "/values"] = np.array(vals, np.float64)
    arrays[n + "/tiles"] = np.array(tiles, np.int64).reshape(-1, 4)
    arrays[n + "/tile_values"] = np.array(tvals, np.float64)
    arrays[n + "/background"] = np.array(g.background, np.float64)
    arrays[n + "/map"] = np.array([g.transform.indexToWorld(p) for p in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1))])
np.savez(out, **arrays)
"""


def run_tool(*args: str) -> str:
    done = subprocess.run([require_tool(args[0]), *args[1:]], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"{' '.join(args)} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    return done.stdout + done.stderr


def dump_vdb(path: Path) -> dict[str, dict[str, np.ndarray]]:
    out = path.with_suffix(".npz")
    run_pyopenvdb(DUMP_VDB, str(path), str(out))
    grids: dict[str, dict[str, np.ndarray]] = {}
    with np.load(out) as z:
        for key in z.files:
            name, field = key.rsplit("/", 1)
            grids.setdefault(name, {})[field] = z[key]
    return grids


def openvdb_matrix(dump: dict[str, np.ndarray]) -> np.ndarray:
    """The (4, 4) index-to-world matrix (column vectors) of what pyopenvdb's indexToWorld gives."""
    origin, ex, ey, ez = dump["map"]
    m = np.eye(4)
    m[:3, :3] = np.stack([ex - origin, ey - origin, ez - origin], axis=1)
    m[:3, 3] = origin
    return m


def sorted_rows(ijk: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort(ijk.T[::-1])
    return ijk[order], values.reshape(len(ijk), -1)[order]


def dump_of(vol: vdbflow.Volume) -> dict[str, np.ndarray]:
    """A Volume (read from a .vdb by vdbflow's own reader) in the layout of :func:`dump_vdb`'s grids."""
    topo, m = vol.topology, vol.transform.index_to_world
    return {
        "ijk": vol.active_voxels(),
        "values": np.asarray(vol.active_values(), np.float64),
        "tiles": np.concatenate([topo.tile_origins, topo.tile_sizes[:, None]], axis=1).astype(np.int64),
        "tile_values": np.asarray(vol.tile_values, np.float64),
        "background": np.asarray(vol.background, np.float64),
        "map": np.stack([m[:3, 3], *(m[:3, 3] + m[:3, a] for a in range(3))]),
    }


def assert_volume_equals_openvdb(vol: vdbflow.Volume, dump: dict[str, np.ndarray], tolerance: float = 0.0) -> None:
    """Voxels, tiles, values (within ``tolerance``), background and transform as pyopenvdb reads them."""
    want_ijk, want_values = sorted_rows(dump["ijk"], dump["values"])
    got_ijk, got_values = sorted_rows(vol.active_voxels(), np.asarray(vol.active_values(), np.float64))
    np.testing.assert_array_equal(got_ijk, want_ijk)
    np.testing.assert_allclose(got_values, want_values, rtol=0, atol=tolerance)
    topo = vol.topology
    got_tiles = np.concatenate([topo.tile_origins, topo.tile_sizes[:, None]], axis=1).astype(np.int64)
    order_got, order_want = np.lexsort(got_tiles.T[::-1]), np.lexsort(dump["tiles"].T[::-1])
    np.testing.assert_array_equal(got_tiles[order_got], dump["tiles"][order_want])
    tile_values = np.asarray(vol.tile_values, np.float64).reshape(len(got_tiles), -1)
    np.testing.assert_array_equal(tile_values[order_got], dump["tile_values"].reshape(len(got_tiles), -1)[order_want])
    np.testing.assert_array_equal(np.ravel(vol.background).astype(np.float64), np.ravel(dump["background"]))
    np.testing.assert_allclose(vol.transform.index_to_world, openvdb_matrix(dump), rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def openvdb_file(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("openvdb")
    path = folder / "in.vdb"
    run_pyopenvdb(MAKE_VDB, str(path), json.dumps(MATRIX))
    return path, dump_vdb(path)


# ---------------------------------------------------------------------------------------------
# nanovdb_convert-made files read by vdbflow
MODES = {
    "plain": ([], None),
    "zip": (["--zip"], None),
    "blosc": (["--blosc"], None),
    "fp4": (["--fp4"], 4),
    "fp8": (["--fp8"], 8),
    "fp16": (["--fp16"], 16),
    "fpN": (["--fpN", "--abs-error", "0.01"], "abs"),
    "checksum none": (["--checksum", "none"], None),
    "checksum partial": (["--checksum", "partial"], None),
    "checksum full": (["--checksum", "full"], None),
    "full stats, zip, full checksum": (["--stats", "all", "--zip", "--checksum", "full"], None),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_nanovdb_convert_files_read_with_openvdbs_values(openvdb_file, tmp_path, mode):
    source, want = openvdb_file
    options, bits = MODES[mode]
    out = tmp_path / "out.nvdb"
    run_tool("nanovdb_convert", "--force", *options, str(source), str(out))
    infos = {g.name: g for g in vdbflow.list_grids(out)}
    assert set(infos) == {"float", "vec3f"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NanoVDB's checksums match vdbflow's rules: no ChecksumWarning
        vols = {name: vdbflow.open(out, name, checksum="strict") for name in infos}
    full = "full" in mode
    for name, vol in vols.items():
        info = infos[name]
        assert info.version == "32.4.2" and info.codec == {"zip": "zip", "blosc": "blosc"}.get(mode, info.codec)
        assert (info.checksum == 0xFFFFFFFFFFFFFFFF) == (mode == "checksum none")
        assert (info.checksum >> 32 != 0xFFFFFFFF) == full  # the tail only with a full checksum
        tolerance = 0.0
        if name == "float" and bits is not None:
            assert info.grid_type == {4: "Fp4", 8: "Fp8", 16: "Fp16", "abs": "FpN"}[bits]
            values = np.concatenate([want[name]["values"].ravel(), np.ravel(want[name]["background"])])
            # one quantisation step of the widest leaf (codes span [min, max] of a leaf's 512 values)
            tolerance = 0.01 if bits == "abs" else float(np.ptp(values)) / ((1 << bits) - 1)
        else:
            assert info.grid_type == {"float": "Float", "vec3f": "Vec3f"}[name]
        assert_volume_equals_openvdb(vol, want[name], tolerance)
        tiles = 512 + 128**3  # the 8^3 and the 128^3 tile
        assert info.active_voxel_count == len(want[name]["ijk"]) + tiles
        assert vol.active_voxel_count == len(want[name]["ijk"])  # vdbflow counts leaf voxels; tiles apart


# ---------------------------------------------------------------------------------------------
# vdbflow-written files checked by the tools
TYPES = {"float": (np.float32, 1), "double": (np.float64, 1), "int32": (np.int32, 1), "vec3f": (np.float32, 3)}
TYPES["vec3d"] = (np.float64, 3)
NANOVDB_TYPE = {"float": "float", "double": "double", "int32": "int32", "vec3f": "Vec3f", "vec3d": "Vec3d"}
TILES = (np.array([[4096, 0, -4096], [128, 0, 0], [-8, 64, 0]]), np.array([4096, 128, 8]))


def written_volume(type_name: str, matrix: np.ndarray | None = None) -> vdbflow.Volume:
    """Random voxels in several upper nodes, tiles at every level (4096^3, 128^3, 8^3) and a transform of
    unequal voxel sizes and a translation (rotations: see test_rotated_maps_convert_as_nanovdbs_own)."""
    dtype, c = TYPES[type_name]
    rng = np.random.default_rng(11)
    ijk = np.unique(np.concatenate([rng.integers(-70, 70, (1200, 3)), rng.integers(5000, 5100, (200, 3))]), axis=0)
    values = (rng.standard_normal((len(ijk), c)) * 100).astype(dtype)
    tile_values = (np.arange(3 * c).reshape(3, c) + 1.5).astype(dtype)
    if matrix is None:
        matrix = np.diag([0.25, 0.5, 0.75, 1.0])
        matrix[:3, 3] = [10.0, -3.5, 0.75]
    return vdbflow.Volume.from_voxels(
        ijk,
        values[:, 0] if c == 1 else values,
        dtype(7) if c == 1 else np.full(c, 7, dtype),
        matrix,
        tiles=(*TILES, tile_values[:, 0] if c == 1 else tile_values),
        name=type_name,
    )


def print_row(path: Path) -> dict[str, str]:
    """``nanovdb_print --long``'s row of the file's one grid, by column."""
    lines = [line for line in run_tool("nanovdb_print", "--long", str(path)).splitlines() if line.strip()]
    head = next(k for k, line in enumerate(lines) if line.startswith("#  Name"))
    names, cells = re.split(r"\s{2,}", lines[head].strip()), re.split(r"\s{2,}", lines[head + 1].strip())
    assert len(names) == len(cells), (names, cells)
    return dict(zip(names, cells, strict=True))


def assert_vdb_print_agrees(path: Path, vol: vdbflow.Volume, active_voxels: int) -> None:
    """What OpenVDB's vdb_print says of a .vdb: active voxels and tiles, their box, the background, the
    minimum and maximum of the active values (tiles included), the leaf count and the transform."""
    out = run_tool("vdb_print", "-l", "-m", str(path))

    def field(label: str) -> str:
        return re.search(rf"{label}:\s+(.+)", out).group(1).strip()

    def number(text: str) -> float:
        return float(text.replace(",", ""))

    assert int(number(field("Number of active voxels"))) == active_voxels
    assert int(field("Number of active tiles")) == vol.tile_count
    box = vol.index_bbox
    assert field("Bounding box of active voxels") == f"{box[0].tolist()} -> {box[1].tolist()}"
    assert re.search(rf"Leaf\({vol.leaf_count:,} x 8\^3\)", out)
    values = np.concatenate([np.asarray(vol.active_values()).reshape(-1, vol.components), vol.tile_values])
    if vol.components == 1:
        assert number(field("Min value")) == pytest.approx(float(values.min()), rel=1e-5)
        assert number(field("Max value")) == pytest.approx(float(values.max()), rel=1e-5)
        assert number(field("Background value")) == float(vol.background)
    rows = re.search(r"index to world:\s+((?:\[[^\]]*\]\s*){4})", out).group(1)
    matrix = np.array([[float(x) for x in r.split(",")] for r in re.findall(r"\[([^\]]*)\]", rows)])
    np.testing.assert_allclose(matrix.T, vol.transform.index_to_world, rtol=1e-6, atol=1e-9)  # row vectors


def validated(path: Path) -> None:
    out = run_tool("nanovdb_validate", "--verbose", str(path))  # exit code 0 even when a grid fails
    assert re.search(r'Grid named "\w+": passed', out) and "failed" not in out, out


@pytest.mark.parametrize("type_name", list(TYPES))
def test_vdbflow_files_pass_the_nanovdb_tools_and_convert_to_openvdb(tmp_path, type_name):
    vol = written_volume(type_name)
    plain = tmp_path / "plain.nvdb"
    vol.to_nvdb(str(plain), version="32.4")
    default = tmp_path / "default.nvdb"
    vol.to_nvdb(str(default))
    assert default.read_bytes() == plain.read_bytes()  # the default is 32.4
    n_voxels = len(vol.active_voxels())
    want_voxels = n_voxels + 4096**3 + 128**3 + 8**3
    box = vol.index_bbox
    for codec in ("none", "zip", "blosc"):
        path = tmp_path / f"{codec}.nvdb"
        vol.to_nvdb(str(path), codec=codec, version="32.4")
        validated(path)
        row = print_row(path)
        assert row["Type"] == NANOVDB_TYPE[type_name] and row["Version"] == "32.4.2"
        assert row["Codec"] == codec.upper() and row["# Voxels"] == str(want_voxels)
        assert row["# Active tiles"] == "1->1->1"  # root -> upper -> lower nodes
        assert row["Index Bounding Box"] == f"({','.join(map(str, box[0]))}) -> ({','.join(map(str, box[1]))})"
        # back to OpenVDB with NanoVDB's converter, then to NanoVDB again: vdbflow's grid byte for byte
        back_vdb, again = tmp_path / f"{codec}.vdb", tmp_path / f"{codec}-again.nvdb"
        run_tool("nanovdb_convert", "--force", str(path), str(back_vdb))
        assert_vdb_print_agrees(back_vdb, vol, want_voxels)
        if type_name in ("float", "vec3f"):  # what Debian's pyopenvdb reads
            assert_volume_equals_openvdb(vol, dump_vdb(back_vdb)[type_name])
        # every type, through vdbflow's own .vdb reader (checked against pyopenvdb in test_openvdb.py)
        assert_volume_equals_openvdb(vol, dump_of(vdbflow.open(str(back_vdb))))
        if type_name in ("float", "double", "vec3f"):  # 32.4's converter refuses int32 and vec3d .vdb grids
            args = ("--force", "--stats", "bbox", "--checksum", "full", str(back_vdb), str(again))
            run_tool("nanovdb_convert", *args)
            assert again.read_bytes() == plain.read_bytes()


def test_other_versions_and_the_tools_of_32_4(tmp_path):
    """What NanoVDB 32.4's tools make of the later versions vdbflow writes: 32.6 and 32.7 files are read
    (the same magic) but their checksums follow rules 32.4 does not know (u32 per-node CRCs, 4 KiB blocks);
    from 32.8 the new magics are refused."""
    vol = written_volume("float")
    results = {}
    for version in ("32.6", "32.7", "32.8", "32.9"):
        path = tmp_path / f"{version}.nvdb"
        vol.to_nvdb(str(path), version=version)
        done = subprocess.run(
            [require_tool("nanovdb_validate"), "--verbose", str(path)], capture_output=True, text=True, timeout=300
        )
        out = done.stdout + done.stderr
        results[version] = "passed" if "passed" in out else "checksum" if "checksum" in out else "refused"
        assert vdbflow.list_grids(path)[0].version == f"{version}.0"
    assert results == {"32.6": "checksum", "32.7": "checksum", "32.8": "refused", "32.9": "refused"}, results


def test_rotated_maps_convert_as_nanovdbs_own(openvdb_file, tmp_path):
    """NanoVDB 32.4.2's nanovdb_convert transposes the 3x3 of a rotated map going from .nvdb to .vdb, for
    files NanoVDB itself made as much as for vdbflow's: a vdbflow grid with the map of a NanoVDB-made grid
    converts to the same OpenVDB transform, and .vdb -> .nvdb (which is right) reads back as OpenVDB's."""
    make = """
import sys, pyopenvdb as vdb
g = vdb.FloatGrid()
g.name = "r"
g.transform = vdb.createLinearTransform([[0.2, 0.05, 0, 0], [-0.05, 0.2, 0, 0], [0, 0, 0.25, 0], [10, -3.5, 0.75, 1]])
g.getAccessor().setValueOn((1, 2, 3), 5.0)
vdb.write(sys.argv[1], grids=[g])
"""
    source, nano = tmp_path / "r.vdb", tmp_path / "r.nvdb"
    run_pyopenvdb(make, str(source))
    run_tool("nanovdb_convert", "--force", str(source), str(nano))
    theirs = vdbflow.open(nano)
    np.testing.assert_allclose(theirs.transform.index_to_world, openvdb_matrix(dump_vdb(source)["r"]), atol=1e-12)
    ours = tmp_path / "ours.nvdb"
    written_volume("float", theirs.transform.index_to_world).to_nvdb(str(ours))
    maps = {}
    for name, path in (("theirs", nano), ("ours", ours)):
        back = tmp_path / f"{name}.vdb"
        run_tool("nanovdb_convert", "--force", str(path), str(back))
        maps[name] = openvdb_matrix(next(iter(dump_vdb(back).values())))
    np.testing.assert_array_equal(maps["ours"], maps["theirs"])
    transposed = theirs.transform.index_to_world.copy()
    transposed[:3, :3] = transposed[:3, :3].T
    np.testing.assert_allclose(maps["theirs"], transposed, atol=1e-12)  # the tool's transposition


def test_vdbflow_convert_output_passes_nanovdb_validate(tmp_path):
    """``vdbflow convert``'s default output (and ``--nvdb-version 32.4``) is a file NanoVDB 32.4 validates."""
    from click.testing import CliRunner

    from vdbflow.jobs.cli.main import main

    i, j, k = np.meshgrid(*[np.arange(24)] * 3, indexing="ij")
    np.save(tmp_path / "d.npy", np.sin(i / 3.0) * np.cos(j / 4.0) + k / 24.0)
    for args in ((), ("--nvdb-version", "32.4")):
        out = tmp_path / f"o{len(args)}.nvdb"
        result = CliRunner().invoke(main, ["convert", str(tmp_path / "d.npy"), str(out), "--threshold", "0.2", *args])
        assert result.exit_code == 0, result.output
        validated(out)
        assert print_row(out)["Version"] == "32.4.2"


def test_empty_and_leafless_grids(tmp_path):
    """An empty grid is NanoVDB's byte for byte (node offsets 0, NanoVDB's empty boxes); grids of tiles
    alone (which NanoVDB 32.4's own converter cannot make: it aborts) pass its validator."""
    make = """
import sys, pyopenvdb as vdb
g = vdb.FloatGrid()
g.name = "e"
vdb.write(sys.argv[1], grids=[g])
"""
    source, theirs, ours = tmp_path / "e.vdb", tmp_path / "e.nvdb", tmp_path / "ours.nvdb"
    run_pyopenvdb(make, str(source))
    run_tool("nanovdb_convert", "--force", "--stats", "bbox", "--checksum", "full", str(source), str(theirs))
    empty = vdbflow.open(theirs, checksum="strict")
    assert empty.active_voxel_count == 0 and empty.tile_count == 0
    vdbflow.save(ours, {"e": vdbflow.Volume.from_voxels(np.zeros((0, 3), int), np.zeros(0, np.float32))})
    assert ours.read_bytes() == theirs.read_bytes()
    for origins, sizes in (([[0, 0, 0]], [8]), ([[0, 0, 0]], [128]), ([[8192, 0, 0], [0, 0, 0]], [4096, 8])):
        tiles = (np.array(origins), np.array(sizes), np.arange(len(sizes), dtype=np.float32) + 2)
        vol = vdbflow.Volume.from_voxels(np.zeros((0, 3), int), np.zeros(0, np.float32), tiles=tiles, name="t")
        path = tmp_path / f"t{len(sizes)}_{sizes[0]}.nvdb"
        vol.to_nvdb(str(path))
        validated(path)
        assert print_row(path)["# Voxels"] == str(sum(s**3 for s in sizes))
