"""OpenVDB files without OpenVDB: the committed seeds of tests/data/openvdb (written by pyopenvdb and
vdb_tool, scripts/make_vdb_seeds.py) read the same whatever their codec, by path and from memory,
in part (``leaves=``, ``bbox=``) and distributed; uncompressed leaf buffers read by every path; a
job config names one; and hostile files - truncated, crafted or retyped - are refused with an
OpenVDBError naming the byte offset, what was expected and what was found."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

import vdbflow
from vdbflow.io.openvdb.header import read_descriptors, read_header
from vdbflow.io.openvdb.stream import Cursor

DATA = Path(__file__).resolve().parent / "data" / "openvdb"
GRIDS = DATA / "grids.vdb"


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, vdbflow.Topology):
        np.testing.assert_array_equal(a.masks, b.masks)
        return
    np.testing.assert_array_equal(a.topology.leaf_origins, b.topology.leaf_origins)
    np.testing.assert_array_equal(a.topology.masks, b.topology.masks)
    np.testing.assert_array_equal(np.asarray(a.voxel_data), np.asarray(b.voxel_data))
    np.testing.assert_array_equal(a.tile_values, b.tile_values)
    np.testing.assert_array_equal(a.index_to_world, b.index_to_world)


def test_codecs_read_alike():
    """zip + mask and mask-only rewrites of the same grids (vdb_tool) read as the blosc original."""
    for codec in ("zip", "active"):
        for info in vdbflow.list_grids(DATA / f"{codec}.vdb"):
            name = info.name.split("\x1e")[0]
            _same(vdbflow.open(DATA / f"{codec}.vdb", grid=info.index), vdbflow.open(GRIDS, grid=name))


def test_instance_shares_its_parents_tree_and_keeps_its_transform():
    density, instance = vdbflow.open(GRIDS, grid="density"), vdbflow.open(GRIDS, grid="density_instance")
    np.testing.assert_array_equal(np.asarray(density.voxel_data), np.asarray(instance.voxel_data))
    assert density.voxel_size[0] == 0.25 and instance.voxel_size[0] == 0.5


def test_bytes_and_partial_reads_match_the_file():
    data = GRIDS.read_bytes()
    for info in vdbflow.list_grids(GRIDS):
        whole = vdbflow.open(GRIDS, grid=info.index)
        _same(vdbflow.open(data, grid=info.index), whole)
        _same(vdbflow.open(np.frombuffer(data, np.uint8), grid=info.index), whole)
        some = np.arange(0, info.leaf_count, 2)
        part = vdbflow.open(GRIDS, grid=info.index, leaves=some)
        if isinstance(whole, vdbflow.Volume):
            _same(part, whole.select_leaves(some))
        else:
            np.testing.assert_array_equal(part.masks, whole.masks[some])


def test_grid_selection_and_list_grids():
    infos = vdbflow.list_grids(GRIDS)
    names = [g.name for g in infos]
    assert names[:2] == ["density\x1e0", "density\x1e1"] and "density_instance" in names
    assert vdbflow.open(GRIDS, grid="density\x1e1").active_voxel_count == 1
    assert infos[0].units == "kg/m^3" and infos[1].units is None  # the grid's "units" metadata
    with pytest.raises(vdbflow.OpenVDBError, match=r"grid names .* got 'nope'"):
        vdbflow.open(GRIDS, grid="nope")
    with pytest.raises(vdbflow.OpenVDBError, match=r"grid index in \[0, 7\)"):
        vdbflow.open(GRIDS, grid=7)
    with pytest.raises(vdbflow.OpenVDBError, match="leaf indices"):
        vdbflow.open(GRIDS, leaves=[10**6])
    with pytest.raises(vdbflow.OpenVDBError, match="only bbox=, leaves= or checksum="):
        vdbflow.open(GRIDS, box=((0, 0, 0), (1, 1, 1)))  # a misspelt keyword


def test_truncated_files_are_refused_naming_the_byte(tmp_path):
    data = GRIDS.read_bytes()
    path = tmp_path / "cut.vdb"
    for cut in [8, 12, 30, 60, 150, 200, 400, 5_000, 20_000, 50_000, len(data) - 1]:
        path.write_bytes(data[:cut])
        with pytest.raises(vdbflow.OpenVDBError, match=r"at byte \d+ of .*expected .*found"):
            for k in range(7):
                vdbflow.open(path, grid=k)


def _descriptors(data: bytes):
    cur = Cursor(np.frombuffer(data, np.uint8))
    header = read_header(cur)
    return read_descriptors(cur, header)


def _retype(data: bytes, index: int, new_type: str) -> bytes:
    """``data`` with grid ``index``'s type string replaced, every later offset moved to match."""
    ds = _descriptors(data)
    d = ds[index]
    at = d.at + 4 + len(d.unique_name.encode())  # the type string's length
    old_len = struct.unpack_from("<I", data, at)[0]
    delta = len(new_type) - old_len
    out = bytearray(data[:at] + struct.pack("<I", len(new_type)) + new_type.encode() + data[at + 4 + old_len :])
    for e in ds[index:]:
        type_len = len(new_type) if e is d else len(e.type_name) + (len("_HalfFloat") if e.half else 0)
        pos = e.at + (0 if e is d else delta) + 12 + len(e.unique_name.encode()) + type_len + len(e.parent.encode())
        vals = struct.unpack_from("<qqq", out, pos)
        struct.pack_into("<qqq", out, pos, *(v + delta if v else 0 for v in vals))
    return bytes(out)


