"""NanoVDB's Half, Fp4, Fp8, Fp16 and FpN grids read as float32 volumes, dequantised as NanoVDB defines
it, and Mask / Boolean grids read as topologies.  The files are built here from the format's facts
(NanoVDB.h leaf layouts) by re-encoding the leaves and tile values of a Float grid."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

import vdbflow

EMPTY = 0xFFFFFFFFFFFFFFFF
FLOAT_LEAF, LOWER, UPPER = 2144, 33856, 270400  # Float node sizes; internal nodes are the same for every type here
GRID_TYPES = {"Half": 9, "Fp4": 13, "Fp8": 14, "Fp16": 15, "FpN": 16, "Mask": 8, "Boolean": 11}


def source_volume() -> vdbflow.Volume:
    """A Float volume with leaves of different value ranges (one constant) and tiles at every level."""
    rng = np.random.default_rng(7)
    blocks = [np.argwhere(rng.random((8, 8, 8)) < 0.5) + o for o in ([0, 0, 0], [8, 0, 0], [0, 16, 8], [-8, -8, 40])]
    ijk = np.concatenate(blocks)
    scale = np.repeat([1.0, 100.0, 0.0, 1e-3], [len(b) for b in blocks])
    values = (rng.standard_normal(len(ijk)) * scale + 3.0).astype(np.float32)
    tiles = (
        np.array([[256, 0, 0], [-4096, 4096, 0], [512, 8, 16]]),
        np.array([128, 4096, 8]),
        np.array([1.5, -2.25, 7.0], np.float32),
    )
    return vdbflow.Volume.from_voxels(ijk, values, 0.5, tiles=tiles, name="src")


def float_grid(tmp_path) -> bytes:
    source_volume().to_nvdb(str(tmp_path / "src.nvdb"))
    data = (tmp_path / "src.nvdb").read_bytes()
    return data[16 + 176 + struct.unpack_from("<I", data, 16 + 136)[0] :]


# ---------------------------------------------------------------------------------------------
# leaf encoders: Float leaf bytes -> (new leaf bytes, expected float32 values or None)
def quantiser(bits_of_leaf):
    """Fp4/8/16/N: minimum and quantum in float32, codes rounded; FpN takes its width per leaf."""

    def encode(leaf: bytes, k: int, fixed: int | None):
        v = np.frombuffer(leaf, "<f4", 512, 96)
        bits = fixed or bits_of_leaf(k)
        lo, hi = np.float32(v.min()), np.float32(v.max())
        quantum = np.float32((hi - lo) / np.float32((1 << bits) - 1))
        codes = np.zeros(512, np.int64) if quantum == 0 else np.clip(np.rint((v - lo) / quantum), 0, (1 << bits) - 1)
        codes = codes.astype(np.int64)
        expected = codes.astype(np.float32) * quantum + lo  # code * quantum + minimum, float32
        head = bytearray(leaf[:80])
        if fixed is None:  # FpN: log2 of the bit width in flags bits 5-7
            head[15] = (head[15] & 0x1F) | (int(np.log2(bits)) << 5)
        head += struct.pack("<ff4H", lo, quantum, 0, 0, 0, 0)
        if bits == 16:
            body = codes.astype("<u2").tobytes()
        elif bits == 8:
            body = codes.astype(np.uint8).tobytes()
        else:  # bit-packed, least significant bits first
            body = np.packbits(
                ((codes[:, None] >> np.arange(bits)) & 1).astype(np.uint8).ravel(), bitorder="little"
            ).tobytes()
        return bytes(head) + body, expected

    return encode


def half_leaf(leaf: bytes, k: int, fixed):
    v = np.frombuffer(leaf, "<f4", 512, 96).astype("<f2")
    head = leaf[:80] + struct.pack("<2e2f", 0, 0, 0, 0) + bytes(4)
    return head + v.tobytes(), v.astype(np.float32)


def mask_leaf(leaf: bytes, k: int, fixed):
    return leaf[:80] + bytes(16), None


def boolean_leaf(leaf: bytes, k: int, fixed):
    return leaf[:80] + leaf[16:80] + bytes(16), None  # value bits: here the active mask again


ENCODERS = {
    "Fp4": (quantiser(None), 4),
    "Fp8": (quantiser(None), 8),
    "Fp16": (quantiser(None), 16),
    "FpN": (quantiser(lambda k: (1, 2, 4, 8, 16)[k % 5]), None),
    "Half": (half_leaf, None),
    "Mask": (mask_leaf, None),
    "Boolean": (boolean_leaf, None),
}


def tile_value(kind: str, raw4: bytes) -> bytes:
    """A tile (or background) value field of the target type from a float32 one (4 bytes kept)."""
    v = np.frombuffer(raw4, "<f4")[0]
    if kind == "Half":
        return np.float16(v).astype("<f2").tobytes() + bytes(2)
    if kind in ("Mask", "Boolean"):
        return bytes([int(v != 0)]) + bytes(3)
    return raw4


def transcode(grid: bytes, kind: str, bad_fpn_width: bool = False) -> tuple[bytes, list]:
    """``grid`` (a Float grid) as a ``kind`` grid: leaves re-encoded and packed, lower-node child offsets
    moved, tile and background values converted; the full checksum by the 32.6.0 rules is computed
    here over the nodes as built.  Returns the grid and the expected float32 values per leaf."""
    encode, fixed = ENCODERS[kind]
    g = bytearray(grid)
    t = 672
    leaf_off, lower_off, upper_off, root_off = struct.unpack_from("<4Q", g, t)
    n_leaf, n_lower, n_upper = struct.unpack_from("<3I", g, t + 32)
    start = t + leaf_off
    new_leaves, expected = [], []
    for k in range(n_leaf):
        leaf, want = encode(bytes(g[start + k * FLOAT_LEAF : start + (k + 1) * FLOAT_LEAF]), k, fixed)
        new_leaves.append(leaf)
        expected.append(want)
    if bad_fpn_width:
        new_leaves[0] = new_leaves[0][:15] + bytes([new_leaves[0][15] | 0xE0]) + new_leaves[0][16:]
    where = np.concatenate([[0], np.cumsum([len(x) for x in new_leaves])])
    # lower nodes: child offsets to the moved leaves, tile values converted
    for j in range(n_lower):
        node = t + lower_off + j * LOWER
        child = np.unpackbits(np.frombuffer(bytes(g[node + 544 : node + 1056]), np.uint8), bitorder="little")
        for n in range(4096):
            slot = node + 1088 + 8 * n
            if child[n]:
                k = (node + struct.unpack_from("<q", g, slot)[0] - start) // FLOAT_LEAF
                struct.pack_into("<q", g, slot, start + int(where[k]) - node)
            else:
                g[slot : slot + 4] = tile_value(kind, bytes(g[slot : slot + 4]))
    for u in range(n_upper):
        node = t + upper_off + u * UPPER
        child = np.unpackbits(np.frombuffer(bytes(g[node + 4128 : node + 8224]), np.uint8), bitorder="little")
        for n in np.nonzero(child == 0)[0]:
            slot = node + 8256 + 8 * int(n)
            g[slot : slot + 4] = tile_value(kind, bytes(g[slot : slot + 4]))
    root = t + root_off
    g[root + 28 : root + 32] = tile_value(kind, bytes(g[root + 28 : root + 32]))
    for e in range(struct.unpack_from("<I", g, root + 24)[0]):
        tile = root + 64 + 32 * e
        if struct.unpack_from("<q", g, tile + 8)[0] == 0:
            g[tile + 20 : tile + 24] = tile_value(kind, bytes(g[tile + 20 : tile + 24]))
    body = b"".join(new_leaves)
    size = (start + len(body) + 31) // 32 * 32
    out = bytearray(bytes(g[:start]) + body + bytes(size - start - len(body)))
    struct.pack_into("<Q", out, 32, size)
    struct.pack_into("<I", out, 636, GRID_TYPES[kind])
    struct.pack_into("<qI", out, 640, 0, 0)
    # checksum: head over [16, first upper node), tail over the CRC32s of every node as built
    upper = t + upper_off
    nodes = [out[upper + u * UPPER : upper + (u + 1) * UPPER] for u in range(n_upper)]
    nodes += [out[t + lower_off + j * LOWER : t + lower_off + (j + 1) * LOWER] for j in range(n_lower)]
    nodes += new_leaves
    tail = zlib.crc32(b"".join(zlib.crc32(bytes(n)).to_bytes(4, "little") for n in nodes))
    struct.pack_into("<II", out, 8, zlib.crc32(bytes(out[16:upper])), tail)
    return bytes(out), expected


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["Fp4", "Fp8", "Fp16", "FpN", "Half"])
def test_quantised_and_half_grids_read_as_float32(tmp_path, kind):
    src = source_volume()
    built, expected = transcode(float_grid(tmp_path), kind)
    assert vdbflow.list_grids(built)[0].grid_type == kind
    vol = vdbflow.open(built)
    assert isinstance(vol, vdbflow.Volume) and vol.value_type.name == "float32"
    np.testing.assert_array_equal(vol.topology.leaf_origins, src.topology.leaf_origins)
    want = np.concatenate(expected).reshape(-1, 512, 1)
    np.testing.assert_array_equal(vol.leaf_values, want)
    if kind != "Half":  # quantised with at least 1 bit: within half a quantum of the source values
        err = np.abs(vol.leaf_values - src.leaf_values).reshape(-1, 512).max(axis=1)
        assert np.all(err <= np.ptp(src.leaf_values.reshape(-1, 512), axis=1) / 2 + 1e-3)
    # tiles and background: float32 (Half: rounded through binary16)
    rounding = np.float16 if kind == "Half" else np.float32

    def tiles_of(v: vdbflow.Volume) -> dict:
        t = v.topology
        return {
            (tuple(o), int(n)): float(x)
            for o, n, x in zip(t.tile_origins, t.tile_sizes, v._tile_values.ravel(), strict=True)
        }

    assert tiles_of(vol) == {key: float(rounding(x)) for key, x in tiles_of(src).items()}
    # sampling equals a float32 volume built from the expected values of every leaf voxel (inactive
    # ones included: samplers read a leaf's values whatever their state)
    local = np.argwhere(np.ones((8, 8, 8), bool))  # voxel (i, j, k) of a leaf at i * 64 + j * 8 + k
    every = (src.topology.leaf_origins[:, None, :] + local[None]).reshape(-1, 3)
    tiles = (src.topology.tile_origins, src.topology.tile_sizes, src._tile_values.ravel().astype(rounding))
    ref = vdbflow.Volume.from_voxels(every, want.ravel(), np.float32(0.5), tiles=tiles)
    act = src.active_voxels()
    rng = np.random.default_rng(1)
    pts = np.concatenate([act + rng.uniform(-0.7, 0.7, act.shape), rng.uniform(-20, 600, (300, 3))])
    for mode in ("closest", "linear"):
        for a, b in zip(
            vdbflow.sample_grad_arrays(vol, pts, mode), vdbflow.sample_grad_arrays(ref, pts, mode), strict=True
        ):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ["Mask", "Boolean"])
def test_mask_and_boolean_grids_read_as_topologies(tmp_path, kind):
    src = source_volume()
    built, _ = transcode(float_grid(tmp_path), kind)
    topo = vdbflow.open(built)
    assert isinstance(topo, vdbflow.Topology)
    np.testing.assert_array_equal(topo.active_voxels(), src.active_voxels())
    got = sorted(zip(map(tuple, topo.tile_origins), topo.tile_sizes, strict=True))
    assert got == sorted(zip(map(tuple, src.topology.tile_origins), src.topology.tile_sizes, strict=True))


def test_quantised_grid_checksums_and_bad_widths(tmp_path):
    built, _ = transcode(float_grid(tmp_path), "FpN")
    corrupt = bytearray(built)
    corrupt[-200] ^= 1  # a code of the last leaf
    with pytest.raises(vdbflow.NanoVDBError, match="tail half"):
        vdbflow.open(bytes(corrupt), checksum="strict")
    with pytest.warns(vdbflow.ChecksumWarning, match=r"tail half.*FpN leaves' first 96 bytes"):
        vdbflow.open(bytes(corrupt))
    vdbflow.open(bytes(corrupt), checksum=False)
    bad, _ = transcode(float_grid(tmp_path), "FpN", bad_fpn_width=True)
    with pytest.raises(vdbflow.NanoVDBError, match=r"bit width of 2\^7 \(flags at byte \d+\)"):
        vdbflow.open(bad, checksum=False)


def test_a_job_plans_a_quantised_grid_as_the_float32_it_reads(tmp_path):
    """The job plan takes a grid's value type from the listing (GridInfo.value_type), not from its type
    name: an Fp16 grid is float32 data, sampled with linear and sized 4 bytes a component."""
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.plan import plan_job

    built, _ = transcode(float_grid(tmp_path), "Fp16")
    path = tmp_path / "fp16.nvdb"
    path.write_bytes(built)
    info = vdbflow.list_grids(str(path))[0]
    assert info.grid_type == "Fp16" and info.value_type == vdbflow.VALUE_TYPES["float32"]
    text = (
        f"volume: {{path: {path}}}\npoints: {{kind: random, count: 1000, space: index}}\n"
        f"sampling: {{mode: linear, outputs: [value, jacobian]}}\noutput: {{path: {tmp_path / 'out.zarr'}}}\n"
    )
    plan = plan_job(load_config(text=text), dry_run=True)
    (grid,) = plan.grids
    assert grid.grid_type == "Fp16" and grid.value_type.name == "float32" and grid.components == 1
    assert plan.bytes_per_point == 8 + 3 * 8 + 4 + 3 * 4  # point index and coordinates, value, Jacobian
