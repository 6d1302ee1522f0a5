"""OpenVDB .vdb files read by vdbflow's NumPy reader, against OpenVDB itself: pyopenvdb (run by the
system python3, see tests/system_tools.py) writes the files and dumps what its own tree says - the
transform, every active voxel and tile, values and activity at probe voxels (active or not) and a
dense box - and vdbflow must read the same.  vdb_tool rewrites the files with each codec."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from system_tools import require_tool, run_pyopenvdb

import vdbflow

# pyopenvdb: write the files and dump OpenVDB's view of every grid (sys.argv[1]: the directory)
WRITE_AND_DUMP = r"""
import sys, numpy as np, pyopenvdb as vdb
out = sys.argv[1]
rng = np.random.default_rng(7)

def sparse(name, bg):
    g = vdb.FloatGrid(background=bg)
    g.name = name
    acc = g.getAccessor()
    for p, v in zip(rng.integers(-700, 700, (3000, 3)), rng.normal(size=3000)):
        acc.setValueOn(tuple(int(c) for c in p), float(v))
    for p in rng.integers(-700, 700, (200, 3)):   # inactive voxels with their own values
        acc.setValueOff(tuple(int(c) for c in p), float(rng.normal()) + 10.0)
    return g

density = sparse("density", 0.5)
density.fill((-256, -256, -256), (-129, -129, -129), 3.0, True)   # an active 128^3 tile
density.fill((128, 0, 0), (255, 127, 127), -4.0, False)           # an inactive 128^3 tile
density.fill((16, 16, 16), (23, 23, 23), 7.0, False)              # an inactive 8^3 tile
density.fill((-8, 40, 64), (-1, 47, 71), 2.0, True)               # an active 8^3 tile
density.transform = vdb.createLinearTransform(voxelSize=0.25)
density["units"] = "kg/m^3"
density["count"] = 42
density["scale"] = 1.5
density["flag"] = True
density["offset"] = (1.0, 2.0, 3.0)
again = sparse("density", -1.0)                                    # a second grid of the same name
again.transform = vdb.createLinearTransform(voxelSize=2.0)
half = sparse("half", 0.25)
half.saveFloatAsHalf = True
sphere = vdb.createLevelSetSphere(radius=20.0, center=(1.5, -2.0, 3.0), voxelSize=0.5)
sphere.name = "sphere"
vel = vdb.Vec3SGrid(background=(0.0, 0.0, 0.0))
vel.name = "vel"
acc = vel.getAccessor()
for p in rng.integers(-300, 300, (1500, 3)):
    acc.setValueOn(tuple(int(c) for c in p), tuple(float(c) for c in rng.normal(size=3)))
vel.fill((0, 0, 0), (127, 127, 127), (1.0, -2.0, 0.5), True)
vel.transform = vdb.createLinearTransform(
    np.array([[0.5, 0.1, 0.0, 0.0], [0.0, 0.4, 0.0, 0.0], [0.1, 0.0, 0.3, 0.0], [1.0, 2.0, 3.0, 1.0]])
)
mask = vdb.BoolGrid()
mask.name = "mask"
macc = mask.getAccessor()
for p in rng.integers(-100, 100, (400, 3)):
    macc.setValueOn(tuple(int(c) for c in p), True)
mask.fill((512, 512, 512), (639, 639, 639), True, True)
# one leaf per mask-compression code: inactive values all -background (1), all one other value (2),
# background or -background (3), background or another value (4), two other values (5), three (6)
codes = vdb.FloatGrid(background=1.0)
codes.name = "codes"
cacc = codes.getAccessor()
patterns = [(-1.0,), (5.0,), (1.0, -1.0), (1.0, 5.0), (5.0, 6.0), (1.0, -1.0, 5.0)]
for n, pattern in enumerate(patterns):
    for v in range(512):
        ijk = (8 * n + (v >> 6), (v >> 3) & 7, v & 7)
        if v == 0:
            cacc.setValueOn(ijk, 0.5 + n)
        else:
            cacc.setValueOff(ijk, pattern[v % len(pattern)])
grids = [density, again, half, sphere, vel, mask, codes]
if len(sys.argv) == 2:
    vdb.write(out + "/grids.vdb", grids, metadata={"creator": "vdbflow tests", "frame": 12})

probe = np.concatenate([rng.integers(-800, 800, (4000, 3)), rng.integers(-40, 40, (2000, 3)),
                        rng.integers(-260, 260, (2000, 3))])
