"""NanoVDB binary format constants (major version 32): the single source of layout facts.

Offsets are in bytes from the start of the structure they belong to.  Node layouts per grid type
follow NanoVDB's grid type table (root background, root size, table stride, root tile value offset,
root tile size, upper/lower table offsets and sizes, leaf table offset and size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAGIC_NUMBER = 0x304244566F6E614E  # "NanoVDB0": legacy magic of grids and files
MAGIC_GRID = 0x314244566F6E614E  # "NanoVDB1": a grid
MAGIC_FILE = 0x324244566F6E614E  # "NanoVDB2": a file segment
GRID_MAGICS = (MAGIC_NUMBER, MAGIC_GRID)
MAGIC_SIZE = 8  # a u64 at byte 0 of grids and file segments
FILE_MAGICS = (MAGIC_NUMBER, MAGIC_FILE)

MAJOR_VERSION = 32
SUPPORTED_MINOR = range(3, 10)  # 32.3 .. 32.9


def pack_version(major: int, minor: int, patch: int) -> int:
    """NanoVDB's version word: major in the top 11 bits, minor in the middle 11, patch in the low 10."""
    return (major << 21) | (minor << 10) | patch


# Checksums (64 bits at grid byte 8): CRC32 "head" in the low half, CRC32 "tail" in the high half; a half
# of 0xFFFFFFFF was not computed, all 64 bits set means no checksum.  Up to and including 32.6.0 the head
# covers bytes [16, first upper node) (grid, tree, root, root tiles) and the tail the nodes, one CRC32 per
# node (upper, lower, leaf, in memory order) CRC'd together; later versions: head bytes [16, 736) (grid and
# tree), tail the CRC32 of the CRC32s of the 4 KiB blocks of [736, grid size) (the last block takes the rest).
CHECKSUM_OLD_RULES_LAST = (32 << 21) | (6 << 10) | 0
CRC_BLOCK_SIZE = 4096
EMPTY_CRC32 = 0xFFFFFFFF


def version_parts(version: int) -> tuple[int, int, int]:
    return version >> 21, (version >> 10) & 0x7FF, version & 0x3FF


# What each NanoVDB release writes (NanoVDB.h, io/IO.h and GridChecksum.h of OpenVDB 10.0 - 13.0): node
# layouts of the value grids vdbflow writes are the same in all of them; the magics, the version word,
# GridData::mData2 and the checksum's tail differ, and 32.4 knows neither OnIndex grids nor the tensor class.
CHECKSUM_NODES_U64 = "per-node CRC32s as 8-byte uint_fast32_t"  # 32.4 host builds on Linux
CHECKSUM_NODES_U32 = "per-node CRC32s as u32"  # 32.6.0
CHECKSUM_BLOCKS = "4 KiB blocks after the tree"  # after 32.6.0: head [16, 736), tail over [736, end)


@dataclass(frozen=True)
class WriteFormat:
    """The layout facts of one NanoVDB version that a writer must follow."""

    name: str  # "32.4"
    version: int  # the packed version word written (file header, metadata, grids)
    file_magic: int
    grid_magic: int
    grid_data2: int  # GridData::mData2 of a value grid (32.7.0 keeps the grid magic there)
    checksum: str  # one of the CHECKSUM_* rules
    grid_type_end: int  # grid types below this exist in the version (OnIndex is 20)
    grid_class_end: int  # grid classes below this exist (the tensor grid class is 9)
    release: str  # the OpenVDB release that ships it
    # 32.4's reader walks a grid buffer from its first grid to the grid index it wants, so each grid of a
    # file says it stands alone (0 of 1), as 32.4 writes one handle per grid; later readers rewrite index
    # and count themselves, and their writers number a handle's grids n of N
    grids_stand_alone: bool = False


WRITE_FORMATS = {
    f.name: f
    for f in (
        WriteFormat(
            "32.4", pack_version(32, 4, 2), MAGIC_NUMBER, MAGIC_NUMBER, 0, CHECKSUM_NODES_U64, 20, 9, "10.0", True
        ),
        WriteFormat("32.6", pack_version(32, 6, 0), MAGIC_NUMBER, MAGIC_NUMBER, 0, CHECKSUM_NODES_U32, 26, 10, "11.0"),
        WriteFormat(
            "32.7", pack_version(32, 7, 0), MAGIC_NUMBER, MAGIC_NUMBER, MAGIC_GRID, CHECKSUM_BLOCKS, 27, 10, "12.0"
        ),
        WriteFormat("32.8", pack_version(32, 8, 0), MAGIC_FILE, MAGIC_GRID, 0, CHECKSUM_BLOCKS, 27, 10, "12.1"),
        WriteFormat("32.9", pack_version(32, 9, 0), MAGIC_FILE, MAGIC_GRID, 0, CHECKSUM_BLOCKS, 27, 10, "13.0"),
    )
}
# The default: the oldest layout, which every NanoVDB reader since OpenVDB 10 (Debian/Ubuntu's tools, Houdini
# 20), Warp and vdbflow open; files holding OnIndex grids (unknown to 32.4) take the oldest version that has them.
DEFAULT_WRITE_VERSION = "32.4"
DEFAULT_INDEX_WRITE_VERSION = "32.6"


