"""Facts of the kernels (kernels/vdbflow/*.h), read from the compiled extension: the one place
Python learns them.  And the kernels' argument record (``KernelAbi``, kernels/vdbflow/abi.h):
a grid, its transform and a call's options as bytes, built once per volume and device, handed to
the CPU extension as they are and to the CUDA entry points as a pointer to a device copy.

Facts: the mode codes and stencil reaches (schemes.h), the leaf size, the table shift of each level
and its tile size, the tile slot code (grid.h ``encode_tile``), the in-leaf voxel offset (grid.h
``voxel_offset``), the transform parameter layout (sample.h) and the record's field offsets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from vdbflow import _core
from vdbflow.errors import SamplingError, VolumeError

# schemes.h: MODE_NAMES (name -> id) and stencil_reach (voxels on the positive side of the base cell;
# the negative side reaches one less) - the distributed halo must be at least this wide.
MODES: dict[str, int] = dict(_core.MODES)
STENCIL_RADIUS: dict[str, int] = dict(_core.STENCIL_REACH)
# quantities of a velocity gradient the kernels compute with the Jacobian (derived.h), and their widths
DERIVED: tuple[str, ...] = tuple(_core.DERIVED)
DERIVED_WIDTHS: dict[str, int] = dict(zip(_core.DERIVED, _core.DERIVED_WIDTHS, strict=True))


class Operation(NamedTuple):
    """A row of the kernels' table of operations (operations.h)."""

    gpu_entry: str  # its GPU entry ("" for a host operation)
    value_types: str  # "any", "float", "untyped" or "host"
    gpu_components: tuple[int, ...] | None  # the GPU entry's fixed component counts; None: no count parameter
    cpu_parameters: tuple[tuple[str, str], ...]  # (C type, name) of its entry in a CPU target's table
    gpu_parameters: tuple[tuple[str, str], ...]  # (C type, name) of its GPU entry (T: value type, Real<T>: real)


def parameters(text: str) -> tuple[tuple[str, str], ...]:
    """``(C type, name)`` of each parameter of a C parameter list ``"(const double* x, i64 n)"``."""
    out = []
    for param in filter(None, (p.strip() for p in text.strip()[1:-1].split(","))):
        ctype, name = param.replace("*", "* ").rsplit(None, 1)
        out.append((" ".join(ctype.split()), name))
    return tuple(out)


def _operations(table: dict) -> dict[str, Operation]:
    rows = {}
    for name, (gpu, types, fixed, cpu, gpu_params) in table.items():
        counts = None if fixed is None else tuple(int(c) for c in fixed)
        rows[str(name)] = Operation(str(gpu), str(types), counts, parameters(cpu), parameters(gpu_params))
    return rows


# operations.h: the kernels' operations, name -> Operation; every backend defines one function per name
# (vdbflow.devices.run).  GPU_STEPS: the entries of sample.cu that are a step of an operation on the GPU.
OPERATIONS: dict[str, Operation] = _operations(_core.OPERATIONS)
GPU_STEPS: dict[str, Operation] = _operations(_core.GPU_STEPS)


def derived_slots(derived: dict[str, Any]) -> list[Any]:
    """The buffers of ``derived`` (name -> buffer) in the kernels' order, None where not asked."""
    unknown = set(derived) - set(DERIVED)
    if unknown:
        raise SamplingError(f"expected derived quantities among {', '.join(DERIVED)}, got {sorted(unknown)}")
    return [derived.get(name) for name in DERIVED]


# grid.h: leaves of LEAF_DIM^3 voxels; level l's hash table is keyed by ijk >> LEVEL_SHIFTS[l] and
# holds tiles of TILE_SIZES[l]^3 voxels (level 0 also holds the leaves).
LEAF_DIM: int = int(_core.LEAF_DIM)
LEAF_VOXELS: int = int(_core.LEAF_VOXELS)
LEVEL_SHIFTS: tuple[int, int, int] = tuple(int(s) for s in _core.LEVEL_SHIFTS)  # type: ignore[assignment]
LEAF_SHIFT: int = LEVEL_SHIFTS[0]  # leaf key = ijk >> LEAF_SHIFT
TILE_SIZES: tuple[int, int, int] = tuple(int(s) for s in _core.TILE_SIZES)  # type: ignore[assignment]
SLOT_NOT_FOUND: int = int(_core.SLOT_NOT_FOUND)  # a table lookup's miss