seen = {}
source = sys.argv[2] if len(sys.argv) > 2 else out + "/grids.vdb"
for g in vdb.readAll(source)[0]:  # sorted by name; repeated names in file order
    seen[g.name] = seen.get(g.name, -1) + 1
    key = g.name + ("_%d" % seen[g.name] if g.name == "density" else "")
    t = g.transform
    o = np.array(t.indexToWorld((0.0, 0.0, 0.0)))
    m = np.eye(4)
    for a in range(3):
        e = [0.0, 0.0, 0.0]
        e[a] = 1.0
        m[:3, a] = np.array(t.indexToWorld(tuple(e))) - o
    m[:3, 3] = o
    on, tiles = [], []
    for it in g.citerOnValues():
        if it.count == 1:
            on.append(list(it.min) + list(np.atleast_1d(it.value)))
        else:
            tiles.append(list(it.min) + [it.max[0] - it.min[0] + 1] + list(np.atleast_1d(it.value)))
    acc = g.getConstAccessor()
    vals = np.array([np.atleast_1d(acc.getValue(tuple(int(c) for c in p))) for p in probe], float)
    act = np.array([acc.isValueOn(tuple(int(c) for c in p)) for p in probe])
    lo = {"vel": np.array([100, 100, 100]), "codes": np.array([0, -8, -8])}.get(g.name, np.array([-24, -24, -24]))
    shape = (48, 48, 48) if g.valueTypeName != "vec3s" else (48, 48, 48, 3)
    dense = np.zeros(shape, np.float32 if g.valueTypeName != "bool" else bool)
    g.copyToArray(dense, ijk=tuple(int(c) for c in lo))
    bb = g.evalActiveVoxelBoundingBox()
    on = np.array(on, float).reshape(len(on), -1 if on else 4)
    np.savez(out + "/dump_%s.npz" % key, name=g.name, matrix=m, on=on,
             tiles=np.array(tiles, float).reshape(len(tiles), -1 if tiles else 5), probe=probe, values=vals, active=act,
             dense=dense, lo=lo, bbox=np.array(bb), count=g.activeVoxelCount(),
             meta=repr({k: g[k] for k in g.metadata if not k.startswith("file_")}))
"""

GRIDS = ["density\x1e0", "density\x1e1", "half", "sphere", "vel", "mask", "codes"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("vdb")
    run_pyopenvdb(WRITE_AND_DUMP, str(out))
    dumps = {}
    for n, name in enumerate(GRIDS):
        with np.load(out / f"dump_{name.replace(chr(30), '_')}.npz") as d:
            dumps[n] = {k: d[k] for k in d.files}
    return out, dumps


def _at(vol, ijk):
    """vdbflow's value at integer voxels: linear sampling in index space reads the voxel itself."""
    ds = vol.sample(np.asarray(ijk, np.float64), space="index")
    return np.asarray(ds[vol.name].values, np.float64).reshape(len(ijk), -1)