# file segment: a header, then per grid its metadata (176 bytes) and name, then the grids' payloads
FILE_HEADER_SIZE = 16  # magic u64, version u32, grid count u16, codec u16
FILE_HEADER_FORMAT = "<QIHH"
FILE_OFF_MAGIC, FILE_OFF_VERSION, FILE_OFF_GRID_COUNT, FILE_OFF_CODEC = 0, 8, 12, 14
FILE_METADATA_SIZE = 176
# grid size, file size, name key, voxel count (u64 each), grid type, class (u32), world bbox (6 f64), index
# bbox (6 i32), voxel size (3 f64), name size (u32) at 136, node counts (4 u32), tile counts (3 u32), codec,
# padding (u16 each), version (u32)
FILE_METADATA_FORMAT = "<QQQQII6d6i3dI4I3IHHI"
FILE_META_OFF_NAME_SIZE = 136
# a compressed payload: chunks, each after its size (u64); zip one chunk per grid, blosc one per GiB or less
CHUNK_SIZE_BYTES = 8
# a c-blosc 1 frame's header: version, versionlz, flags, typesize (u8 each), nbytes, blocksize, cbytes (u32)
BLOSC_HEADER_SIZE = 16
BLOSC_OFF_NBYTES, BLOSC_OFF_CBYTES = 4, 12
CODECS = {0: "none", 1: "zip", 2: "blosc"}
CODEC_IDS = {name: code for code, name in CODECS.items()}

# GridData
GRID_SIZE = 672
DATA_ALIGNMENT = 32  # grids, and blind data inside a grid, start and end on 32-byte boundaries
GRID_OFF_MAGIC, GRID_OFF_CHECKSUM, GRID_OFF_VERSION, GRID_OFF_FLAGS = 0, 8, 16, 20
GRID_OFF_INDEX, GRID_OFF_COUNT, GRID_OFF_GRID_SIZE, GRID_OFF_NAME = 24, 28, 32, 40
GRID_NAME_SIZE = 256
GRID_OFF_MAP = 296
MAP_OFF_MATF, MAP_OFF_INVMATF, MAP_OFF_VECF, MAP_OFF_TAPERF = 0, 36, 72, 84
MAP_OFF_MATD, MAP_OFF_INVMATD, MAP_OFF_VECD, MAP_OFF_TAPERD = 88, 160, 232, 256
GRID_OFF_WORLD_BBOX, GRID_OFF_VOXEL_SIZE, GRID_OFF_CLASS, GRID_OFF_TYPE = 560, 608, 632, 636
GRID_OFF_BLIND_OFFSET, GRID_OFF_BLIND_COUNT = 640, 648
GRID_OFF_DATA0, GRID_OFF_DATA1, GRID_OFF_DATA2 = 652, 656, 664
GRID_HEAD_FORMAT = "<QQIIIIQ"  # magic, checksum, version, flags, grid index, grid count, grid size
GRID_FLAG_HAS_BBOX, GRID_FLAG_BREADTH_FIRST = 2, 32
# an empty grid's boxes, as NanoVDB writes them: CoordBBox() (INT32_MAX.., INT32_MIN..) and BBox<Vec3d>()
EMPTY_INDEX_BBOX = ((2**31 - 1,) * 3, (-(2**31),) * 3)
EMPTY_WORLD_BBOX = ((float(np.finfo(np.float64).max),) * 3, (-float(np.finfo(np.float64).max),) * 3)
NAME_HASH_PRIME = 67  # io::stringHash: hash = hash * 67 + byte + (hash >> 56), over the name's bytes
GRID_CLASS_UNKNOWN, GRID_CLASS_INDEX = 0, 8
# the checksum's head and the node CRCs start after the magic and the checksum itself
CHECKSUM_HEAD_START = GRID_OFF_VERSION

# TreeData, right after the grid
TREE_SIZE = 64  # node offsets u64[4] (leaf, lower, upper, root), node counts u32[3], tile counts u32[3], voxels u64
TREE_FORMAT = "<4Q3I3IQ"
TREE_OFF_NODE_OFFSETS, TREE_OFF_NODE_COUNTS, TREE_OFF_TILE_COUNTS, TREE_OFF_VOXEL_COUNT = 0, 32, 44, 56
TREE_OFF_LEAF_COUNT, TREE_OFF_LOWER_COUNT, TREE_OFF_UPPER_COUNT = 32, 36, 40

