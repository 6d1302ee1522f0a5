"""Files as NanoVDB's and fVDB's writers lay them out: checksums by the rules of each NanoVDB version,
multi-segment files of every codec, and the multi-grid payloads of NanoVDB before 32.6."""

from __future__ import annotations

import struct
import zlib

import blosc
import numpy as np
import pytest

import vdbflow
from vdbflow.io.nanovdb import format as fmt

EMPTY32 = 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# an independent statement of NanoVDB's checksum rules (GridChecksum.h), for grids as bytes
def nodes(grid: bytes) -> list[bytes]:
    """Every node of a grid, upper, lower then leaf, each in memory order."""
    gtype = struct.unpack_from("<I", grid, 636)[0]
    lay = fmt.LAYOUTS[gtype]
    leaf, lower, upper, _ = (672 + o for o in struct.unpack_from("<4Q", grid, 672))
    n_leaf, n_lower, n_upper = struct.unpack_from("<3I", grid, 704)
    return (
        [grid[upper + k * lay.upper_size : upper + (k + 1) * lay.upper_size] for k in range(n_upper)]
        + [grid[lower + k * lay.lower_size : lower + (k + 1) * lay.lower_size] for k in range(n_lower)]
        + [grid[leaf + k * lay.leaf_size : leaf + (k + 1) * lay.leaf_size] for k in range(n_leaf)]
    )


def head_old(grid: bytes) -> int:
    """Up to 32.6.0: bytes 16 up to the first upper node (grid, tree, root, root tiles)."""
    return zlib.crc32(grid[16 : 672 + struct.unpack_from("<Q", grid, 688)[0]])


def tail_old(grid: bytes, width: int = 4) -> int:
    """Up to 32.6.0: the CRC32 of the per-node CRC32s (``width``-byte entries)."""
    return zlib.crc32(b"".join(zlib.crc32(n).to_bytes(width, "little") for n in nodes(grid)))


def head_new(grid: bytes) -> int:
    """After 32.6.0: bytes 16 to 736 (grid and tree)."""
    return zlib.crc32(grid[16:736])