def _check_grid(vol, dump, exact=True):
    """vol against OpenVDB's dump of the same grid."""
    np.testing.assert_allclose(vol.index_to_world, dump["matrix"], rtol=1e-12, atol=1e-12)
    if isinstance(vol, vdbflow.Topology):
        active = {tuple(p) for p in vol.active_voxels().tolist()} if hasattr(vol, "active_voxels") else None
        on = dump["on"][:, :3].astype(int)
        assert active is None or active == {tuple(p) for p in on.tolist()}
        return
    on = dump["on"]
    C = vol.components
    ijk = vol.active_voxels()
    order = np.lexsort(ijk.T[::-1])
    expected = on[np.lexsort(on[:, :3].T[::-1].astype(int))]
    np.testing.assert_array_equal(ijk[order], expected[:, :3].astype(int))
    values = np.asarray(vol.active_values(), np.float64).reshape(-1, C)[order]
    rtol = 0 if exact else 1e-3
    np.testing.assert_allclose(values, expected[:, 3:], rtol=rtol, atol=0 if exact else 1e-3)
    # tiles: OpenVDB's active ones are vdbflow tiles of the same origin, size and value
    tiles = dump["tiles"]
    t = vol.topology
    mine = {
        (*o, int(s)): tuple(np.asarray(v, np.float64).reshape(-1))
        for o, s, v in zip(
            t.tile_origins.tolist(), t.tile_sizes, np.asarray(vol.tile_values).reshape(-1, C), strict=True
        )
    }
    for row in tiles:
        key = (*row[:3].astype(int).tolist(), int(row[3]))
        assert key in mine, f"OpenVDB's active tile {key} is not a vdbflow tile"
        np.testing.assert_allclose(mine[key], row[4:], rtol=rtol)
    # probes (active or not, inside leaves, tiles or the background) and the dense box
    np.testing.assert_allclose(_at(vol, dump["probe"]), dump["values"], rtol=rtol, atol=0 if exact else 1e-3)
    lo = dump["lo"]
    dense = dump["dense"].reshape(48, 48, 48, C)
    grid = np.stack(np.meshgrid(*[np.arange(48)] * 3, indexing="ij"), -1).reshape(-1, 3) + lo
    np.testing.assert_allclose(_at(vol, grid), dense.reshape(-1, C), rtol=rtol, atol=0 if exact else 1e-3)
    # trilinear sampling between voxels equals NumPy's trilinear evaluation of OpenVDB's dense box
    rng = np.random.default_rng(3)
    f = rng.uniform(1, 46, (500, 3))
    i0 = np.floor(f).astype(int)
    w = f - i0
    ref = np.zeros((len(f), C))
    for corner in np.ndindex(2, 2, 2):
        c = np.array(corner)
        weight = np.prod(np.where(c, w, 1 - w), axis=1)
        ref += weight[:, None] * dense[tuple((i0 + c).T)]
    np.testing.assert_allclose(_at(vol, f + lo), ref, rtol=1e-4, atol=1e-4)


def test_every_grid_matches_openvdb(written):
    out, dumps = written
    path = out / "grids.vdb"
    infos = vdbflow.list_grids(path)
    assert [g.name for g in infos] == GRIDS
    for n, name in enumerate(GRIDS):
        dump = dumps[n]
        vol = vdbflow.open(path, grid=n)
        _check_grid(vol, dump, exact=name != "half")
        assert infos[n].active_voxel_count == int(dump["count"])
        if int(dump["count"]):
            assert [list(b) for b in infos[n].index_bbox] == dump["bbox"].astype(int).tolist()
    assert vdbflow.open(path, grid="density\x1e1").index_to_world[0, 0] == 2.0  # the second "density"
    assert vdbflow.open(path, grid="density").index_to_world[0, 0] == 0.25
    assert infos[2].grid_type.endswith("_HalfFloat") and infos[3].grid_class == "level set"
    assert isinstance(vdbflow.open(path, grid="mask"), vdbflow.Topology)


def test_metadata_and_types(written):
    out, dumps = written
    vol = vdbflow.open(out / "grids.vdb", grid="density")
    assert vol.units == "kg/m^3" and vol.name == "density" and vol.dtype == np.float32
    vel = vdbflow.open(out / "grids.vdb", grid="vel")
    assert vel.value_type.name == "vec3f" and vel.components == 3
    sphere = vdbflow.open(out / "grids.vdb", grid="sphere")
    assert sphere.grid_class == "level set"


@pytest.mark.parametrize("codec", ["none", "zip", "blosc", "active"])
def test_every_codec_matches_openvdb(written, codec, tmp_path):
    tool = require_tool("vdb_tool")
    out, dumps = written
    path = tmp_path / f"{codec}.vdb"
    subprocess.run(
        [tool, "-read", str(out / "grids.vdb"), "-write", f"codec={codec}", str(path)], check=True, capture_output=True
    )
    infos = vdbflow.list_grids(path)
    assert len(infos) == len(GRIDS)
    for g in infos:  # vdb_tool writes the grids in another order: each is matched by name and transform
        (n,) = [
            n
            for n, d in dumps.items()
            if str(d["name"]) == g.name.split("\x1e")[0] and np.allclose(d["matrix"], g.index_to_world)
        ]
        parts = g.codec.split("+")
        if g.value_type is not None:
            assert ("zip" in parts) == (
                codec == "zip" and g.grid_class != "level set"
            )  # OpenVDB: no zip for level sets
            assert ("blosc" in parts) == (codec == "blosc") and ("mask" in parts) == (codec != "none")
        _check_grid(vdbflow.open(path, grid=g.index), dumps[n], exact=GRIDS[n] != "half")