# RootData: bbox (6 x i32), table size u32 at 24, then background ...; a root tile: key u64, child i64, state u32
ROOT_OFF_BBOX, ROOT_OFF_TABLE_SIZE = 0, 24
ROOT_TILE_OFF_KEY, ROOT_TILE_OFF_CHILD, ROOT_TILE_OFF_STATE = 0, 8, 16
ROOT_KEY_BITS = 21  # a root key packs i, j, k >> 12 (as unsigned) in 21 bits each: k | j << 21 | i << 42

# node extents: voxels per axis (log2) of a leaf, a lower node and an upper node
LEAF_LOG2, LOWER_LOG2, UPPER_LOG2 = 3, 7, 12
LEAF_DIM, LOWER_DIM, UPPER_DIM = 1 << LEAF_LOG2, 1 << LOWER_LOG2, 1 << UPPER_LOG2  # 8, 128, 4096

# internal nodes: bbox min and max (3 x i32 each), flags u64 at 24, value mask at 32, child mask after it, then
# (at the layout's table offset) one table entry per child: a child offset (i64) or a tile value
NODE_OFF_BBOX_MIN, NODE_OFF_BBOX_MAX = 0, 12
NODE_OFF_FLAGS = 24  # u64: bit 1 set when the node holds active values (its bbox is theirs), bit 0 when it holds none
NODE_FLAG_EMPTY, NODE_FLAG_HAS_BBOX = 1, 2
UPPER_DIM_LOG2, LOWER_DIM_LOG2 = 5, 4  # children per axis: 32 and 16
UPPER_CHILDREN, LOWER_CHILDREN = 1 << 3 * UPPER_DIM_LOG2, 1 << 3 * LOWER_DIM_LOG2  # 32768 and 4096
UPPER_MASK_SIZE, LOWER_MASK_SIZE = UPPER_CHILDREN // 8, LOWER_CHILDREN // 8  # bytes: 4096 and 512
UPPER_OFF_VALUE_MASK, UPPER_OFF_CHILD_MASK = 32, 32 + UPPER_MASK_SIZE
LOWER_OFF_VALUE_MASK, LOWER_OFF_CHILD_MASK = 32, 32 + LOWER_MASK_SIZE
TABLE_CHILD_SIZE = 8  # a table entry's child offset: i64 from the node's own address
# leaves: bbox min (3 x i32), bbox dif (3 x u8) at 12, flags (u8) at 15, value mask (64 bytes) at 16
LEAF_VOXELS = 1 << 3 * LEAF_LOG2  # 512
LEAF_MASK_SIZE = LEAF_VOXELS // 8  # 64 bytes
LEAF_OFF_BBOX_MIN, LEAF_OFF_BBOX_DIF, LEAF_OFF_FLAGS, LEAF_OFF_VALUE_MASK = 0, 12, 15, 16
LEAF_FLAG_HAS_BBOX = 2  # a leaf's flags: bit 1 set when it has active voxels (bbox min and dif are theirs)
INDEX_LEAF_OFF_OFFSET, INDEX_LEAF_OFF_PREFIX = 80, 88  # first value index (u64), prefix sums (u64)
INDEX_PREFIX_BITS = 9  # prefix sums of the active voxels of mask words 1..7, 9 bits each

GRID_CLASSES = {
    0: "unknown",
    1: "level set",
    2: "fog volume",
    3: "staggered",
    4: "point index",
    5: "point data",
    6: "topology",
    7: "voxel volume",
    8: "index grid",
    9: "tensor grid",
}

GRID_TYPE_NAMES = {
    0: "Unknown",
    1: "Float",
    2: "Double",
    3: "Int16",
    4: "Int32",
    5: "Int64",
    6: "Vec3f",
    7: "Vec3d",
    8: "Mask",
    9: "Half",
    10: "UInt32",
    11: "Boolean",
    12: "RGBA8",
    13: "Fp4",
    14: "Fp8",
    15: "Fp16",
    16: "FpN",
    17: "Vec4f",
    18: "Vec4d",
    19: "Index",
    20: "OnIndex",
    21: "IndexMask",
    22: "OnIndexMask",
    23: "PointIndex",
    24: "Vec3u8",
    25: "Vec3u16",
    26: "UInt8",
}