def test_point_grids_and_other_trees_are_refused_by_name(tmp_path):
    path = tmp_path / "points.vdb"
    path.write_bytes(_retype(GRIDS.read_bytes(), 3, "Tree_ptdataidx32_5_4_3"))
    assert vdbflow.open(path, grid=4).name == "vel"  # the grids after it still open
    with pytest.raises(vdbflow.OpenVDBError, match="'Tree_ptdataidx32_5_4_3' for grid 'sphere' .a point grid"):
        vdbflow.open(path, grid="sphere")
    path.write_bytes(_retype(GRIDS.read_bytes(), 3, "Tree_float_5_5_3"))
    with pytest.raises(vdbflow.OpenVDBError, match="other node sizes"):
        vdbflow.list_grids(path)
    path.write_bytes(_retype(GRIDS.read_bytes(), 3, "Tree_string_5_4_3"))
    with pytest.raises(vdbflow.OpenVDBError, match="a value type vdbflow does not read"):
        vdbflow.open(path, grid=3)


def _patch(data: bytes, at: int, form: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(form, out, at, value)
    return bytes(out)


def test_crafted_numbers_are_refused_before_any_allocation(tmp_path):
    data = GRIDS.read_bytes()
    d = _descriptors(data)[3]  # sphere
    path = tmp_path / "x.vdb"
    cases = [
        (_patch(data, 8, "<I", 300), "file format version from 222 to 225"),
        (_patch(data, 8, "<I", 221), "found version 221"),
        (_patch(data, d.grid_pos, "<I", 0x10), r"compression flags .* found 0x10"),
        (_patch(data, d.grid_pos + 4, "<I", 2**31), "item count of the grid metadata"),
        (_patch(data, d.grid_pos - 24, "<q", 1 << 40), "offsets of grid 'sphere'"),
        (_patch(data, d.grid_pos - 8, "<q", 1 << 40), "offsets of grid 'sphere'"),
    ]
    for blob, message in cases:
        path.write_bytes(blob)
        with pytest.raises(vdbflow.OpenVDBError, match=message):
            vdbflow.open(path, grid=3)
            vdbflow.list_grids(path)


def test_a_job_config_with_a_vdb_volume_plans_its_grids(tmp_path):
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.plan import plan_job

    cfg = load_config(
        data={
            "volume": {"path": str(GRIDS), "grids": ["vel", "sphere"]},
            "points": {"kind": "random", "count": 1000, "chunk": 500, "seed": 3},
            "sampling": {"mode": "linear", "outputs": ["value"]},
            "cluster": {"kind": "local", "workers": 1, "dashboard": False},
            "output": {"path": str(tmp_path / "out.zarr")},
        }
    )
    plan = plan_job(cfg)
    assert [g.name for g in plan.grids] == ["vel", "sphere"]


def test_distribute_a_vdb_file_samples_as_the_volume(rng):
    distributed = pytest.importorskip("distributed")
    from vdbflow.distribution.volume import distribute

    vol = vdbflow.open(GRIDS, grid="sphere")
    pts = vol.active_voxels()[::3] + rng.uniform(-0.5, 0.5, (len(vol.active_voxels()[::3]), 3))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        dvol = distribute(str(GRIDS), client, 2, grid="sphere")
        try:
            got = dvol.sample(pts, space="index").compute()
        finally:
            dvol.close()
    np.testing.assert_array_equal(got["sphere"].values, vol.sample(pts, space="index")["sphere"].values)


@pytest.mark.slow
def test_vdbflow_run_samples_a_vdb_volume(tmp_path):
    """A job whose volume.path is a .vdb file: `vdbflow run` samples it as the in-memory volume does."""
    import yaml
    from click.testing import CliRunner

    xr = pytest.importorskip("xarray")
    from vdbflow.jobs.cli.main import main

    cfg = {
        "volume": {"path": str(GRIDS), "grids": ["sphere"]},
        "points": {"kind": "random", "count": 3000, "chunk": 1000, "seed": 3},
        "sampling": {"mode": "linear", "outputs": ["value", "jacobian"]},
        "cluster": {"kind": "local", "workers": 2, "dashboard": False},
        "output": {"path": str(tmp_path / "out.zarr")},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "job.yaml")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "out.zarr")
    world = np.stack([ds[c].values for c in "xyz"], axis=1)
    want = vdbflow.open(GRIDS, grid="sphere").sample_grad(world)
    np.testing.assert_array_equal(ds["sphere"].values, want["sphere"].values)
    np.testing.assert_array_equal(ds["sphere_jacobian"].values, want["sphere_jacobian"].values)