def test_half_float_file_matches_openvdb(written, tmp_path):
    """vdb_tool bits=16 saves every float grid as half floats; vdbflow reads OpenVDB's half values."""
    tool = require_tool("vdb_tool")
    out, dumps = written
    path = tmp_path / "half.vdb"
    subprocess.run(
        [tool, "-read", str(out / "grids.vdb"), "-write", "bits=16", str(path)], check=True, capture_output=True
    )
    check = r"""
import sys, numpy as np, pyopenvdb as vdb
p = np.load(sys.argv[2])
for n, g in enumerate(vdb.readAll(sys.argv[1])[0]):
    if g.valueTypeName == "bool":
        continue
    acc = g.getConstAccessor()
    vals = np.array([np.atleast_1d(acc.getValue(tuple(int(c) for c in q))) for q in p], float)
    np.savez(sys.argv[2].replace(".npy", "_%d.npz" % n), name=g.name, size=g.transform.voxelSize()[0], values=vals)
"""
    probe = dumps[0]["probe"]
    np.save(tmp_path / "probe.npy", probe)
    run_pyopenvdb(check, str(path), str(tmp_path / "probe.npy"))
    expected = {}
    for f in tmp_path.glob("probe_*.npz"):
        with np.load(f) as d:
            expected[(str(d["name"]), float(d["size"]))] = d["values"]
    infos = [g for g in vdbflow.list_grids(path) if g.value_type is not None]
    assert len(infos) == len(expected) == 6
    for g in infos:
        assert g.grid_type.endswith("_HalfFloat") and "half" in g.codec.split("+")
        want = expected[(g.name.split("\x1e")[0], g.voxel_size[0])]
        np.testing.assert_array_equal(_at(vdbflow.open(path, grid=g.index), probe), want)


def test_file_metadata_and_info_cli(written):
    from click.testing import CliRunner

    from vdbflow.jobs.cli.main import main

    out, _ = written
    result = CliRunner().invoke(main, ["info", "--json", str(out / "grids.vdb")])
    assert result.exit_code == 0, result.output
    import json

    listing = json.loads(result.output)
    assert [g["name"] for g in listing[0]["grids"]] == GRIDS
    table = CliRunner().invoke(main, ["info", str(out / "grids.vdb")])
    assert table.exit_code == 0 and "sphere" in table.output


def test_convert_to_nvdb_keeps_the_values(written, tmp_path):
    from click.testing import CliRunner

    from vdbflow.jobs.cli.main import main

    out, dumps = written
    target = tmp_path / "grids.nvdb"
    result = CliRunner().invoke(main, ["convert", str(out / "grids.vdb"), str(target)])
    assert result.exit_code == 0, result.output
    names = [g.name for g in vdbflow.list_grids(target)]
    assert "density" in names and "vel" in names
    vol = vdbflow.open(target, grid="vel")
    _check_grid(vol, dumps[4])


def test_committed_seeds_match_openvdb_and_a_fresh_write(tmp_path):
    """The seed files the suite and the fuzzer read without OpenVDB: what pyopenvdb reads in them is
    what vdbflow reads, and scripts/make_vdb_seeds.py still writes the same grids."""
    from pathlib import Path

    data = Path(__file__).resolve().parent / "data" / "openvdb"
    run_pyopenvdb(WRITE_AND_DUMP, str(tmp_path), str(data / "grids.vdb"))
    infos = vdbflow.list_grids(data / "grids.vdb")
    checked = 0
    for g in infos:
        base = g.name.split("\x1e")[0]
        key = g.name.replace("\x1e", "_") if base == "density" else base
        dump_path = tmp_path / f"dump_{key}.npz"
        if not dump_path.exists():  # pyopenvdb names the instance's dump after its own name
            continue
        with np.load(dump_path) as d:
            _check_grid(vdbflow.open(data / "grids.vdb", grid=g.index), {k: d[k] for k in d.files}, g.name != "half")
        checked += 1
    assert checked == len(infos)
    fresh = tmp_path / "fresh"
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_vdb_seeds.py"
    subprocess.run([require_pyopenvdb_python(), str(script), str(fresh)], check=True, capture_output=True)
    for name in ("grids.vdb", "zip.vdb", "active.vdb"):
        if not (fresh / name).exists():
            continue
        mine, theirs = vdbflow.list_grids(data / name), vdbflow.list_grids(fresh / name)
        assert [g.name for g in mine] == [g.name for g in theirs]
        for a, b in zip(mine, theirs, strict=True):
            va, vb = vdbflow.open(data / name, grid=a.index), vdbflow.open(fresh / name, grid=b.index)
            if isinstance(va, vdbflow.Volume):
                np.testing.assert_array_equal(np.asarray(va.voxel_data), np.asarray(vb.voxel_data))
            np.testing.assert_array_equal(va.index_to_world, vb.index_to_world)