@dataclass(frozen=True)
class GridLayout:
    """Byte layout of one grid type's nodes."""

    grid_type: int
    value_type: str | None  # vdbflow value type name; None for index grids
    dtype: np.dtype  # scalar dtype of values (uint64 for index grids)
    components: int
    root_off_background: int
    root_size: int
    table_stride: int
    root_tile_off_value: int
    root_tile_size: int
    upper_off_table: int
    upper_size: int
    lower_off_table: int
    lower_size: int
    leaf_off_table: int
    leaf_size: int  # FpN: the fixed part; each leaf is followed by 64 x its bit width bytes of codes
    leaf_kind: str = "plain"  # plain, index, half, fp4, fp8, fp16, fpn, mask (Mask and Boolean)

    @property
    def is_index(self) -> bool:
        return self.leaf_kind == "index"

    @property
    def is_topology(self) -> bool:
        """Mask and Boolean grids: read as a Topology, without values."""
        return self.leaf_kind == "mask"

    @property
    def is_quantised(self) -> bool:
        """Half and Fp4/8/16/N grids: leaf values decoded to float32 (copied, not mapped)."""
        return self.leaf_kind in ("half", "fp4", "fp8", "fp16", "fpn")

    @property
    def value_size(self) -> int:
        return self.dtype.itemsize * self.components


def _layout(gt, vt, dtype, c, *numbers, kind="plain"):
    return GridLayout(gt, vt, np.dtype(dtype), c, *numbers, leaf_kind=kind)


LAYOUTS: dict[int, GridLayout] = {
    lay.grid_type: lay
    for lay in (
        _layout(1, "float32", "<f4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 2144),
        _layout(2, "float64", "<f8", 1, 32, 96, 8, 24, 32, 8256, 270400, 1088, 33856, 128, 4224),
        _layout(4, "int32", "<i4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 2144),
        _layout(5, "int64", "<i8", 1, 32, 96, 8, 24, 32, 8256, 270400, 1088, 33856, 128, 4224),
        _layout(6, "vec3f", "<f4", 3, 28, 96, 16, 20, 32, 8256, 532544, 1088, 66624, 128, 6272),
        _layout(7, "vec3d", "<f8", 3, 32, 128, 24, 24, 64, 8288, 794720, 1120, 99424, 160, 12448),
        _layout(10, "uint32", "<u4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 2144),
        _layout(17, "vec4f", "<f4", 4, 28, 96, 16, 20, 64, 8288, 532576, 1120, 66656, 128, 8320),
        _layout(18, "vec4d", "<f8", 4, 32, 160, 32, 24, 64, 8320, 1056896, 1152, 132224, 160, 16544),
        _layout(19, None, "<u8", 1, 32, 96, 8, 24, 32, 8256, 270400, 1088, 33856, 80, 96, kind="index"),
        _layout(20, None, "<u8", 1, 32, 96, 8, 24, 32, 8256, 270400, 1088, 33856, 80, 96, kind="index"),
        # Half: binary16 values everywhere (root, tiles, leaves; node statistics are float32)
        _layout(9, "float32", "<f2", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 1120, kind="half"),
        # Fp4/8/16/N: float root and internal nodes; leaves hold minimum (f32 at 80), quantum (f32 at 84),
        # four u16 statistics, then the codes at 96: value = code * quantum + minimum (float32)
        _layout(13, "float32", "<f4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 352, kind="fp4"),
        _layout(14, "float32", "<f4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 608, kind="fp8"),
        _layout(15, "float32", "<f4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 1120, kind="fp16"),
        _layout(16, "float32", "<f4", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 96, 96, kind="fpn"),
        # Mask (ValueMask) and Boolean: bool tiles; leaves are the active mask (+ a value mask for Boolean)
        _layout(8, None, "u1", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 80, 96, kind="mask"),
        _layout(11, None, "u1", 1, 28, 64, 8, 20, 32, 8256, 270400, 1088, 33856, 80, 160, kind="mask"),
    )
}
GRID_TYPE_OF_VALUE_TYPE = {lay.value_type: gt for gt, lay in LAYOUTS.items() if lay.leaf_kind == "plain"}
FP_LEAF_OFF_MINIMUM, FP_LEAF_OFF_QUANTUM = 80, 84
FP_LEAF_OFF_CODES = 96  # Half, Fp4/8/16/N: the values (binary16) or codes start here
FPN_LEAF_FIXED_SIZE = 96  # an FpN leaf: these 96 bytes, then its codes
FPN_CODE_BYTES_PER_BIT = LEAF_VOXELS // 8  # a leaf's codes take 64 bytes per bit of its width
FPN_MAX_LOG2_BITS = 4  # FpN bit widths 1, 2, 4, 8, 16 (flags bits 5-7 hold log2)
FPN_FLAGS_LOG2_SHIFT = 5
TILE_STATE_ROOT = ROOT_TILE_OFF_STATE  # (an older name)
GRID_TYPE_INDEX, GRID_TYPE_ON_INDEX = 19, 20

# GridBlindMetaData (288 bytes): data offset i64 (from this record), value count u64, value size u32,
# semantic u32, data class u32, data type u32, name char[256]
BLIND_META_SIZE = 288
BLIND_META_FORMAT = "<qQIIII"
BLIND_META_OFF_NAME, BLIND_NAME_SIZE = 32, 256
