"""Hostile .nvdb files: offsets and counts chosen to overflow 64-bit sums, decompression bombs, and
corruptions whose errors must name the byte where the reader found them."""

from __future__ import annotations

import re
import struct
import tracemalloc
import zlib

import blosc
import numpy as np
import pytest

import vdbflow
from vdbflow.io.nanovdb import format as fmt

EMPTY = 0xFFFFFFFFFFFFFFFF


def grid_start(data: bytes) -> int:
    """Byte offset of the first grid of a single-segment, uncompressed file."""
    count = struct.unpack_from("<H", data, 12)[0]
    pos = 16
    for _ in range(count):
        pos += 176 + struct.unpack_from("<I", data, pos + 136)[0]
    return pos


def tree_offsets(data: bytes, g: int) -> tuple[int, int, int, int]:
    """Absolute byte offsets of the leaf, lower, upper and root arrays of the grid at ``g``."""
    t = g + 672
    return tuple(t + o for o in struct.unpack_from("<4Q", data, t))


def no_checksum(data: bytearray, g: int) -> bytearray:
    """Clears the grid's checksum, so that a patched node is judged by the node checks alone."""
    struct.pack_into("<Q", data, g + 8, EMPTY)
    return data


@pytest.fixture
def index_file(tmp_path) -> bytearray:
    """An OnIndex grid of two full leaves and one leaf with 3 active voxels, written by vdbflow."""
    full = np.argwhere(np.ones((16, 8, 8), bool))
    ijk = np.concatenate([full, [[40, 0, 0], [41, 2, 3], [47, 7, 7]]]).astype(np.int32)
    topo = vdbflow.Volume.from_active(ijk)
    topo.to_nvdb(str(tmp_path / "index.nvdb"))
    return bytearray((tmp_path / "index.nvdb").read_bytes())


def leaf_layout(data: bytes) -> tuple[int, int, int]:
    """(grid start, first leaf byte, value count) of an OnIndex file; leaves are 96 bytes."""
    g = grid_start(data)
    leaf = tree_offsets(data, g)[0]
    return g, leaf, struct.unpack_from("<Q", data, g + 656)[0]


# ---------------------------------------------------------------------------------------------
# item 1: offsets and counts checked without overflow
def test_index_file_reads_as_written(index_file):
    g, leaf, value_count = leaf_layout(index_file)
    topo = vdbflow.open(bytes(index_file))
    assert value_count == 512 * 2 + 3 + 1  # background at index 0
    firsts = [struct.unpack_from("<Q", index_file, leaf + n * 96 + 80)[0] for n in range(3)]
    assert firsts == [1, 513, 1025]
    np.testing.assert_array_equal(topo.leaf_offset, [0, 512, 1024])


@pytest.mark.parametrize("first", [(1 << 63) - 1, (1 << 63), EMPTY, (1 << 63) - 2, 1026, 0])
def test_leaf_value_offset_past_the_values_is_refused(index_file, first):
    """The last leaf holds 3 values: starting at 2**63 - 1 wraps ``first + 3`` round to a small
    negative int64, which a summed check accepted; 1026 overruns by one; 0 is the background."""
    g, leaf, value_count = leaf_layout(index_file)
    bad = no_checksum(index_file.copy(), g)
    struct.pack_into("<Q", bad, leaf + 2 * 96 + 80, first)
    with pytest.raises(vdbflow.NanoVDBError, match=rf"start at index {first} \(byte {leaf + 2 * 96 + 80}\)"):
        vdbflow.open(bytes(bad))


def test_leaf_value_offset_at_the_last_value_is_accepted(index_file):
    """The boundary itself: a leaf whose values end exactly at the value count still opens."""
    g, leaf, value_count = leaf_layout(index_file)
    ok = no_checksum(index_file.copy(), g)
    struct.pack_into("<Q", ok, g + 656, value_count + 10)
    struct.pack_into("<Q", ok, leaf + 2 * 96 + 80, value_count + 10 - 3)
    topo = vdbflow.open(bytes(ok))
    assert topo.leaf_offset[2] == value_count + 10 - 3 - 1 and topo.value_count == value_count + 10 - 1
    struct.pack_into("<Q", ok, leaf + 2 * 96 + 80, value_count + 10 - 2)
    with pytest.raises(vdbflow.NanoVDBError, match="start at index"):
        vdbflow.open(bytes(ok))