def test_a_transform_beyond_float32_reads_and_the_nvdb_writer_refuses_it(tmp_path):
    """OpenVDB keeps transforms in doubles; NanoVDB's map also keeps a float copy, so .nvdb cannot hold
    a translation beyond float32: vdbflow reads the .vdb, and save refuses it with a NanoVDBError
    (found by scripts/fuzz_vdb.py, seed 1 case 17800: a raw OverflowError before)."""
    data = bytearray(GRIDS.read_bytes())
    d = _descriptors(bytes(data))[4]  # vel: an AffineMap
    at = bytes(data).index(b"AffineMap", d.grid_pos) + len("AffineMap") + 12 * 8  # the x translation
    struct.pack_into("<d", data, at, 1e300)
    path = tmp_path / "far.vdb"
    path.write_bytes(bytes(data))
    vol = vdbflow.open(path, grid="vel")
    assert vol.index_to_world[0, 3] == 1e300
    with pytest.raises(vdbflow.NanoVDBError, match="float32 range of NanoVDB's float map"):
        vol.to_nvdb(str(tmp_path / "far.nvdb"))
    assert not (tmp_path / "far.nvdb").exists()


def _leaf_block(rng, masks, masked, codes):
    """Leaf buffers as OpenVDB writes them without zip or blosc: each leaf's value mask, its code,
    then its float values (all 512, or with ``masked`` the active ones); returns (bytes, the 512
    values of each leaf as the reader must give them (inactive ones of a masked leaf: +-background))."""
    from vdbflow.core import tree

    parts, expected = [], []
    for mask, code in zip(masks, codes, strict=True):
        vals = rng.normal(size=512).astype("<f4")
        active = tree.bits_from_masks(mask[None])[0]
        stored = vals[active] if masked else vals
        parts += [mask.astype("<u8").tobytes(), bytes([code]), stored.tobytes()]
        if masked:
            vals = np.where(active, vals, np.float32(-2.0 if code == 1 else 2.0))
        expected.append(vals)
    return b"".join(parts), np.array(expected, np.float32)


@pytest.mark.parametrize("masked", [False, True])
def test_uncompressed_leaf_buffers_by_every_path(tmp_path, rng, masked):
    """The fixed-size leaf records read whole or in part, scatter-read from the file or copied out of
    the bytes, with and without bytes after them: the values written, leaf by leaf."""
    from vdbflow.io.openvdb import format as fmt
    from vdbflow.io.openvdb.values import Storage, read_leaf_values

    L = 300
    masks = rng.integers(0, 2**63, (L, 8), dtype=np.uint64) & rng.integers(0, 2**63, (L, 8), dtype=np.uint64)
    masks[::7] = np.uint64(2**64 - 1)
    masks[5] = 0
    codes = rng.integers(0, 2, L) if masked else rng.choice([0, 1, 6], L)
    block, expected = _leaf_block(rng, masks, masked, codes)
    flags = fmt.COMPRESS_ACTIVE_MASK if masked else 0
    st = Storage(flags, fmt.VALUE_LAYOUTS["float"], np.dtype("float32"), 1, np.array([2.0], np.float32))
    subsets = [None, np.arange(L) % 3 == 1, np.arange(L) > L - 4, np.zeros(L, bool)]
    for tail in (b"", b"\0" * 100):  # exactly filling the grid, or not (then every code is read)
        path = tmp_path / "leaves.bin"
        path.write_bytes(b"head" + block + tail)
        buf = np.frombuffer(path.read_bytes(), np.uint8)
        for wanted in subsets:
            want = np.ones(L, bool) if wanted is None else wanted
            for source in (str(path), None):
                cur = Cursor(buf, 4)
                got = read_leaf_values(cur, st, masks, wanted, source)
                np.testing.assert_array_equal(got.reshape(-1, 512), expected[want])
    with pytest.raises(vdbflow.OpenVDBError, match=r"at byte \d+: expected \d+ bytes of the values of leaf 299, found"):
        read_leaf_values(Cursor(np.frombuffer(b"head" + block[:-3], np.uint8), 4), st, masks)