# sample.h: the names of make_point_transform's parameters, in order (w2i_RC: world-to-index matrix
# entry, i2w_tA: index-to-world translation)
TRANSFORM_PARAMETERS: tuple[str, ...] = tuple(_core.TRANSFORM_PARAMETERS)

# abi.h: the record's dtype, from the offsets the extension reports (offsetof)
_ABI_SPEC: Any = {  # NumPy reads the offsets: a dtype laid out as the struct
    "names": [f[0] for f in _core.ABI_FIELDS],
    "formats": [f"<{f[1]}" if f[3] == 1 else (f"<{f[1]}", (f[3],)) for f in _core.ABI_FIELDS],
    "offsets": [f[2] for f in _core.ABI_FIELDS],
    "itemsize": int(_core.ABI_SIZE),
}
ABI_DTYPE: np.dtype = np.dtype(_ABI_SPEC)
# reduce.h: a reduction's spec dtype (offsetof, as the record's), its block and its limits
REDUCE_SPEC_DTYPE: np.dtype = np.dtype(
    {
        "names": [f[0] for f in _core.REDUCE_SPEC_FIELDS],
        "formats": [f"<{f[1]}" if f[3] == 1 else (f"<{f[1]}", (f[3],)) for f in _core.REDUCE_SPEC_FIELDS],
        "offsets": [f[2] for f in _core.REDUCE_SPEC_FIELDS],
        "itemsize": int(_core.REDUCE_SPEC_SIZE),
    }
)
REDUCE_BLOCK: int = int(_core.REDUCE_BLOCK)  # points accumulated in order into one partial
MOMENT_FIELDS: int = int(_core.MOMENT_FIELDS)  # count, nan count, mean, M2, M3, M4, min, max
REDUCE_MAX_CHANNELS, REDUCE_MAX_HISTOGRAMS, REDUCE_MAX_CONDITIONALS = (int(x) for x in _core.REDUCE_LIMITS)
VALUE_KINDS: dict[str, int] = dict(_core.VALUE_KINDS)  # value dtype name -> abi.h ValueKind
MAX_COMPONENTS: int = int(_core.MAX_COMPONENTS)  # abi.h: the most components a value may have

# route.h: Morton code bits per axis, background-shortcut blocks (leaf keys >> ROUTE_BLOCK_SHIFT) and
# the owner code of a near block whose leaf slots belong to several partitions
MORTON_BITS: int = int(_core.MORTON_BITS)
ROUTE_BLOCK_SHIFT: int = int(_core.ROUTE_BLOCK_SHIFT)
ROUTE_MIXED_BLOCK: int = int(_core.ROUTE_MIXED_BLOCK)