def test_absurd_value_count_is_refused(index_file):
    g, leaf, _ = leaf_layout(index_file)
    bad = no_checksum(index_file.copy(), g)
    struct.pack_into("<Q", bad, g + 656, EMPTY)
    with pytest.raises(vdbflow.NanoVDBError, match=f"value count {EMPTY} at byte {g + 656}"):
        vdbflow.open(bytes(bad))


@pytest.mark.parametrize("child", [(1 << 63) - 1, -(1 << 63), (1 << 63) - 100, -1, 1 << 40])
def test_child_offsets_that_would_wrap_are_refused(index_file, child):
    """Root, upper and lower child offsets near +-2**63: parent + offset would wrap round."""
    g, leaf, _ = leaf_layout(index_file)
    _, lower, upper, root = tree_offsets(index_file, g)
    lay = fmt.LAYOUTS[fmt.GRID_TYPE_ON_INDEX]
    # the first child entry of each level: a root tile, the upper and lower nodes' first child slots
    ucm = np.unpackbits(np.frombuffer(index_file, np.uint8, 4096, upper + 32 + 4096), bitorder="little")
    lcm = np.unpackbits(np.frombuffer(index_file, np.uint8, 512, lower + 32 + 512), bitorder="little")
    fields = [
        root + lay.root_size + 8,
        upper + lay.upper_off_table + int(np.argmax(ucm)) * lay.table_stride,
        lower + lay.lower_off_table + int(np.argmax(lcm)) * lay.table_stride,
    ]
    for field in fields:
        bad = no_checksum(index_file.copy(), g)
        struct.pack_into("<q", bad, field, child)
        with pytest.raises(vdbflow.NanoVDBError, match=f"offset read at byte {field}"):
            vdbflow.open(bytes(bad))


def test_node_array_offsets_and_counts_near_two_to_the_64(index_file):
    g, _, _ = leaf_layout(index_file)
    t = g + 672
    for at, form, value in (
        (t, "<Q", EMPTY),
        (t, "<Q", (1 << 63) - 1),
        (t + 24, "<Q", EMPTY - 600),
        (t + 32, "<I", 0xFFFFFFFF),
        (t + 36, "<I", 0xFFFFFFFF),
    ):
        bad = no_checksum(index_file.copy(), g)
        struct.pack_into(form, bad, at, value)
        with pytest.raises(vdbflow.NanoVDBError, match="byte"):
            vdbflow.open(bytes(bad))


def test_blind_data_offsets_that_would_wrap_are_refused(tmp_path):
    vol = vdbflow.Volume.from_voxels(np.array([[0, 0, 0], [1, 2, 3]]), np.array([1.0, 2.0], np.float32), 0.0)
    vol.blind_data = (vdbflow.BlindData("w", 0, 1, 1, 4, np.arange(8, dtype=np.float32).tobytes()),)
    vol.to_nvdb(str(tmp_path / "blind.nvdb"))
    data = bytearray((tmp_path / "blind.nvdb").read_bytes())
    g = grid_start(data)
    meta = g + struct.unpack_from("<q", data, g + 640)[0]
    assert vdbflow.open(bytes(data)).blind_data[0].data == np.arange(8, dtype=np.float32).tobytes()
    cases = [
        (g + 640, "<q", (1 << 63) - 1),
        (g + 640, "<q", -(1 << 63)),
        (g + 648, "<I", 0xFFFFFFFF),
        (meta, "<q", (1 << 63) - 1),
        (meta, "<q", -(1 << 63)),
        (meta + 8, "<Q", EMPTY),
        (meta + 8, "<Q", 1 << 62),
        (meta + 16, "<I", 0xFFFFFFFF),
    ]
    for at, form, value in cases:
        bad = no_checksum(data.copy(), g)
        struct.pack_into(form, bad, at, value)
        with pytest.raises(vdbflow.NanoVDBError, match="byte"):
            vdbflow.open(bytes(bad))