def require_pyopenvdb_python() -> str:
    from system_tools import require_pyopenvdb

    return require_pyopenvdb()


def test_frustum_transforms_are_refused_naming_the_map(tmp_path):
    script = r"""
import sys, pyopenvdb as vdb
g = vdb.FloatGrid()
g.name = "cone"
g.getAccessor().setValueOn((1, 2, 3), 1.0)
g.transform = vdb.createFrustumTransform((0, 0, 0), (10, 10, 10), 0.5, 2.0, 0.1)
vdb.write(sys.argv[1], [g])
"""
    path = tmp_path / "frustum.vdb"
    run_pyopenvdb(script, str(path))
    with pytest.raises(vdbflow.OpenVDBError, match="found 'NonlinearFrustumMap' .a non-linear map"):
        vdbflow.open(path)


def _vdb_print(path) -> dict[str, str]:
    """vdb_print -l's "key: value" lines for the one grid of ``path``."""
    out = subprocess.run([require_tool("vdb_print"), "-l", str(path)], check=True, capture_output=True, text=True)
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.stdout.splitlines()) if v}


@pytest.mark.parametrize(
    ("type_name", "dtype", "components"),
    [("double", "<f8", 1), ("int32", "<i4", 1), ("int64", "<i8", 1), ("vec3d", "<f8", 3), ("vec3i", "<i4", 3)],
)
def test_types_pyopenvdb_cannot_write(tmp_path, type_name, dtype, components):
    """double, int32, int64, vec3d and vec3i grids, written by the test writer (tests/vdb_writer.py);
    OpenVDB's vdb_print reads the same files (active voxels, bounding box, scalar min and max) and
    vdbflow reads the values written."""
    from vdb_writer import write_vdb

    rng = np.random.default_rng(5)
    ijk = np.unique(rng.integers(-300, 300, (300, 3)), axis=0)
    values = rng.integers(-1000, 1000, (len(ijk), components)).astype(dtype)
    if dtype == "<f8":
        values = values + rng.uniform(0, 1, values.shape)
    matrix = np.array([[0.5, 0.1, 0, 1], [0, 0.4, 0, 2], [0.1, 0, 0.3, 3], [0, 0, 0, 1]])
    path = tmp_path / f"{type_name}.vdb"
    write_vdb(path, f"Tree_{type_name}_5_4_3", dtype, components, ijk, values, np.full(components, 3), matrix)
    facts = _vdb_print(path)
    vol = vdbflow.open(path)
    assert vol.active_voxel_count == int(facts["Number of active voxels"].replace(",", "")) == len(ijk)
    lo, hi = vol.active_voxels().min(axis=0), vol.active_voxels().max(axis=0)
    assert facts["Bounding box of active voxels"] == f"[{', '.join(map(str, lo))}] -> [{', '.join(map(str, hi))}]"
    got = np.asarray(vol.active_values()).reshape(-1, components)
    order = {tuple(p): n for n, p in enumerate(ijk.tolist())}
    want = values[[order[tuple(p)] for p in vol.active_voxels().tolist()]]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(vol.index_to_world, matrix)
    if components == 1:
        assert float(facts["Min value"]) == pytest.approx(float(values.min()), rel=1e-5)
        assert float(facts["Max value"]) == pytest.approx(float(values.max()), rel=1e-5)
    mode = "linear" if dtype == "<f8" else "closest"  # vdbflow does not interpolate integers
    sampled = vol.sample(vol.active_voxels().astype(float), space="index", mode=mode)[vol.name].values
    np.testing.assert_array_equal(np.asarray(sampled).reshape(-1, components), want)
    assert vol.value_type.name == {"double": "float64", "vec3i": "int32x3"}.get(type_name, type_name)