def blocked(data: bytes) -> int:
    n = len(data) // 4096
    cuts = [k * 4096 for k in range(n)] + [len(data)]
    crcs = [zlib.crc32(data[a:b]).to_bytes(4, "little") for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    return zlib.crc32(b"".join(crcs))


def tail_new(grid: bytes) -> int:
    """After 32.6.0: the 4 KiB blocks of everything after the tree."""
    return blocked(grid[736 : struct.unpack_from("<Q", grid, 32)[0]])


def with_checksum(grid: bytes, head: int, tail: int) -> bytes:
    out = bytearray(grid)
    struct.pack_into("<II", out, 8, head, tail)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
def sample_volume(seed: int = 0, name: str = "density") -> vdbflow.Volume:
    rng = np.random.default_rng(seed)
    ijk = np.concatenate([np.argwhere(rng.random((16, 16, 8)) < 0.3), [[300, -40, 9]]]) - [4, 0, 0]
    return vdbflow.Volume.from_voxels(ijk, rng.standard_normal(len(ijk)).astype(np.float32), 0.5, name=name)


def file_bytes(tmp_path, grids: dict, codec: str = "none", name: str = "f.nvdb", version: str | None = None) -> bytes:
    vdbflow.save(tmp_path / name, grids, codec=codec, version=version)
    return (tmp_path / name).read_bytes()


def only_grid(data: bytes) -> bytes:
    """The grid of a one-grid, uncompressed file."""
    return data[16 + 176 + struct.unpack_from("<I", data, 16 + 136)[0] :]


def segment(
    grids: list[bytes],
    codec: str = "none",
    version: tuple[int, int, int] = (32, 4, 2),
    names: list[str] | None = None,
    sizes: list[int] | None = None,
) -> bytes:
    """One file segment as NanoVDB's writer lays it out: header, metadata + names, payloads (zip: one
    u64-sized stream; blosc: u64-sized frames of at most 1 GiB)."""
    v = (version[0] << 21) | (version[1] << 10) | version[2]
    payloads = []
    for g in grids:
        if codec == "zip":
            packed = zlib.compress(g)
            payloads.append(struct.pack("<Q", len(packed)) + packed)
        elif codec == "blosc":
            packed = blosc.compress(g, typesize=4, cname="lz4")
            payloads.append(struct.pack("<Q", len(packed)) + packed)
        else:
            payloads.append(g)
    metas = b""
    for k, (g, p) in enumerate(zip(grids, payloads, strict=True)):
        name = (names[k] if names else g[40:296].split(b"\0")[0].decode()).encode() + b"\0"
        size = sizes[k] if sizes else len(g)
        meta = struct.pack("<QQQQII", size, len(p), 0, 0, *struct.unpack_from("<II", g, 636)[::-1])
        meta += bytes(136 - len(meta)) + struct.pack("<I", len(name))
        meta += bytes(168 - len(meta)) + struct.pack("<HHI", fmt.CODEC_IDS[codec], 0, v)
        metas += meta + name
    header = struct.pack("<QIHH", fmt.MAGIC_NUMBER, v, len(grids), fmt.CODEC_IDS[codec])  # "NanoVDB0" up to 32.7
    return header + metas + b"".join(payloads)


def same(a, b) -> None:
    np.testing.assert_array_equal(a.leaf_values, b.leaf_values)
    np.testing.assert_array_equal(a.active_voxels(), b.active_voxels())


# ---------------------------------------------------------------------------------------------
# checksums
def test_written_checksum_is_full_and_follows_the_rules_of_each_version(tmp_path):
    """32.4 (the default for value grids): per-node CRC32s as 8-byte entries, as NanoVDB 32.4's Linux
    builds (nanovdb_validate) compute them; 32.6: as u32; 32.7 and later: grid + tree, then 4 KiB blocks."""
    vol = sample_volume()
    vol.blind_data = (vdbflow.BlindData("w", 0, 1, 1, 4, np.arange(3, dtype=np.float32).tobytes()),)
    topo = vdbflow.Volume.from_active(vol.active_voxels())
    rules = {
        "32.4": lambda g: (head_old(g), tail_old(g, 8)),
        "32.6": lambda g: (head_old(g), tail_old(g)),
        "32.7": lambda g: (head_new(g), tail_new(g)),
        "32.9": lambda g: (head_new(g), tail_new(g)),
    }
    for version, rule in rules.items():
        for obj in (vol, topo) if version != "32.4" else (vol,):
            grid = only_grid(file_bytes(tmp_path, {"g": obj}, version=version))
            head, tail = struct.unpack_from("<II", grid, 8)
            assert (head, tail) == rule(grid), version
            assert EMPTY32 not in (head, tail)
    # the default: 32.4 for value grids, 32.6 (the first with OnIndex grids) for a topology
    assert only_grid(file_bytes(tmp_path, {"g": vol})) == only_grid(file_bytes(tmp_path, {"g": vol}, version="32.4"))
    assert only_grid(file_bytes(tmp_path, {"g": topo})) == only_grid(file_bytes(tmp_path, {"g": topo}, version="32.6"))
    with pytest.raises(vdbflow.NanoVDBError, match="OnIndex grid, which NanoVDB 32.4 does not know"):
        file_bytes(tmp_path, {"g": topo}, version="32.4")
    with pytest.raises(vdbflow.NanoVDBError, match=r"expected a NanoVDB version to write, one of \['32.4'"):
        file_bytes(tmp_path, {"g": vol}, version="32.5")


def test_tail_catches_a_changed_voxel_value(tmp_path):
    vol = sample_volume()
    data = bytearray(file_bytes(tmp_path, {"g": vol}))
    g = len(data) - len(only_grid(bytes(data)))
    leaf = g + 672 + struct.unpack_from("<Q", data, g + 672)[0]
    data[leaf + 96 + 4 * 7] ^= 0x01  # one value of the first leaf: outside the head, inside the tail
    with pytest.raises(vdbflow.NanoVDBError, match=f"tail half of the checksum at byte {g + 12}"):
        vdbflow.open(bytes(data), checksum="strict")
    with pytest.warns(vdbflow.ChecksumWarning, match=f"tail half of the checksum at byte {g + 12}"):
        assert vdbflow.open(bytes(data)).leaf_count == vol.leaf_count  # the default reads it, warning
    assert vdbflow.open(bytes(data), checksum=False).leaf_count == vol.leaf_count
    assert vdbflow.open(bytes(data), leaves=[0]).leaf_count == 1  # a subset does not read every node
    half = bytearray(data)
    struct.pack_into("<I", half, g + 12, EMPTY32)  # tail not computed: the head alone is checked
    assert vdbflow.open(bytes(half)).leaf_count == vol.leaf_count


def test_head_not_computed_but_tail_checked(tmp_path):
    data = bytearray(file_bytes(tmp_path, {"g": sample_volume()}))
    g = len(data) - len(only_grid(bytes(data)))
    struct.pack_into("<I", data, g + 8, EMPTY32)
    vdbflow.open(bytes(data))
    data[g + 608] ^= 0x40  # the voxel size: in the head, which is not checked
    vdbflow.open(bytes(data))
    leaf = g + 672 + struct.unpack_from("<Q", data, g + 672)[0]
    data[leaf + 100] ^= 0x01
    with pytest.raises(vdbflow.NanoVDBError, match="tail half"):
        vdbflow.open(bytes(data), checksum="strict")


def test_head_catches_a_changed_header(tmp_path):
    data = bytearray(file_bytes(tmp_path, {"g": sample_volume()}))
    g = len(data) - len(only_grid(bytes(data)))
    data[g + 608] ^= 0x40
    with pytest.raises(vdbflow.NanoVDBError, match=f"head half of the checksum at byte {g + 8}.*bytes \\[{g + 16}, "):
        vdbflow.open(bytes(data), checksum="strict")
    with pytest.raises(vdbflow.NanoVDBError, match="head half"):
        vdbflow.open(bytes(data), bbox=((0, 0, 0), (3, 3, 3)), checksum="strict")  # checked for subsets too


def test_rules_after_32_6_cover_grid_tree_and_4k_blocks(tmp_path):
    vol = sample_volume()
    grid = bytearray(only_grid(file_bytes(tmp_path, {"g": vol})))
    struct.pack_into("<I", grid, 16, (32 << 21) | (7 << 10) | 0)
    new = with_checksum(bytes(grid), head_new(grid), tail_new(grid))
    same(vdbflow.open(new), vol)
    old_rules = with_checksum(bytes(grid), head_old(grid), tail_old(grid))
    with pytest.raises(vdbflow.NanoVDBError, match=r"NanoVDB 32\.7\.0.*bytes \[16, 736\)"):
        vdbflow.open(old_rules, checksum="strict")
    corrupt = bytearray(new)
    corrupt[-3000] ^= 0x10  # a leaf value near the end: in the last 4 KiB block
    with pytest.raises(vdbflow.NanoVDBError, match="in 4 KiB blocks 0x"):
        vdbflow.open(bytes(corrupt), checksum="strict")


def test_older_tail_variants_are_accepted(tmp_path):
    """Up to 32.6.0 the per-node CRC32s were kept as 8-byte uint_fast32_t by Linux host builds, and a
    32.6 development rule CRC'd the 4 KiB blocks from the first upper node."""
    vol = sample_volume()
    grid = only_grid(file_bytes(tmp_path, {"g": vol}))
    upper = 672 + struct.unpack_from("<Q", grid, 688)[0]
    for tail in (tail_old(grid, 8), blocked(grid[upper:])):
        same(vdbflow.open(with_checksum(grid, head_old(grid), tail)), vol)
    with pytest.raises(vdbflow.NanoVDBError, match="tail half"):
        vdbflow.open(with_checksum(grid, head_old(grid), tail_old(grid) ^ 1), checksum="strict")


def test_head_of_a_grid_whose_index_and_count_were_rewritten(tmp_path):
    """NanoVDB rewrites a grid's index and count when it moves between buffers: a head computed for
    the grid standing alone still verifies once the grid says it is 2 of 3."""
    vol = sample_volume()
    grid = bytearray(only_grid(file_bytes(tmp_path, {"g": vol})))
    assert struct.unpack_from("<II", grid, 24) == (0, 1)
    struct.pack_into("<II", grid, 24, 2, 3)
    same(vdbflow.open(bytes(grid)), vol)
    grid[300] ^= 1  # and a real change still fails
    with pytest.raises(vdbflow.NanoVDBError, match=r"head half.*as grid 0 of 1 0x"):
        vdbflow.open(bytes(grid), checksum="strict")


# ---------------------------------------------------------------------------------------------
# segments and payloads
@pytest.mark.parametrize("codecs", [("none", "zip", "blosc"), ("blosc",) * 4, ("zip",) * 3, ("none",) * 2])
def test_multi_segment_files(tmp_path, codecs):
    """Segments written one after another (as NanoVDB's writeGrids and fVDB do, one grid each) list
    and open every grid."""
    vols = [sample_volume(seed, f"g{seed}") for seed in range(len(codecs))]
    data = b"".join(
        file_bytes(tmp_path, {v.name: v}, c, f"{k}.nvdb") for k, (v, c) in enumerate(zip(vols, codecs, strict=True))
    )
    infos = vdbflow.list_grids(data)
    assert [(i.name, i.codec) for i in infos] == [(v.name, c) for v, c in zip(vols, codecs, strict=True)]
    for k, v in enumerate(vols):
        same(vdbflow.open(data, k), v)
        same(vdbflow.open(data, v.name), v)
    with pytest.raises(vdbflow.NanoVDBError, match=rf"grid index in \[0, {len(vols)}\)"):
        vdbflow.open(data, len(vols))


@pytest.mark.parametrize("codec", ["none", "zip", "blosc"])
def test_file_size_in_metadata_counts_the_whole_payload(tmp_path, codec):
    """NanoVDB skips from grid to grid by the metadata's file size: with a codec it includes the u64
    chunk sizes."""
    vols = [sample_volume(1, "a"), sample_volume(2, "b")]
    data = file_bytes(tmp_path, {v.name: v for v in vols}, codec)
    pos, file_sizes = 16, []
    for _ in range(2):
        file_sizes.append(struct.unpack_from("<Q", data, pos + 8)[0])
        pos += 176 + struct.unpack_from("<I", data, pos + 136)[0]
    assert pos + sum(file_sizes) == len(data)
    second = data[pos + file_sizes[0] :]  # grid "b" by skipping grid "a"
    if codec == "none":
        raw = second
    elif codec == "zip":
        raw = zlib.decompress(second[8:])
    else:
        raw = blosc.decompress(second[8:])
    same(vdbflow.open(raw), vols[1])


@pytest.mark.parametrize("codec", ["none", "zip", "blosc"])
def test_multi_grid_payload_of_nanovdb_before_32_6(tmp_path, codec):
    """NanoVDB before 32.6 (and fVDB built on it) wrote a handle of several grids as one payload under
    the first grid's metadata: every grid in it is listed and opens.  Each grid here keeps the head
    it had standing alone (0 of 1) while saying it is k of 3, and only the head half is computed."""
    vols = [sample_volume(seed, name) for seed, name in ((3, "x"), (4, "y"), (5, "z"))]
    grids = []
    for k, v in enumerate(vols):
        g = bytearray(only_grid(file_bytes(tmp_path, {v.name: v}, name=f"{k}.nvdb")))
        struct.pack_into("<I", g, 12, EMPTY32)
        struct.pack_into("<II", g, 24, k, 3)
        grids.append(bytes(g))
    data = segment([b"".join(grids)], codec, version=(32, 5, 0), names=["x"])
    infos = vdbflow.list_grids(data)
    assert [(i.name, i.codec, i.version) for i in infos] == [(n, codec, "32.5.0") for n in "xyz"]
    for k, v in enumerate(vols):
        same(vdbflow.open(data, k), v)
        same(vdbflow.open(data, v.name), v)
    # a payload whose grids do not fill it exactly is refused
    short = segment([b"".join(grids) + bytes(64)], codec, names=["x"])
    with pytest.raises(vdbflow.NanoVDBError, match="no further grid starts there"):
        vdbflow.list_grids(short)


def test_segment_built_here_matches_vdbflows_writer(tmp_path):
    """The test-side segment builder and vdbflow's writer agree, so the layouts above are NanoVDB's."""
    vol = sample_volume()
    for codec in ("none", "zip"):
        written = file_bytes(tmp_path, {"density": vol}, codec)
        grid = only_grid(file_bytes(tmp_path, {"density": vol}, name="plain.nvdb"))
        built = segment([grid], codec)
        assert built[:16] == written[:16] and built[16 + 168 :] == written[16 + 168 :]