def test_segment_sizes_near_two_to_the_64(tmp_path):
    vol = vdbflow.Volume.from_voxels(np.array([[0, 0, 0]]), np.array([1.0], np.float32), 0.0)
    for codec in ("none", "zip"):
        vol.to_nvdb(str(tmp_path / "s.nvdb"), codec=codec)
        data = bytearray((tmp_path / "s.nvdb").read_bytes())
        payload = grid_start(data)
        for at, value in ((16, EMPTY), (24, EMPTY), (payload, EMPTY), (payload, (1 << 63) - 1)):
            if codec == "none" and at == payload:
                continue
            bad = data.copy()
            struct.pack_into("<Q", bad, at, value)
            with pytest.raises(vdbflow.NanoVDBError, match="byte"):
                vdbflow.open(bytes(bad))


# ---------------------------------------------------------------------------------------------
# item 7: decompression bombs
def compressed_file(tmp_path, codec: str) -> tuple[bytearray, int, int]:
    """A one-grid file of ``codec``: (bytes, byte of the first chunk's u64 size, declared grid size)."""
    vol = vdbflow.Volume.from_voxels(np.array([[0, 0, 0], [9, 9, 9]]), np.array([1.0, 2.0], np.float32), 0.0)
    vol.to_nvdb(str(tmp_path / f"c.{codec}.nvdb"), codec=codec)
    data = bytearray((tmp_path / f"c.{codec}.nvdb").read_bytes())
    return data, grid_start(data), struct.unpack_from("<Q", data, 16)[0]


def with_payload(data: bytearray, at: int, frames: list[bytes]) -> bytes:
    """The file with its grid payload (from byte ``at``) replaced by ``frames``, each after its u64 size."""
    return bytes(data[:at]) + b"".join(struct.pack("<Q", len(f)) + f for f in frames)


