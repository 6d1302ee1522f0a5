"""The grid header and the bounds-checked readers every part of the reader builds on: size limits,
``need`` and ``unpack`` (a read past the buffer's end is a :class:`NanoVDBError` naming the byte), the
GridData and TreeData fields of a grid, and the node layout of its grid type."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from vdbflow.errors import NanoVDBError
from vdbflow.io.nanovdb import format as fmt

MAX_GRID_BYTES = 1 << 40  # refuse absurd sizes before allocating anything
MAX_VALUE_COUNT = 1 << 48  # index grids: values an external array may hold (keeps index sums far from 2**63)
MAX_BLIND_COUNT = 1 << 16  # blind data records a grid may have
MAX_NAME_BYTES = 1 << 20  # a grid name in a file's metadata
EMPTY_CHECKSUM = 0xFFFFFFFFFFFFFFFF  # "no checksum" (NanoVDB's Checksum::EMPTY64)


# small readers with bounds checks
def need(buf: np.ndarray, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(buf):
        raise NanoVDBError(f"{what} at byte {offset} needs {size} bytes, but the buffer ends at byte {len(buf)}")


def unpack(buf: np.ndarray, offset: int, form: str, what: str) -> tuple:
    need(buf, offset, struct.calcsize(form), what)
    return struct.unpack_from(form, buf, offset)


def grid_header(buf: np.ndarray, base: int) -> dict[str, Any]:
    need(buf, base, fmt.GRID_SIZE + fmt.TREE_SIZE, "grid header")
    magic, checksum, version, flags, gindex, gcount, gsize = unpack(buf, base, fmt.GRID_HEAD_FORMAT, "grid header")
    if magic not in fmt.GRID_MAGICS:
        raise NanoVDBError(f"expected a NanoVDB grid magic at byte {base}, found 0x{magic:016x}")
    major, minor, patch = fmt.version_parts(version)
    if major != fmt.MAJOR_VERSION:
        raise NanoVDBError(
            f"expected NanoVDB major version 32 at byte {base + fmt.GRID_OFF_VERSION}, found {major}.{minor}.{patch}"
        )
    if gsize < fmt.GRID_SIZE + fmt.TREE_SIZE or gsize > MAX_GRID_BYTES:
        raise NanoVDBError(f"grid size {gsize} at byte {base + fmt.GRID_OFF_GRID_SIZE} is not a plausible grid size")
    need(buf, base, gsize, "grid")
    raw_name = bytes(buf[base + fmt.GRID_OFF_NAME : base + fmt.GRID_OFF_NAME + fmt.GRID_NAME_SIZE])
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", "replace")
    mat = np.array(unpack(buf, base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_MATD, "<9d", "map"))
    vec = np.array(unpack(buf, base + fmt.GRID_OFF_MAP + fmt.MAP_OFF_VECD, "<3d", "map"))
    world_bbox = unpack(buf, base + fmt.GRID_OFF_WORLD_BBOX, "<6d", "world bbox")
    voxel_size = unpack(buf, base + fmt.GRID_OFF_VOXEL_SIZE, "<3d", "voxel size")
    gclass, gtype = unpack(buf, base + fmt.GRID_OFF_CLASS, "<II", "grid class and type")
    blind_offset, blind_count = unpack(buf, base + fmt.GRID_OFF_BLIND_OFFSET, "<qI", "blind metadata")
    data1 = unpack(buf, base + fmt.GRID_OFF_DATA1, "<Q", "grid data1")[0]
    t = base + fmt.GRID_SIZE
    node_offsets = unpack(buf, t + fmt.TREE_OFF_NODE_OFFSETS, "<4Q", "tree node offsets")
    node_counts = unpack(buf, t + fmt.TREE_OFF_NODE_COUNTS, "<3I", "tree node counts")
    tile_counts = unpack(buf, t + fmt.TREE_OFF_TILE_COUNTS, "<3I", "tree tile counts")
    voxel_count = unpack(buf, t + fmt.TREE_OFF_VOXEL_COUNT, "<Q", "tree voxel count")[0]
    index_to_world = np.eye(4)
    index_to_world[:3, :3] = mat.reshape(3, 3)
    index_to_world[:3, 3] = vec
    return dict(
        magic=magic,
        checksum=checksum,
        version=version,
        flags=flags,
        grid_index=gindex,
        grid_count=gcount,
        grid_size=gsize,
        name=name,
        index_to_world=index_to_world,
        world_bbox=world_bbox,
        voxel_size=voxel_size,
        grid_class=gclass,
        grid_type=gtype,
        blind_offset=blind_offset,
        blind_count=blind_count,
        value_count=data1,
        tree=t,
        node_offsets=node_offsets,
        node_counts=node_counts,
        tile_counts=tile_counts,
        voxel_count=voxel_count,
    )


def layout_of(header: dict[str, Any], base: int) -> fmt.GridLayout:
    gtype = header["grid_type"]
    layout = fmt.LAYOUTS.get(gtype)
    if layout is None:
        name = fmt.GRID_TYPE_NAMES.get(gtype, f"unknown type {gtype}")
        raise NanoVDBError(
            f"grid {header['name']!r} at byte {base} has value type {name} (byte {base + fmt.GRID_OFF_TYPE}), "
            f"which vdbflow does not read "
            f"(supported: Float, Double, Int32, Int64, UInt32, Vec3f, Vec3d, Vec4f, Vec4d, Half, Fp4, Fp8, Fp16, "
            f"FpN, Index, OnIndex, Mask, Boolean)"
        )
    return layout