def test_a_short_scatter_read_is_an_error_naming_the_byte(tmp_path):
    from vdbflow.io.openvdb import scatter

    if not scatter.available():
        pytest.skip("no preadv here")
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(range(256)) * 4)
    heads, values = np.empty((3, 5), np.uint8), np.empty(3000, np.uint8)
    scatter.read_records(str(path), 10, 5, np.array([100, 0, 200]), heads, values)
    np.testing.assert_array_equal(heads[1], np.arange(115, 120))
    np.testing.assert_array_equal(values[:300], (np.r_[np.arange(15, 115), np.arange(125, 325)]) % 256)
    with pytest.raises(vdbflow.OpenVDBError, match=r"at byte 10 of .*expected 3015 bytes .* found 1014"):
        scatter.read_records(str(path), 10, 5, np.array([1000, 1000, 1000]), heads, values)
    with pytest.raises(ValueError, match="writable contiguous array of 3000 bytes"):
        scatter.read_records(str(path), 0, 5, np.array([1000, 1000, 1000]), heads, values[:10])


def test_bbox_reads_of_the_seeds_are_the_full_reads_cut_to_the_box():
    """Without OpenVDB: every grid of every seed file read with bbox= is its full read's leaves and
    tiles that meet the box (computed here), from the file and from memory; a box of another shape
    is refused as the .nvdb reader refuses it."""
    for name in ("grids.vdb", "zip.vdb", "active.vdb"):
        data = (DATA / name).read_bytes()
        for g in vdbflow.list_grids(DATA / name):
            full = vdbflow.open(DATA / name, grid=g.index)
            t_full = full if isinstance(full, vdbflow.Topology) else full.topology
            for box in (((-40, -40, -40), (40, 40, 40)), ((0, 0, 0), (0, 0, 0)), ((9, 9, 9), (-9, -9, -9))):
                lo, hi = np.asarray(box)
                o = t_full.leaf_origins.astype(np.int64)
                leaves = np.all((o <= hi) & (o + 7 >= lo), axis=1)
                t = t_full.tile_origins.astype(np.int64)
                tiles = np.all((t <= hi) & (t + t_full.tile_sizes[:, None] - 1 >= lo), axis=1)
                for source in (DATA / name, data):
                    part = vdbflow.open(source, grid=g.index, bbox=box)
                    t_part = part if isinstance(part, vdbflow.Topology) else part.topology
                    np.testing.assert_array_equal(t_part.leaf_origins, t_full.leaf_origins[leaves])
                    np.testing.assert_array_equal(t_part.masks, t_full.masks[leaves])
                    np.testing.assert_array_equal(t_part.tile_origins, t_full.tile_origins[tiles])
                    if isinstance(full, vdbflow.Volume):
                        rows = np.asarray(full.voxel_data).reshape(full.leaf_count, 512, -1)[leaves]
                        np.testing.assert_array_equal(np.asarray(part.voxel_data).reshape(rows.shape), rows)
                        np.testing.assert_array_equal(part.tile_values, np.asarray(full.tile_values)[tiles])
    for bad in ((0, 0, 0), [[0, 0], [1, 1]], np.zeros((2, 3, 1))):
        with pytest.raises(vdbflow.OpenVDBError, match=r"expected bbox as \(\(i0, j0, k0\), \(i1, j1, k1\)\)"):
            vdbflow.open(GRIDS, bbox=bad)


# -- issue 40, row 3: the topology and the leaf values come from one open file --------------------------