def build_table(keys: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' hash table (capacity, 4) int32 of ``keys`` (n, 3) -> ``slots`` (n,) (grid.h), and
    the indices of keys given more than once."""
    return _core.build_table(np.ascontiguousarray(keys, np.int32), np.ascontiguousarray(slots, np.int32))


def table_lookup(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(n,) int32 slots of ``keys`` (n, 3) in a hash ``table`` (``SLOT_NOT_FOUND`` for a miss)."""
    return _core.table_lookup(table, np.ascontiguousarray(keys))


def encode_tiles(tiles: np.ndarray) -> np.ndarray:
    """(T,) int32 table slot codes of tile indices ``tiles`` (T,) >= 0 (grid.h ``encode_tile``)."""
    return _core.encode_tiles(np.ascontiguousarray(tiles, np.int32))


def voxel_offsets(ijk: np.ndarray) -> np.ndarray:
    """(N,) int64 offsets in [0, LEAF_VOXELS) of voxels (N, 3) inside their leaf: the bit of the
    leaf's active mask (grid.h ``voxel_offset``)."""
    return _core.voxel_offsets(np.ascontiguousarray(np.asarray(ijk).reshape(-1, 3), np.int64))


def transform_parameters(index_to_world: np.ndarray, world_to_index: np.ndarray) -> np.ndarray:
    """(12,) float64 parameters of the kernels' ``PointTransform`` from (4, 4) matrices, in the
    order the kernels name them (``TRANSFORM_PARAMETERS``)."""
    out = np.empty(len(TRANSFORM_PARAMETERS), np.float64)
    for e, name in enumerate(TRANSFORM_PARAMETERS):
        kind, at = name.split("_")
        if kind == "w2i":
            out[e] = world_to_index[int(at[0]), int(at[1])]
        elif kind == "i2w" and at[0] == "t":
            out[e] = index_to_world[int(at[1]), 3]
        else:  # pragma: no cover - a kernel parameter this module does not know
            raise VolumeError(f"expected transform parameters named w2i_RC or i2w_tA, got {name!r}")
    return out


@dataclass(frozen=True)
class KernelArrays:
    """What the kernels read, in the layout of ``GridView`` (kernels/vdbflow/grid.h), and the
    transform's 12 parameters.  ``device_cache`` keeps each device's record (and device copies) of
    these arrays; it is not pickled."""

    tables: tuple[np.ndarray, np.ndarray, np.ndarray]
    masks: np.ndarray
    prefix: np.ndarray
    leaf_offset: np.ndarray
    values: np.ndarray
    tile_values: np.ndarray
    background: np.ndarray
    components: int
    index_layout: bool
    leaf_values_at: np.ndarray | None = None  # per-leaf layout: element offset of each leaf's values
    xform: np.ndarray | None = None  # (12,) float64 transform parameters (None: the identity)
    period: np.ndarray | None = None  # (6,) int64 periods (core.periodic: lo, then size; None: none)
    device_cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["device_cache"] = {}  # records hold addresses, valid in this process only
        return state


IDENTITY_PARAMETERS = transform_parameters(np.eye(4), np.eye(4))


def host_address(arr: Any) -> int:
    """Address of an array's first element: NumPy (``__array_interface__``) or a device array
    (``__cuda_array_interface__``); 0 for None or an empty array."""
    if arr is None or arr.size == 0:
        return 0
    iface = getattr(arr, "__cuda_array_interface__", None) or arr.__array_interface__
    return int(iface["data"][0])


def _checked_host_arrays(k: KernelArrays) -> KernelArrays:
    """``k`` with every array C-contiguous in the native byte order and the dtype the kernels read,
    checked once, before a record points into them."""
    kind = np.dtype(k.values.dtype).newbyteorder("=")
    if kind.name not in VALUE_KINDS:
        raise VolumeError(f"expected values of a kernel dtype ({', '.join(VALUE_KINDS)}), got {k.values.dtype}")
    C = int(k.components)

    def plain(a: np.ndarray, dtype: Any) -> np.ndarray:
        return np.ascontiguousarray(a, np.dtype(dtype).newbyteorder("="))

    tables = (plain(k.tables[0], np.int32), plain(k.tables[1], np.int32), plain(k.tables[2], np.int32))
    for t in tables:
        if len(t) and (t.ndim != 2 or t.shape[1] != 4 or len(t) & (len(t) - 1)):
            raise VolumeError(f"expected (capacity, 4) hash tables with a power-of-two capacity, got {t.shape}")
    masks = plain(k.masks, np.uint64)
    L = len(masks)
    prefix, leaf_offset = plain(k.prefix, np.uint16), plain(k.leaf_offset, np.int64)
    values, tiles, background = plain(k.values, kind), plain(k.tile_values, kind), plain(k.background, kind)
    if masks.shape != (L, 8) or prefix.shape != (L, 8) or leaf_offset.shape != (L,):
        raise VolumeError(
            f"expected masks and prefix counts (L, 8) and leaf offsets (L,), got {masks.shape}, "
            f"{prefix.shape} and {leaf_offset.shape}"
        )
    if background.size != C or tiles.size % C or (k.leaf_values_at is None and values.size % C):
        raise VolumeError(f"expected values, tile values and a background of {C} components each")
    at = None
    if k.leaf_values_at is not None:
        at = plain(k.leaf_values_at, np.int64)
        if k.index_layout or at.shape != (L,):
            raise VolumeError("expected one value offset per leaf of a per-leaf layout volume")
        if L and (at.min() < 0 or at.max() > values.size - LEAF_VOXELS * C):
            raise VolumeError("expected leaf value offsets inside the values")
    elif not k.index_layout and values.size != L * LEAF_VOXELS * C:
        raise VolumeError(f"expected {L * LEAF_VOXELS} value rows of a per-leaf layout, got {values.size // C}")
    xform = IDENTITY_PARAMETERS if k.xform is None else plain(k.xform, np.float64)
    if xform.shape != (len(TRANSFORM_PARAMETERS),):
        raise VolumeError(f"expected {len(TRANSFORM_PARAMETERS)} transform parameters, got shape {xform.shape}")
    period = None if k.period is None else plain(k.period, np.int64)
    if period is not None and (period.shape != (6,) or np.any(period[3:] < 0)):
        raise VolumeError(f"expected 3 period origins and 3 periods >= 0, got {period.tolist()}")
    return dataclasses.replace(
        k,
        tables=tables,
        masks=masks,
        prefix=prefix,
        leaf_offset=leaf_offset,
        values=values,
        tile_values=tiles,
        background=background,
        leaf_values_at=at,
        xform=xform,
        period=period,
        device_cache={},
    )


class KernelRecord:
    """A grid's kernel record (abi.h ``KernelAbi``) with the arrays its pointers address, kept alive
    together.  ``call`` gives one call's record, the options set."""

    def __init__(self, arrays: KernelArrays, record: np.ndarray):
        self.arrays = arrays
        self.record = record

    def call(
        self, mode: int, points_world: bool = False, jacobian_world: bool = False, hessian_world: bool = False
    ) -> np.ndarray:
        """() ABI_DTYPE record of one call."""
        r = self.record.copy()
        r["mode"], r["points_world"] = mode, int(points_world)
        r["jacobian_world"], r["hessian_world"] = int(jacobian_world), int(hessian_world)
        return r


def make_record(k: KernelArrays, address: Callable[[Any], int] = host_address) -> np.ndarray:
    """() ABI_DTYPE record of ``k``'s grid and transform, pointers from ``address(array)`` (0 for
    absent or empty arrays); the options are left 0."""
    r = np.zeros((), ABI_DTYPE)
    r["tables"] = [address(t) for t in k.tables]
    r["table_masks"] = [len(t) - 1 if len(t) else 0 for t in k.tables]
    r["components"] = k.components
    for name in ("masks", "prefix", "leaf_offset", "leaf_values_at", "values", "tile_values", "background"):
        r[name] = address(getattr(k, name))
    # a volume without leaves or tiles still reads its background: the kernels ask for non-null values
    if r["values"] == 0:
        r["values"] = r["background"]
    r["value_rows"] = k.values.size // k.components
    r["tile_rows"] = k.tile_values.size // k.components
    r["index_layout"] = int(k.index_layout)
    r["value_kind"] = VALUE_KINDS[np.dtype(k.values.dtype).name]
    r["xform"] = IDENTITY_PARAMETERS if k.xform is None else k.xform
    if k.period is not None:
        r["period"] = k.period
    return r


def host_record(k: KernelArrays) -> KernelRecord:
    """The CPU's record of ``k`` (checked and built once, then kept in ``k.device_cache``)."""
    rec = k.device_cache.get("cpu")
    if rec is None:
        arrays = _checked_host_arrays(k)
        rec = k.device_cache.setdefault("cpu", KernelRecord(arrays, make_record(arrays)))  # one, if threads race
    return rec


def morton_codes(keys: np.ndarray, origin: np.ndarray, shift: int) -> np.ndarray:
    """(n,) uint64 Morton codes of leaf keys (n, 3) relative to ``origin``, coarsened by ``shift``
    bits (route.h ``morton_code``: the function routing uses)."""
    keys = np.ascontiguousarray(keys, np.int64).reshape(-1, 3)
    return _core.morton_codes(keys, np.ascontiguousarray(origin, np.int64), int(shift))
