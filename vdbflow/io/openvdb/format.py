"""The facts of OpenVDB's .vdb byte layout that the reader needs, as constants (file format versions
222 to 225, written by OpenVDB 3.0 and later): magic, compression flags, the per-buffer mask codes, the
tree configuration, value types and size limits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAGIC = 0x56444220  # "VDB " as the int64 at byte 0
MIN_FILE_VERSION = 222  # node-mask compression and per-grid compression flags (OpenVDB 3.0)
MAX_FILE_VERSION = 225  # half-float grid type suffix (OpenVDB 7.0 and later)
UUID_SIZE = 36  # 32 hex digits and 4 hyphens, as ASCII

# per-grid compression flags (a uint32 at the grid's position)
COMPRESS_ZIP = 0x1
COMPRESS_ACTIVE_MASK = 0x2
COMPRESS_BLOSC = 0x4
COMPRESS_KNOWN = COMPRESS_ZIP | COMPRESS_ACTIVE_MASK | COMPRESS_BLOSC

# the byte before each node buffer: which inactive values were left out and how they come back
NO_MASK_OR_INACTIVE_VALS = 0  # inactive values (if any) are +background
NO_MASK_AND_MINUS_BG = 1  # inactive values are -background
NO_MASK_AND_ONE_INACTIVE_VAL = 2  # inactive values are one stored value
MASK_AND_NO_INACTIVE_VALS = 3  # a selection mask picks -background or +background
MASK_AND_ONE_INACTIVE_VAL = 4  # a selection mask picks the background or one stored value
MASK_AND_TWO_INACTIVE_VALS = 5  # a selection mask picks one of two stored values
NO_MASK_AND_ALL_VALS = 6  # every value stored
MASK_CODE_NAMES = (
    "NO_MASK_OR_INACTIVE_VALS",
    "NO_MASK_AND_MINUS_BG",
    "NO_MASK_AND_ONE_INACTIVE_VAL",
    "MASK_AND_NO_INACTIVE_VALS",
    "MASK_AND_ONE_INACTIVE_VAL",
    "MASK_AND_TWO_INACTIVE_VALS",
    "NO_MASK_AND_ALL_VALS",
)
STORED_INACTIVE = {NO_MASK_AND_ONE_INACTIVE_VAL: 1, MASK_AND_ONE_INACTIVE_VAL: 1, MASK_AND_TWO_INACTIVE_VALS: 2}
HAS_SELECTION = (MASK_AND_NO_INACTIVE_VALS, MASK_AND_ONE_INACTIVE_VAL, MASK_AND_TWO_INACTIVE_VALS)

# the tree configuration vdbflow reads: root -> 32^3 (log2 5) -> 16^3 (log2 4) -> 8^3 leaves
TREE_SUFFIX = "_5_4_3"
HALF_SUFFIX = "_HalfFloat"
UPPER_LOG2, LOWER_LOG2, LEAF_LOG2 = 5, 4, 3
UPPER_DIM = 1 << (UPPER_LOG2 + LOWER_LOG2 + LEAF_LOG2)  # 4096 voxels per side
LOWER_DIM = 1 << (LOWER_LOG2 + LEAF_LOG2)  # 128
LEAF_DIM = 1 << LEAF_LOG2  # 8
LEAF_MASK_BYTES = 64
LOWER_MASK_BYTES = (1 << (3 * LOWER_LOG2)) // 8  # 512
UPPER_MASK_BYTES = (1 << (3 * UPPER_LOG2)) // 8  # 4096

# limits that keep a hostile header from asking for absurd work before any byte backs it
MAX_STRING_BYTES = 1 << 24
MAX_METADATA_ITEMS = 1 << 20
MAX_GRIDS = 1 << 20


@dataclass(frozen=True)
class ValueLayout:
    """How one value of a grid type is stored: ``dtype`` per component, ``components``, whether
    half-float storage applies, and what vdbflow makes of it (``topology``: a Topology, no values)."""

    name: str
    dtype: np.dtype
    components: int
    real: bool
    topology: bool = False

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize * self.components

    def half(self) -> ValueLayout:
        """The layout of this type saved as half floats (2 bytes per component)."""
        return ValueLayout(self.name, np.dtype("<f2"), self.components, self.real, self.topology)


VALUE_LAYOUTS = {
    "float": ValueLayout("float", np.dtype("<f4"), 1, True),
    "double": ValueLayout("double", np.dtype("<f8"), 1, True),
    "int32": ValueLayout("int32", np.dtype("<i4"), 1, False),
    "int64": ValueLayout("int64", np.dtype("<i8"), 1, False),
    "vec3s": ValueLayout("vec3s", np.dtype("<f4"), 3, True),
    "vec3d": ValueLayout("vec3d", np.dtype("<f8"), 3, True),
    "vec3i": ValueLayout("vec3i", np.dtype("<i4"), 3, False),
    "bool": ValueLayout("bool", np.dtype("u1"), 1, False, topology=True),
    "mask": ValueLayout("mask", np.dtype("u1"), 1, False, topology=True),
}
TYPE_NAMES = {f"Tree_{name}{TREE_SUFFIX}": name for name in VALUE_LAYOUTS if name != "mask"}
TYPE_NAMES[f"Tree_ValueMask{TREE_SUFFIX}"] = "mask"
POINT_TYPES = ("ptdataidx", "ptidx")  # point data and point index grids: not volumes

# OpenVDB's linear maps: their name and how many doubles follow it
MAP_DOUBLES = {
    "UniformScaleMap": 15,  # scale, voxel size, inverse scale, 1/scale^2, 1/(2 scale): 5 Vec3d
    "ScaleMap": 15,
    "UniformScaleTranslateMap": 18,  # translation, then the 5 Vec3d of a scale map
    "ScaleTranslateMap": 18,
    "TranslationMap": 3,
    "AffineMap": 16,  # a row-major Mat4d acting on row vectors
    "UnitaryMap": 16,  # held as an affine map
}
NONLINEAR_MAPS = ("NonlinearFrustumMap",)

GRID_CLASSES = ("unknown", "level set", "fog volume", "staggered")