@pytest.mark.parametrize("leaves", [100, 20_000])  # the leaf loop's scatter-read, and the early read beside it
def test_a_vdb_renamed_over_while_it_is_read_never_mixes_two_files(tmp_path, monkeypatch, leaves):
    """A writer that renames a new file over the path (docs/jobs.md: safe) while a reader is between the
    topology and the leaf values: the reader gets the file it opened, whole."""
    from vdb_writer import write_vdb

    from vdbflow.io.openvdb import read, scatter

    if not scatter.available():
        pytest.skip("no preadv here: the leaf values come from the mapped bytes")
    ijk = np.array([[8 * (n % 64), 8 * ((n // 64) % 64), 8 * (n // 4096)] for n in range(leaves)])
    old_values = np.arange(len(ijk), dtype=np.float32)
    path, other = tmp_path / "field.vdb", tmp_path / "new.vdb"
    write_vdb(path, "Tree_float_5_4_3", np.float32, 1, ijk, old_values, 0.0)
    write_vdb(other, "Tree_float_5_4_3", np.float32, 1, ijk, -old_values - 1, 0.0)  # same topology
    real = read.read_head

    def renamed_over_then_read(f, d):
        os.replace(other, path)  # after the file was opened and mapped, before its tree is read
        return real(f, d)

    monkeypatch.setattr(read, "read_head", renamed_over_then_read)
    vol = vdbflow.open(path)
    monkeypatch.setattr(read, "read_head", real)

    def at_voxels(v, points):
        return v.sample(points.astype(np.float64), space="index", mode="closest")[v.name].values

    np.testing.assert_array_equal(at_voxels(vol, ijk), old_values)
    assert at_voxels(vdbflow.open(path), ijk[:3]).tolist() == [-1, -2, -3]  # the new file, read afresh


def test_a_vdb_written_in_place_while_it_is_read_is_refused(tmp_path, monkeypatch):
    from vdb_writer import write_vdb

    from vdbflow.io.openvdb import read

    path = tmp_path / "field.vdb"
    write_vdb(path, "Tree_float_5_4_3", np.float32, 1, [[0, 0, 0], [8, 0, 0]], [1.0, 2.0], 0.0)
    real = read.read_head

    def appended_then_read(f, d):
        with open(path, "ab") as fh:  # a writer appending to the file in place
            fh.write(b"\0" * 10)
        return real(f, d)

    monkeypatch.setattr(read, "read_head", appended_then_read)
    with pytest.raises(vdbflow.OpenVDBError, match="to stay as it was while it was read .* written to in place"):
        vdbflow.open(path)
    for kind in ("fifo", "dir"):
        odd = tmp_path / kind
        os.mkfifo(odd) if kind == "fifo" else odd.mkdir()
        with pytest.raises(vdbflow.OpenVDBError, match="to be a regular file"):
            read.open_vdb(odd)


# -- issue 40, row 11: bbox= and leaves= checked one way for both formats --------------------------------


def _both_formats(tmp_path):
    from vdb_writer import write_vdb

    ijk = np.array([[0, 0, 0], [8, 0, 0], [16, 0, 0]])
    write_vdb(tmp_path / "f.vdb", "Tree_float_5_4_3", np.float32, 1, ijk, [1.0, 2.0, 3.0], 0.0)
    vol = vdbflow.Volume.from_voxels(ijk, np.array([1.0, 2.0, 3.0], np.float32))
    vdbflow.save(tmp_path / "f.nvdb", {"value": vol})
    return {tmp_path / "f.vdb": vdbflow.OpenVDBError, tmp_path / "f.nvdb": vdbflow.NanoVDBError}


@pytest.mark.parametrize(
    "bbox, found",
    [
        (((0, 0, 0), (np.nan, 1, 1)), "finite"),
        (((0, 0, 0), (1, 1, "x")), "numbers"),
        ("abc", "numbers"),
        (((0, 0, 0), (1, 1)), "numbers|shape"),
    ],
)
def test_bad_bboxes_are_format_errors(tmp_path, bbox, found):
    for path, error in _both_formats(tmp_path).items():
        with pytest.raises(error, match=f"expected .*bbox.*({found})"):
            vdbflow.open(path, bbox=bbox)


def test_bboxes_beyond_int64_cover_everything(tmp_path):
    for path in _both_formats(tmp_path):
        full = vdbflow.open(path)
        for box in (((0, 0, 0), (2**64, 2**64, 2**64)), ((-(2**70), 0, 0), (1e300, 7, 7))):
            part = vdbflow.open(path, bbox=box)
            assert part.leaf_count == full.leaf_count == 3, (path, box)


@pytest.mark.parametrize(
    "leaves, found",
    [
        (np.array([True, False, True]), "boolean mask"),
        (np.array([0, "x"], dtype=object), "leaf indices"),
        ([[0, 1]], "leaf indices"),
        ([2**64], r"leaf indices in \[0, 3\)"),
        ([0.5], "leaf indices"),
    ],
    ids=["mask", "object", "2d", "huge", "float"],
)
def test_bad_leaves_are_format_errors_with_one_meaning(tmp_path, leaves, found):
    for path, error in _both_formats(tmp_path).items():
        with pytest.raises(error, match=found):
            vdbflow.open(path, leaves=leaves)
    for path in _both_formats(tmp_path):  # indices mean the same for both
        assert vdbflow.open(path, leaves=[2, 0]).topology.leaf_origins.tolist() == [[0, 0, 0], [16, 0, 0]]