def test_every_mask_compression_code_is_read(written, monkeypatch):
    """The "codes" grid holds one leaf per code OpenVDB picks for its inactive values; the file as
    pyopenvdb wrote it uses every code 0-6 (leaves and internal nodes together), and vdbflow's values
    equal OpenVDB's."""
    from vdbflow.io.openvdb import values
    from vdbflow.io.openvdb.stream import Cursor

    out, dumps = written
    seen = set()
    u8, leaf_codes = Cursor.u8, values._inactive_values  # the reader's code readers, spied on

    def node_spy(self, what):
        value = u8(self, what)
        if "mask compression code" in what:
            seen.add(value)
        return value

    def leaf_spy(st, codes, stored):
        seen.update(int(c) for c in codes)
        return leaf_codes(st, codes, stored)

    monkeypatch.setattr(Cursor, "u8", node_spy)
    monkeypatch.setattr(values, "_inactive_values", leaf_spy)
    vol = vdbflow.open(out / "grids.vdb", grid="codes")
    assert seen == set(range(7)), seen
    _check_grid(vol, dumps[GRIDS.index("codes")])


# bbox= reads: the leaves and tiles that meet the box, as the .nvdb reader keeps them
BOXES = [
    ((-30, -30, -30), (40, 20, 60)),  # sparse voxels around the origin, the 8^3 tiles, the sphere
    ((-256, -256, -256), (-200, -129, -129)),  # inside the active 128^3 tile
    ((16, 16, 16), (16, 16, 16)),  # one voxel of the inactive 8^3 tile
    ((0, -8, -8), (47, 7, 7)),  # the "codes" leaves
    ((100, 100, 100), (140, 140, 140)),  # the vel box and its tile's edge
    ((5000, 5000, 5000), (6000, 6000, 6000)),  # nothing there
    ((10, 10, 10), (0, 0, 0)),  # an empty box (min > max)
]


def _meets(origins, sizes, box):
    """(n,) bool: cubes [origin, origin + size) that meet the inclusive box, computed here."""
    lo, hi = np.asarray(box, np.int64)
    o = np.asarray(origins, np.int64).reshape(-1, 3)
    return np.all((o <= hi) & (o + np.asarray(sizes, np.int64).reshape(-1, 1) - 1 >= lo), axis=1)


def _keys(ijk):
    """One int64 per voxel (n, 3), coordinates within +-2^20."""
    k = np.asarray(ijk, np.int64) + (1 << 20)
    return (k[:, 0] << 42) | (k[:, 1] << 21) | k[:, 2]


def _is_full_cut_to(part, full, box):
    """``part`` (a bbox= read) holds exactly the full read's leaves and tiles that meet ``box``, with
    their masks, values (all 512 per leaf) and tile values, in the same order."""
    t_part = part if isinstance(part, vdbflow.Topology) else part.topology
    t_full = full if isinstance(full, vdbflow.Topology) else full.topology
    leaves = _meets(t_full.leaf_origins, 8, box)
    tiles = _meets(t_full.tile_origins, t_full.tile_sizes, box)
    np.testing.assert_array_equal(t_part.leaf_origins, t_full.leaf_origins[leaves])
    np.testing.assert_array_equal(t_part.masks, t_full.masks[leaves])
    np.testing.assert_array_equal(t_part.tile_origins, t_full.tile_origins[tiles])
    np.testing.assert_array_equal(t_part.tile_sizes, t_full.tile_sizes[tiles])
    np.testing.assert_array_equal(t_part.index_to_world, t_full.index_to_world)
    if isinstance(full, vdbflow.Topology):
        return int(leaves.sum())
    C = full.components
    rows = np.asarray(full.voxel_data).reshape(full.leaf_count, 512, C)[leaves]
    np.testing.assert_array_equal(np.asarray(part.voxel_data).reshape(-1, 512, C), rows)
    np.testing.assert_array_equal(part.tile_values, np.asarray(full.tile_values)[tiles])
    np.testing.assert_array_equal(part.background, full.background)
    lo, hi = np.asarray(box)
    if np.all(lo <= hi):  # inside the box, the part reads what the whole grid reads (active or not)
        pts = np.random.default_rng(4).integers(lo, hi + 1, (300, 3))
        np.testing.assert_array_equal(_at(part, pts), _at(full, pts))
        every = full.active_voxels()
        inside = every[np.all((every >= lo) & (every <= hi), axis=1)]
        assert np.isin(_keys(inside), _keys(part.active_voxels())).all()  # and active in the part
    return int(leaves.sum())