def peak_bytes(fn) -> int:
    """Peak traced allocation while ``fn`` runs (NumPy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        fn()
    except vdbflow.NanoVDBError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_zip_bomb_stops_at_the_declared_size(tmp_path):
    """20 MB of zeros (about 20 kB deflated) in a grid that declares a few hundred kB: the reader
    stops one byte past the declared size instead of inflating all of it."""
    data, at, declared = compressed_file(tmp_path, "zip")
    assert declared < 1 << 20
    bomb = with_payload(data, at, [zlib.compress(bytes(20 << 20), 9)])
    assert len(bomb) < 100_000
    with pytest.raises(
        vdbflow.NanoVDBError, match=f"zip payload at byte {at + 8} inflates to more than the declared {declared} bytes"
    ):
        vdbflow.open(bomb)
    assert peak_bytes(lambda: vdbflow.open(bomb)) < 4 * declared + (1 << 20)  # not 20 MB


def test_zip_payload_short_of_the_declared_size(tmp_path):
    data, at, declared = compressed_file(tmp_path, "zip")
    short = with_payload(data, at, [zlib.compress(bytes(declared - 1))])
    with pytest.raises(vdbflow.NanoVDBError, match=f"inflates to {declared - 1} bytes, expected {declared}"):
        vdbflow.open(short)
    truncated = with_payload(data, at, [zlib.compress(bytes(declared))[:-10]])
    with pytest.raises(vdbflow.NanoVDBError, match="ends mid-stream"):
        vdbflow.open(truncated)


def test_declared_size_beyond_what_deflate_can_reach(tmp_path):
    """A 1 kB payload declaring 2 GiB is refused before anything is allocated: deflate expands at
    most 1032:1."""
    data, at, _ = compressed_file(tmp_path, "zip")
    struct.pack_into("<Q", data, 16, 2 << 30)
    small = with_payload(data, at, [zlib.compress(bytes(1 << 20), 9)])
    with pytest.raises(vdbflow.NanoVDBError, match="cannot inflate to the declared 2147483648 bytes"):
        vdbflow.open(small)
    assert peak_bytes(lambda: vdbflow.open(small)) < 1 << 20


def test_blosc_bomb_refused_from_its_header(tmp_path):
    """A blosc frame of 20 MB of zeros declares 20 MB in its own header: refused before decompressing
    (and the reverse: a frame declaring less than the grid)."""
    data, at, declared = compressed_file(tmp_path, "blosc")
    bomb = with_payload(data, at, [blosc.compress(bytes(20 << 20), typesize=4)])
    with pytest.raises(vdbflow.NanoVDBError, match=f"declares {20 << 20} uncompressed bytes .*the {declared} bytes"):
        vdbflow.open(bomb)
    assert peak_bytes(lambda: vdbflow.open(bomb)) < 4 * declared + (1 << 20)
    short = with_payload(data, at, [blosc.compress(bytes(declared // 2), typesize=4)])
    with pytest.raises(vdbflow.NanoVDBError, match=f"compressed chunk size at byte {len(short)} needs 8 bytes"):
        vdbflow.open(short)  # the frame covers half the grid, and no second frame follows


def test_blosc_frames_that_lie_about_themselves(tmp_path):
    data, at, declared = compressed_file(tmp_path, "blosc")
    frame = bytearray(blosc.compress(bytes(20 << 20), typesize=4))
    struct.pack_into("<I", frame, 4, declared)  # header says the right size, the blocks say 20 MB
    with pytest.raises(vdbflow.NanoVDBError, match="byte"):
        vdbflow.open(with_payload(data, at, [bytes(frame)]))
    good = blosc.compress(bytes(declared), typesize=4)
    with pytest.raises(vdbflow.NanoVDBError, match="compressed bytes"):  # frame shorter than its header says
        vdbflow.open(with_payload(data, at, [good[:-4]]))
    with pytest.raises(vdbflow.NanoVDBError, match="16-byte header"):
        vdbflow.open(with_payload(data, at, [good[:10]]))


def test_blosc_grid_in_frames_of_any_size(tmp_path):
    """Warp writes a blosc grid as one frame, NanoVDB as frames of 1 GiB: frames of any sizes that add
    up to the grid read the same."""
    data, at, declared = compressed_file(tmp_path, "blosc")
    plain, _, _ = compressed_file(tmp_path, "none")  # the same grid, uncompressed
    grid = bytes(plain[grid_start(plain) :])
    assert len(grid) == declared
    cuts = [0, 100, 5000, declared - 7, declared]
    frames = [blosc.compress(grid[a:b], typesize=1) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    split = with_payload(data, at, frames)
    np.testing.assert_array_equal(vdbflow.open(split).leaf_values, vdbflow.open(bytes(data)).leaf_values)


def test_blosc_grids_in_chunks_of_at_most_one_gib(tmp_path, monkeypatch):
    """NanoVDB writes a blosc grid as frames of at most 1 GiB; with the chunk size made small, a grid
    spans many frames, each of which decompresses (python-blosc, independently) to its slice."""
    from vdbflow.io.nanovdb import write

    vol = vdbflow.Volume.from_voxels(
        np.argwhere(np.ones((8, 8, 24), bool)), np.arange(8 * 8 * 24, dtype=np.float32), -1.0
    )
    vol.to_nvdb(str(tmp_path / "plain.nvdb"))
    plain = (tmp_path / "plain.nvdb").read_bytes()
    grid = plain[grid_start(plain) :]
    monkeypatch.setattr(write, "BLOSC_MAX_CHUNK", 4096)
    vol.to_nvdb(str(tmp_path / "chunked.nvdb"), codec="blosc")
    data = (tmp_path / "chunked.nvdb").read_bytes()
    pos, parts = grid_start(data), []
    while pos < len(data):
        size = struct.unpack_from("<Q", data, pos)[0]
        parts.append(blosc.decompress(data[pos + 8 : pos + 8 + size]))
        pos += 8 + size
    assert len(parts) == -(-len(grid) // 4096) and b"".join(parts) == grid
    assert struct.unpack_from("<Q", data, 24)[0] == len(data) - grid_start(data)  # file size: all chunks
    back = vdbflow.open(data)
    np.testing.assert_array_equal(back.leaf_values, vol.leaf_values)
    with pytest.raises(vdbflow.NanoVDBError, match="byte"):  # one chunk missing
        vdbflow.open(data[: pos - 8 - size])


# ---------------------------------------------------------------------------------------------
# item 18: every error about a file names a byte
def walk_bases(tmp_path) -> dict[str, bytes]:
    """Files whose structure the walk corrupts: a value grid with tiles and blind data, an index grid,
    two grids in one segment, and zip and blosc copies."""
    ijk = np.concatenate([np.argwhere(np.ones((8, 8, 8), bool)), [[600, 5, 5], [-40, 9, 1000]]])
    tiles = (
        np.array([[256, 0, 0], [-4096, 4096, 0], [512, 8, 16]]),
        np.array([128, 4096, 8]),
        np.array([3.0, 4.0, 5.0], np.float32),
    )
    vol = vdbflow.Volume.from_voxels(ijk, np.arange(len(ijk), dtype=np.float32), -1.0, tiles=tiles, name="v")
    vol.blind_data = (vdbflow.BlindData("w", 0, 1, 1, 4, np.arange(5, dtype=np.float32).tobytes()),)
    topo = vdbflow.Volume.from_active(ijk)
    out = {}
    for name, grids, codec in (
        ("value", {"v": vol}, "none"),
        ("index", {"i": topo}, "none"),
        ("two", {"v": vol, "i": topo}, "none"),
        ("zip", {"v": vol}, "zip"),
        ("blosc", {"i": topo}, "blosc"),
    ):
        vdbflow.save(tmp_path / f"{name}.nvdb", grids, codec=codec)
        out[name] = (tmp_path / f"{name}.nvdb").read_bytes()
    return out


def structure_positions(data: bytes, grids: bool = True) -> list[tuple[int, tuple[int, ...]]]:
    """(position, values to write there as u32) over the file header and metadata, and (``grids``)
    every field of the grid header and tree, the root and its first tiles, the head of each node
    array (bboxes, flags, masks, index offsets) and the blind metadata."""
    wide, narrow = (0, 0x7FFFFFFF, 0xFFFFFFFF), (0, 0xFFFFFFFF)
    end = grid_start(data)
    spots = {p: wide for p in range(0, end - 3, 4)}
    g = end
    while grids and g + 736 <= len(data) and struct.unpack_from("<Q", data, g)[0] in fmt.GRID_MAGICS:
        leaf, lower, upper, root = tree_offsets(data, g)
        fields = [*range(g, g + 40, 4), g + 296, g + 300, *range(g + 560, g + 736, 4)]
        spots.update({p: wide for p in fields})
        spots.update({p: narrow for p in range(root, min(upper, root + 160), 4)})
        for node in (upper, lower, leaf):
            spots.update({p: narrow for p in range(node, node + 96, 4)})
        blind = struct.unpack_from("<q", data, g + 640)[0]
        if blind:
            spots.update({p: wide for p in range(g + blind, g + blind + 24, 4)})
        g += struct.unpack_from("<Q", data, g + 32)[0]
    return sorted((p, v) for p, v in spots.items() if p + 4 <= len(data))


def clear_checksums(data: bytearray) -> bytearray:
    """Every grid of an uncompressed file without its checksum, so that node checks are reached."""
    g = grid_start(data)
    while g + 736 <= len(data) and struct.unpack_from("<Q", data, g)[0] in fmt.GRID_MAGICS:
        struct.pack_into("<Q", data, g + 8, EMPTY)
        size = struct.unpack_from("<Q", data, g + 32)[0]
        if size == 0:
            break
        g += size
    return data


def open_every_grid(buf: bytes) -> None:
    for g in range(len(vdbflow.list_grids(buf))):
        vdbflow.open(buf, grid=g)


@pytest.mark.slow
def test_every_corruption_names_a_byte(tmp_path):
    """Header, metadata, tree, root and node fields overwritten with 0, 0x7FFFFFFF and 0xFFFFFFFF
    (checksums cleared, so every check is reached), and truncations at many lengths: each file opens
    or raises a NanoVDBError that names a byte offset (sampling what opens is the fuzz test's job)."""
    seen = {"loaded": 0, "error": 0}
    unnamed = []
    for name, base in walk_bases(tmp_path).items():
        cases = [base[:cut] for cut in range(0, len(base), max(1, len(base) // 97))]
        for pos, values in structure_positions(base, grids=name in ("value", "index")):
            for value in values:
                data = bytearray(base)
                struct.pack_into("<I", data, pos, value)
                cases.append(bytes(clear_checksums(data)) if pos >= grid_start(base) else bytes(data))
        for buf in cases:
            try:
                open_every_grid(buf)
                seen["loaded"] += 1
            except vdbflow.NanoVDBError as err:
                seen["error"] += 1
                if not re.search(r"\bbytes? \[?\d", str(err)):
                    unnamed.append(f"{name}: {err}")
    assert not unnamed, "\n".join(unnamed[:20])
    assert seen["error"] > 500 and seen["loaded"] > 100, seen
