"""A minimal OpenVDB .vdb writer, for tests only: the grid types pyopenvdb cannot make (double, int32,
int64, vec3d, vec3i).  Uncompressed (compression flags 0), every node value stored
(``NO_MASK_AND_ALL_VALS``), one grid per file, an AffineMap transform; file format 224 as OpenVDB 10
writes it.  Files it writes are checked by OpenVDB's own ``vdb_print`` in tests/test_openvdb.py."""

from __future__ import annotations

import struct

import numpy as np

MAGIC = 0x56444220


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<I", len(raw)) + raw


def _mask(bits: np.ndarray) -> bytes:
    return np.packbits(bits.astype(bool), bitorder="little").tobytes()


def _local(index: int, log2: int) -> tuple[int, int, int]:
    side = (1 << log2) - 1
    return index >> (2 * log2), (index >> log2) & side, index & side


def write_vdb(path, type_name: str, dtype, components: int, ijk, values, background, matrix=None) -> None:
    """One grid named ``grid`` of OpenVDB type ``type_name`` (``Tree_int32_5_4_3``...), active at the
    voxels ``ijk`` (n, 3) with ``values`` (n,) or (n, C); ``matrix`` the 4x4 index-to-world matrix
    (column vectors)."""
    dt = np.dtype(dtype).newbyteorder("<")
    ijk = np.asarray(ijk, np.int64)
    vals = np.asarray(values, dt).reshape(len(ijk), components)
    bg = np.asarray(background, dt).reshape(components)
    leaves: dict[tuple, dict[int, np.ndarray]] = {}
    for p, v in zip(ijk, vals, strict=True):
        origin = tuple(int(c) & ~7 for c in p)
        off = ((int(p[0]) & 7) << 6) | ((int(p[1]) & 7) << 3) | (int(p[2]) & 7)
        leaves.setdefault(origin, {})[off] = v
    tree: dict[tuple, dict[tuple, list[tuple]]] = {}
    for origin in sorted(leaves):
        upper = tuple(c & ~4095 for c in origin)
        lower = tuple(c & ~127 for c in origin)
        tree.setdefault(upper, {}).setdefault(lower, []).append(origin)

    def node_values(count: int) -> bytes:
        return bytes([6]) + np.tile(bg, (count, 1)).astype(dt).tobytes()

    topo = bytearray(struct.pack("<i", 1) + bg.tobytes() + struct.pack("<II", 0, len(tree)))
    order = []
    for upper in sorted(tree):
        topo += struct.pack("<3i", *upper)
        child = np.zeros(32**3, bool)
        for lower in tree[upper]:
            x, y, z = ((c - u) >> 7 for c, u in zip(lower, upper, strict=True))
            child[(x << 10) | (y << 5) | z] = True
        topo += _mask(child) + _mask(np.zeros(32**3, bool)) + node_values(32**3)
        for n in np.nonzero(child)[0]:
            lower = tuple(u + (c << 7) for u, c in zip(upper, _local(int(n), 5), strict=True))
            lchild = np.zeros(16**3, bool)
            for leaf in tree[upper][lower]:
                x, y, z = ((c - lo) >> 3 for c, lo in zip(leaf, lower, strict=True))
                lchild[(x << 8) | (y << 4) | z] = True
            topo += _mask(lchild) + _mask(np.zeros(16**3, bool)) + node_values(16**3)
            for m in np.nonzero(lchild)[0]:
                leaf = tuple(lo + (c << 3) for lo, c in zip(lower, _local(int(m), 4), strict=True))
                active = np.zeros(512, bool)
                active[list(leaves[leaf])] = True
                topo += _mask(active)
                order.append((leaf, active))
    blocks = bytearray()
    for leaf, active in order:
        data = np.tile(bg, (512, 1)).astype(dt)
        for off, v in leaves[leaf].items():
            data[off] = v
        blocks += _mask(active) + bytes([6]) + data.tobytes()
    m = np.eye(4) if matrix is None else np.asarray(matrix, np.float64)
    transform = _string("AffineMap") + m.T.astype("<f8").tobytes()
    meta = struct.pack("<I", 2) + _string("name") + _string("string") + _string("grid")
    meta += _string("class") + _string("string") + _string("unknown")
    head = struct.pack("<qIIIB", MAGIC, 224, 10, 0, 1) + b"0" * 8 + b"-" + b"0" * 4 + b"-" + b"0" * 4 + b"-"
    head += b"0" * 4 + b"-" + b"0" * 12 + struct.pack("<I", 0) + struct.pack("<i", 1)
    desc = _string("grid") + _string(type_name) + _string("")
    grid_pos = len(head) + len(desc) + 24
    body = struct.pack("<I", 0) + meta + transform + bytes(topo)
    block_pos = grid_pos + len(body)
    end_pos = block_pos + len(blocks)
    with open(path, "wb") as f:
        f.write(head + desc + struct.pack("<qqq", grid_pos, block_pos, end_pos) + body + bytes(blocks))