@pytest.mark.parametrize("codec", ["pyopenvdb", "none", "zip", "blosc", "active"])
def test_bbox_reads_the_full_read_cut_to_the_box(written, codec, tmp_path):
    """Every grid (value, bool and mask) and every codec: a bbox= read, by path and from bytes, is
    the full read cut to the box; with leaves= too, the leaves both choose."""
    out, _ = written
    path = out / "grids.vdb"
    if codec != "pyopenvdb":
        path = tmp_path / f"{codec}.vdb"
        subprocess.run(
            [require_tool("vdb_tool"), "-read", str(out / "grids.vdb"), "-write", f"codec={codec}", str(path)],
            check=True,
            capture_output=True,
        )
    data = path.read_bytes()
    kept = 0
    for g in vdbflow.list_grids(path):
        full = vdbflow.open(path, grid=g.index)
        for n, box in enumerate(BOXES):
            part = vdbflow.open(path, grid=g.index, bbox=box)
            kept += _is_full_cut_to(part, full, box)
            if n in (0, 3):  # from memory too (the leaf buffers copied out of the bytes, not read)
                _is_full_cut_to(vdbflow.open(data, grid=g.index, bbox=np.array(box)), full, box)
        t_full = full if isinstance(full, vdbflow.Topology) else full.topology
        chosen = np.arange(0, t_full.leaf_count, 3)
        box = BOXES[0]
        both = vdbflow.open(path, grid=g.index, bbox=box, leaves=chosen)
        t_both = both if isinstance(both, vdbflow.Topology) else both.topology
        picked = np.zeros(t_full.leaf_count, bool)
        picked[chosen] = True
        picked &= _meets(t_full.leaf_origins, 8, box)
        np.testing.assert_array_equal(t_both.leaf_origins, t_full.leaf_origins[picked])
        if not isinstance(full, vdbflow.Topology):
            rows = np.asarray(full.voxel_data).reshape(full.leaf_count, 512, -1)[picked]
            np.testing.assert_array_equal(np.asarray(both.voxel_data).reshape(-1, 512, full.components), rows)
    assert kept > 100  # the boxes hold leaves of most grids
    with pytest.raises(vdbflow.OpenVDBError, match=r"expected bbox as \(\(i0, j0, k0\), \(i1, j1, k1\)\), got shape"):
        vdbflow.open(path, bbox=(0, 0, 0))
    with pytest.raises(vdbflow.OpenVDBError, match="only bbox=, leaves= or checksum="):
        vdbflow.open(path, box=BOXES[0])


def test_threaded_reads_match_openvdb_and_the_bytes(written, monkeypatch, tmp_path):
    """The leaf records read while the topology is parsed, the leaf values beside the topology's
    tables, and the scatter-read split between two threads (all kept for large grids), forced on for
    these small ones: OpenVDB's values, and the same as the copy out of the file's bytes."""
    from vdbflow.io.openvdb import read, scatter, values

    out, dumps = written
    path = tmp_path / "none.vdb"
    subprocess.run(
        [require_tool("vdb_tool"), "-read", str(out / "grids.vdb"), "-write", "codec=none", str(path)],
        check=True,
        capture_output=True,
    )
    plain = {g.index: vdbflow.open(path, grid=g.index) for g in vdbflow.list_grids(path)}
    monkeypatch.setattr(read, "PARALLEL_LEAVES", 0)
    monkeypatch.setattr(scatter, "MIN_SPLIT", 1)
    monkeypatch.setattr(scatter, "THREADS", 2)
    taken = []
    take = values.EarlyRead.take

    def spy(self, cur, st, count):
        got = take(self, cur, st, count)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(values.EarlyRead, "take", spy)
    data = path.read_bytes()
    for g in vdbflow.list_grids(path):
        vol = vdbflow.open(path, grid=g.index)
        (n,) = [
            n
            for n, d in dumps.items()
            if str(d["name"]) == g.name.split("\x1e")[0] and np.allclose(d["matrix"], g.index_to_world)
        ]
        _check_grid(vol, dumps[n], exact=GRIDS[n] != "half")
        for other in (plain[g.index], vdbflow.open(data, grid=g.index)):
            if isinstance(vol, vdbflow.Volume):
                np.testing.assert_array_equal(np.asarray(vol.voxel_data), np.asarray(other.voxel_data))
            else:
                np.testing.assert_array_equal(vol.masks, other.masks)
    assert any(taken)  # the leaf records read while the topology was parsed were used
