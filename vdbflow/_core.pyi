"""vdbflow CPU kernels (compiled from kernels/)"""

from collections.abc import Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


CPU_TARGET: str

CPU_TARGET_FLAGS: str

CPU_TARGETS: tuple

CPU_TARGETS_SUPPORTED: tuple

def build_table(keys: Annotated[NDArray[numpy.int32], dict(shape=(None, None), order='C', device='cpu', writable=False)], slots: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> tuple: ...

DERIVED: tuple

DERIVED_WIDTHS: tuple

LEAF_DIM: int

LEAF_VOXELS: int

LEVEL_SHIFTS: tuple

TILE_SIZES: tuple

TILE_BASE: int

SLOT_NOT_FOUND: int

TRANSFORM_PARAMETERS: tuple

ABI_SIZE: int

OPERATIONS: dict

GPU_STEPS: dict

REDUCE_SPEC_SIZE: int

REDUCE_SPEC_FIELDS: tuple

REDUCE_BLOCK: int

MOMENT_FIELDS: int

REDUCE_LIMITS: tuple

ABI_FIELDS: tuple

VALUE_KINDS: dict

MORTON_BITS: int

ROUTE_BACKGROUND: int

ROUTE_BLOCK_SHIFT: int

ROUTE_MIXED_BLOCK: int

ORDER_AUTO: int

ORDER_COHERENT: int

ORDER_SCATTERED: int

MODE_CLOSEST: int

MODE_LINEAR: int

MAX_COMPONENTS: int

SCHEME_LAST: int

MODES: dict

STENCIL_REACH: dict

OPENMP: bool

def table_lookup(table: Annotated[NDArray[numpy.int32], dict(shape=(None, None), order='C', device='cpu', writable=False)], keys: Annotated[NDArray[numpy.int32], dict(shape=(None, None), order='C', device='cpu', writable=False)]) -> Annotated[NDArray[numpy.int32], dict(shape=(None,))]: ...

def sample(k: bytes, points: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, points_double: bool, n: int, out_values: Annotated[NDArray, dict(order='C', device='cpu')] | None, out_jacobian: Annotated[NDArray, dict(order='C', device='cpu')] | None, order: int) -> None: ...

def sample_derived(k: bytes, points: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, points_double: bool, n: int, out_values: Annotated[NDArray, dict(order='C', device='cpu')] | None, out_jacobian: Annotated[NDArray, dict(order='C', device='cpu')] | None, derived: Sequence[Annotated[NDArray, dict(order='C', device='cpu')] | None], order: int) -> None: ...

def derive(jacobian: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, velocity: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, jacobian_double: bool, n: int, derived: Sequence[Annotated[NDArray, dict(order='C', device='cpu')] | None]) -> None: ...

def sample_hessian(k: bytes, points: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, points_double: bool, n: int, out_values: Annotated[NDArray, dict(order='C', device='cpu')] | None, out_jacobian: Annotated[NDArray, dict(order='C', device='cpu')] | None, out_hessian: Annotated[NDArray, dict(order='C', device='cpu')] | None) -> None: ...

def sample_vjp(k: bytes, points: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, points_double: bool, n: int, adj_values: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, adj_jacobian: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, accumulator: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, adj_points: Annotated[NDArray, dict(order='C', device='cpu')] | None) -> None: ...

def grid_gradient(k: bytes, origins: Annotated[NDArray[numpy.int32], dict(order='C', device='cpu', writable=False)] | None, first_row: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)] | None, leaves: int, out: Annotated[NDArray, dict(order='C', device='cpu')] | None) -> None: ...

def stencil_inside(k: bytes, points: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu', writable=False)] | None, n: int, out: Annotated[NDArray[numpy.bool_], dict(order='C', device='cpu')] | None) -> None: ...

def defined_voxels(k: bytes, ijk: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)] | None, n: int, out: Annotated[NDArray[numpy.bool_], dict(order='C', device='cpu')] | None) -> None: ...

def scatter_rows(dst: Annotated[NDArray, dict(order='C', device='cpu')] | None, index: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)] | None, src: Annotated[NDArray, dict(order='C', device='cpu', writable=False)] | None, m: int, row: int) -> None: ...

def active_voxels_at(origins: Annotated[NDArray[numpy.int32], dict(order='C', device='cpu', writable=False)] | None, masks: Annotated[NDArray[numpy.uint64], dict(order='C', device='cpu', writable=False)] | None, leaf_end: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)] | None, leaves: int, rank: Annotated[NDArray[numpy.int64], dict(order='C', device='cpu', writable=False)] | None, n: int, ijk: Annotated[NDArray[numpy.int32], dict(order='C', device='cpu')] | None) -> None: ...

def advect(record: bytes, x: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order='C', device='cpu')], a: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order='C', device='cpu', writable=False)], b: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], h: float, save_slot: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], position: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')], velocity: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, jacobian: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, F: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, status: Annotated[NDArray[numpy.int8], dict(shape=(None,), order='C', device='cpu')], last_step: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu')], evaluations: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu')], validate_end: bool = True) -> None:
    """
    Particle trajectories through a steady vec3 volume, explicit Runge-Kutta (advect.h).
    """

def advect_series(records: Sequence[bytes], topology: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu', writable=False)], time_kind: int, stage_grid: Annotated[NDArray[numpy.int32], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], stage_coef: Annotated[NDArray[numpy.float64], dict(shape=(None, None, None), order='C', device='cpu', writable=False)], first_step: int, x: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order='C', device='cpu')], a: Annotated[NDArray[numpy.float64], dict(shape=(None, None), order='C', device='cpu', writable=False)], b: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], h: float, save_slot: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], position: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')], velocity: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, jacobian: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, F: Annotated[NDArray[numpy.float64], dict(order='C', device='cpu')] | None, status: Annotated[NDArray[numpy.int8], dict(shape=(None,), order='C', device='cpu')], last_step: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu')], evaluations: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu')], validate_end: bool = True) -> None:
    """
    Particle trajectories through a window of a series' steps, interpolated in time (advect.h).
    """

def encode_tiles(tiles: Annotated[NDArray[numpy.int32], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> Annotated[NDArray[numpy.int32], dict(shape=(None,))]:
    """Table slot codes of tile indices (grid.h encode_tile)."""

def voxel_offsets(ijk: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)]) -> Annotated[NDArray[numpy.int64], dict(shape=(None,))]:
    """In-leaf offsets of voxels (grid.h voxel_offset)."""

def sample_reduce(record: bytes, points: Annotated[NDArray, dict(order='C', device='cpu', writable=False)], spec: bytes, edges: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], ints: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu')], reals: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu')], order: int = 0) -> None:
    """
    Histograms, moments and binned means of sampled quantities, added into ints and reals (reduce.h).
    """

def reduce_features(spec: bytes, features: Annotated[NDArray, dict(order='C', device='cpu', writable=False)], edges: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], ints: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu')], reals: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu')]) -> None:
    """
    The same statistics of given features (N, channels), added into ints and reals.
    """

def merge_partials(spec: bytes, edges: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)], ints: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu')], reals: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu')], ints_b: Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', writable=False)], reals_b: Annotated[NDArray[numpy.float64], dict(shape=(None,), order='C', device='cpu', writable=False)]) -> None:
    """A reduction's partial merged into another, in place (reduce.h)."""

def route_points(points: Annotated[NDArray, dict(order='C', device='cpu', writable=False)], xform: Annotated[NDArray[numpy.float64], dict(shape=(12), order='C', device='cpu', writable=False)], points_world: bool, origin: Annotated[NDArray[numpy.int64], dict(shape=(3), order='C', device='cpu', writable=False)], shift: int, boundaries: Annotated[NDArray[numpy.uint64], dict(shape=(None,), order='C', device='cpu', writable=False)], near_blocks: Annotated[NDArray[numpy.int32], dict(shape=(None, None), order='C', device='cpu', writable=False)], period: Annotated[NDArray[numpy.int64], dict(shape=(6), order='C', device='cpu', writable=False)]) -> tuple:
    """
    Partition of each point and a stable counting sort: (order, bounds (P + 2), sorted points).
    """

def morton_codes(keys: Annotated[NDArray[numpy.int64], dict(shape=(None, None), order='C', device='cpu', writable=False)], origin: Annotated[NDArray[numpy.int64], dict(shape=(3), order='C', device='cpu', writable=False)], shift: int) -> Annotated[NDArray[numpy.uint64], dict(shape=(None,))]: ...

def set_num_threads(threads: int) -> None:
    """Threads of the CPU kernels (OpenMP)."""

def get_max_threads() -> int:
    """Threads the CPU kernels use."""
