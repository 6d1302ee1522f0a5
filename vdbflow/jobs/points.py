"""Sample points for batch jobs, as lazy Dask arrays: generated chunk by chunk on the workers (random
inside active voxels, lattice, slice plane, line) or read from .npy / .csv / .parquet / .zarr files.

Every generator is a pure function of (spec, chunk index): the same config gives the same points
whatever the cluster, and no chunk is built on the client.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vdbflow.core.topology import Topology
from vdbflow.core.transform import Transform
from vdbflow.devices import run
from vdbflow.errors import PointsError, VolumeError
from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import is_url
from vdbflow.io.zarr_v2 import refuse_code_codecs
from vdbflow.jobs import points_remote
from vdbflow.jobs.config.model import FilePoints, GridPoints, LinePoints, PlanePoints, RandomPoints, VoxelPoints
from vdbflow.jobs.points_remote import npy_header, table_header
from vdbflow.ops.coverage import stencil_inside
from vdbflow.ops.points import lattice_block, line, line_block, plane, plane_block  # noqa: F401 (line, plane: here too)
from vdbflow.version import install_hint

POINTS_KEY = "vdbflow-points"  # task-key prefix of the generated point chunks (jobs.progress groups by it)


@dataclass
class PointSet:
    """(N, 3) float64 points as a Dask array, and attrs describing how they were made.  Planes and
    lattices also give the ``shape`` their points unravel to (C order) and the names of its ``dims``:
    results are stored on those dims."""

    points: Any
    attrs: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None
    dims: tuple[str, ...] = ("point",)
    generator: tuple[Any, tuple] | None = None  # (fn, args): block b is fn(b, start, stop, *args); None for files

    @property
    def count(self) -> int:
        return int(self.points.shape[0])


def _chunks(n: int, chunk: int) -> tuple[int, ...]:
    full, rest = divmod(n, chunk)
    return (chunk,) * full + ((rest,) if rest else ())


def _generated(n: int, chunk: int, fn: Any, *args: Any) -> dict[str, Any]:
    """The ``points`` and ``generator`` of a PointSet whose block b is ``fn(b, start, stop, *args)``."""
    return {"points": _lazy(n, chunk, fn, *args), "generator": (fn, args)}


def _rows_chunk(chunk: int, shape: np.ndarray) -> int:
    """Points a chunk of a plane or lattice of ``shape``: whole rows (of the first dim) where a row fits
    ``chunk``, so that the result unravels to ``shape`` chunk by chunk without a rechunk (a plane of
    4096 x 4096 in chunks of 1,000,000 points ran at 0.83-0.90x random points of the same count before:
    each chunk was cut in two)."""
    row = int(np.prod(shape[1:]))
    return max(1, chunk // row) * row if 0 < row <= chunk else chunk


def _lazy(n: int, chunk: int, fn: Any, *args: Any) -> Any:
    """A Dask (n, 3) array whose block b is ``fn(b, start, stop, *args)``: one task per block, named
    ``vdbflow-points-*`` (the job summary counts their time as point generation)."""
    import dask
    import dask.array as da
    from dask.base import tokenize
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph

    sizes = _chunks(n, chunk)
    if not sizes:
        return da.zeros((0, 3), dtype=np.float64, chunks=(1, 3))
    shared = [dask.delayed(a) if isinstance(a, (np.ndarray, Topology)) else a for a in args]  # one graph key each
    refs = [a.key if isinstance(a, Delayed) else a for a in shared]
    name = f"{POINTS_KEY}-{tokenize(fn, n, chunk, *args)}"
    starts = np.cumsum((0,) + sizes)
    layer = {(name, b, 0): (fn, b, int(starts[b]), int(starts[b + 1]), *refs) for b in range(len(sizes))}
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[a for a in shared if isinstance(a, Delayed)])
    return da.Array(graph, name, chunks=(sizes, (3,)), dtype=np.float64)


# -- random points inside active voxels ---------------------------------------------------------------


def _random_in_voxels(
    block: int,
    start: int,
    stop: int,
    seed: int,
    origins: np.ndarray,
    masks: np.ndarray,
    leaf_end: np.ndarray,
    transform: Transform | None,
) -> np.ndarray:
    """Points uniform inside the active voxels: a uniform voxel rank, found by the kernels'
    rank-select over the masks (``active_voxels_at``), plus a uniform offset in the voxel."""
    rng = np.random.default_rng([seed, block])
    ijk = run("active_voxels_at", origins, masks, leaf_end, rng.integers(0, leaf_end[-1], stop - start))
    pts = rng.uniform(-0.5, 0.5, (stop - start, 3))
    pts += ijk
    return pts if transform is None else transform.apply_finite(pts)


def _in_each_voxel(
    block: int,
    start: int,
    stop: int,
    per_voxel: int,
    seed: int,
    origins: np.ndarray,
    masks: np.ndarray,
    leaf_end: np.ndarray,
    transform: Transform | None,
) -> np.ndarray:
    """Points ``start`` .. ``stop`` of every active voxel in tree order: its centre (``per_voxel`` 0), or its
    ``per_voxel`` uniform random points (point p in voxel p // per_voxel)."""
    k = max(1, per_voxel)
    rank = np.arange(start, stop, dtype=np.int64) // k
    pts = run("active_voxels_at", origins, masks, leaf_end, rank).astype(np.float64)
    if per_voxel:
        pts += np.random.default_rng([seed, block]).uniform(-0.5, 0.5, (stop - start, 3))
    return pts if transform is None else transform.apply_finite(pts)


def voxel_point_count(spec: Any, active_voxels: int) -> int:
    """Points of a ``kind: voxels`` spec over ``active_voxels`` voxels."""
    return active_voxels * max(1, spec.per_voxel)


def _random_in_leaves(
    block: int, start: int, stop: int, seed: int, origins: np.ndarray, transform: Transform | None
) -> np.ndarray:
    rng = np.random.default_rng([seed, block])
    leaf = rng.integers(0, len(origins), stop - start)
    pts = origins[leaf] - 0.5 + rng.uniform(0.0, 8.0, (len(leaf), 3))
    return pts if transform is None else transform.apply_finite(pts)


PROBE = 4096  # candidates drawn when the job starts, to refuse bounds without a point inside them
MAX_DRAWS = 10_000  # candidates a point at most, before a chunk gives up (a region of data that small)


def _voxel_draw(topology: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The live leaves' origins and masks and the cumulative active-voxel counts (``active_voxels_at``)."""
    live = np.bitwise_count(topology.masks).sum(axis=1) > 0
    leaf_end = np.cumsum(np.bitwise_count(topology.masks[live]).sum(axis=1, dtype=np.int64))
    origins = np.ascontiguousarray(topology.leaf_origins.astype(np.int64)[live])
    return origins, np.ascontiguousarray(topology.masks[live]), leaf_end


def _candidates(rng: Any, m: int, topology: Any, bounds: np.ndarray | None, world: bool) -> np.ndarray:
    """``m`` candidate points in the points' space: uniform in ``bounds`` (that space), else uniform in
    the active voxels' cells (a uniform voxel, a uniform offset of at most half a voxel)."""
    if bounds is not None:
        return rng.uniform(bounds[0], bounds[1], (m, 3))
    origins, masks, leaf_end = _voxel_draw(topology)
    pts = run("active_voxels_at", origins, masks, leaf_end, rng.integers(0, leaf_end[-1], m)).astype(np.float64)
    pts += rng.uniform(-0.5, 0.5, (m, 3))
    return topology.transform.apply_finite(pts) if world else pts


def _accepted(pts: np.ndarray, topology: Any, inside: str, mode: str, world: bool) -> np.ndarray:
    """(m,) bool: candidates whose nearest voxel holds data (``voxels``), whose leaf is active (``leaves``),
    or whose ``mode`` stencil reads only data (``stencil``)."""
    space = "world" if world else "index"
    if inside != "leaves":
        return np.asarray(stencil_inside(topology, pts, "closest" if inside == "voxels" else mode, space))
    ijk = topology.transform.apply_inverse(pts) if world else pts
    leaf = np.floor((np.floor(ijk + 0.5)) / 8.0).astype(np.int64) * 8
    rows = np.ascontiguousarray(topology.leaf_origins.astype(np.int64)).view([("", np.int64)] * 3).ravel()
    return np.isin(np.ascontiguousarray(leaf).view(rows.dtype).ravel(), rows)


def _random_accepted(
    block: int,
    start: int,
    stop: int,
    seed: int,
    topology: Any,
    bounds: np.ndarray | None,
    inside: str,
    mode: str,
    world: bool,
) -> np.ndarray:
    """Points uniform over the accepted part (:func:`_accepted`) of ``bounds`` (or of the active voxels'
    cells): candidates drawn and kept until the chunk is full (a point of the region is as likely as any)."""
    rng = np.random.default_rng([seed, block])
    n, kept, got, draws = stop - start, [], 0, 0
    while got < n:
        m = min(max(1024, 2 * (n - got)), 1 << 20)
        pts = _candidates(rng, m, topology, bounds, world)
        pts = pts[_accepted(pts, topology, inside, mode, world)][: n - got]
        kept.append(pts)
        got, draws = got + len(pts), draws + m
        if got < n and draws > MAX_DRAWS * n:
            raise PointsError(
                f"points: expected random points inside {inside} {_where(bounds)}, found {got:,} in {draws:,} draws"
            )
    return np.concatenate(kept) if kept else np.empty((0, 3))


def _where(bounds: np.ndarray | None) -> str:
    return "the active voxels" if bounds is None else f"bounds {np.asarray(bounds).tolist()}"


def _random_points(spec: RandomPoints, topology: Any, mode: str, attrs: dict[str, Any]) -> PointSet:
    """Random points of a ``kind: random`` spec (:class:`~vdbflow.jobs.config.model.RandomPoints`)."""
    to_world = topology.transform if spec.space == "world" else None
    attrs.update(points_seed=spec.seed, points_inside=spec.inside)
    if spec.bounds is None and spec.inside == "voxels":  # the uniform voxel, uniform offset: nothing refused
        made = _generated(spec.count, spec.chunk, _random_in_voxels, spec.seed, *_voxel_draw(topology), to_world)
    elif spec.bounds is None and spec.inside == "leaves":
        origins = topology.leaf_origins.astype(np.int64)
        made = _generated(spec.count, spec.chunk, _random_in_leaves, spec.seed, origins, to_world)
    else:
        bounds = None if spec.bounds is None else np.asarray(spec.bounds, np.float64)
        if bounds is not None:
            attrs["points_bounds"] = bounds.tolist()
        world = spec.space == "world"
        probe = _candidates(np.random.default_rng([spec.seed, 1 << 32]), PROBE, topology, bounds, world)
        if not _accepted(probe, topology, spec.inside, mode, world).any():
            what = {"voxels": "nearest voxel", "leaves": "leaf", "stencil": f"{mode} stencil"}[spec.inside]
            raise PointsError(
                f"points.bounds: expected random points whose {what} is inside the data {_where(bounds)}, "
                f"found none of {PROBE:,} drawn (the data box, voxel centres: "
                f"{np.round(topology.data_bounds(spec.space), 6).tolist()})"
            )
        args = (spec.seed, topology, bounds, spec.inside, mode, world)
        made = _generated(spec.count, spec.chunk, _random_accepted, *args)
    return PointSet(attrs=attrs, **made)


# -- lattices -----------------------------------------------------------------------------------------


# -- files --------------------------------------------------------------------------------------------


class PointsFileIdentity(FileIdentity):
    """A points file as it was when the job was planned: a file replaced or rewritten in place while
    the job runs is refused when a chunk of it is read (never a mix of two files' points)."""

    label = "the points file"
    seen = "the job was planned"
    error = PointsError


def _npy_rows(block: int, start: int, stop: int, path: str, identity: FileIdentity | None = None) -> np.ndarray:
    def read() -> np.ndarray:
        return np.array(np.load(path, mmap_mode="r")[start:stop], dtype=np.float64)  # a copy, while checked

    return read() if identity is None else identity.opened(read, f"when its points {start:,} to {stop:,} were read")


def _file_points(spec: FilePoints) -> Any:
    import dask.array as da

    path, suffix = spec.path, spec.path.suffix.lower()
    if is_url(path):  # an object store: by byte ranges (.npy) or through fsspec (points_remote.py)
        return _url_points(spec, path, suffix)
    if suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as err:
            raise PointsError(f"points.path: expected a .npy array, cannot read {path}: {err}") from None
        _check_shape(arr.shape, arr.dtype, path)
        identity = PointsFileIdentity.of(path.resolve())
        return _lazy(arr.shape[0], spec.chunk, _npy_rows, str(path.resolve()), identity)
    if suffix == ".zarr":
        try:  # Zarr 2 would run a pickle codec the store's metadata names
            refuse_code_codecs(path)
        except VolumeError as err:
            raise PointsError(f"points.path: {err}") from None
        try:
            arr = da.from_zarr(str(path), component=spec.array)
        except Exception as err:  # zarr raises several kinds for a missing or malformed store
            where = f" (array {spec.array!r})" if spec.array else ""
            raise PointsError(f"points.path: expected a Zarr array of shape (N, 3) at {path}{where}: {err}") from None
        _check_shape(arr.shape, arr.dtype, path)
        return arr.astype(np.float64).rechunk((spec.chunk, 3))
    try:
        import dask.dataframe as dd
    except ImportError:
        raise PointsError(
            f"reading .csv / .parquet points needs dask's dataframe support: {install_hint('tables')}"
        ) from None

    columns = _table_columns(spec)
    try:
        frame = dd.read_csv(str(path)) if suffix == ".csv" else dd.read_parquet(str(path))
    except Exception as err:  # pandas / pyarrow parse errors
        raise PointsError(f"points.path: cannot read {path}: {err}") from None
    arr = frame[columns].to_dask_array(lengths=True)
    _check_shape(arr.shape, arr.dtype, path)
    return arr.astype(np.float64).rechunk((spec.chunk, 3))


def _url_points(spec: FilePoints, url: Any, suffix: str) -> Any:
    if suffix == ".npy":
        shape, dtype, offset = points_remote.npy_header(url)
        _check_shape(shape, dtype, url)
        identity = PointsFileIdentity.of(url)
        return _lazy(shape[0], spec.chunk, points_remote.npy_url_rows, url, identity, offset, dtype.str)
    if suffix == ".zarr":
        arr = points_remote.zarr_array(url, spec.array)
    else:
        columns = _table_columns(spec)
        try:
            frame = points_remote.read_table(url, suffix)
        except Exception as err:  # pandas / pyarrow parse errors, the store's errors
            raise PointsError(f"points.path: cannot read {url}: {err}") from None
        arr = frame[columns].to_dask_array(lengths=True)
    _check_shape(arr.shape, arr.dtype, url)
    return arr.astype(np.float64).rechunk((spec.chunk, 3))


def _check_shape(shape: tuple, dtype: np.dtype, path: Path) -> None:
    if len(shape) != 2 or shape[1] != 3:
        raise PointsError(f"points.path: expected points of shape (N, 3) in {path}, got {tuple(shape)}")
    if shape[0] == 0:
        raise PointsError(f"points.path: expected at least one point in {path}, found none (shape {tuple(shape)})")
    if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)):
        raise PointsError(f"points.path: expected numeric points in {path}, got dtype {dtype}")


def _csv_header(path: Path) -> list[str]:
    """The names of a CSV file's header as written (pandas renames a repeated ``x`` to ``x.1``)."""
    with open(path, newline="", encoding="utf-8") as f:
        first = f.readline(1 << 20)
    return next(csv.reader([first]), [])


def _table_columns(spec: FilePoints) -> list[str]:
    """The three coordinate columns of a .csv / .parquet file, checked against its header."""
    columns = list(spec.columns or (("x", "y", "z") if spec.space == "world" else ("i", "j", "k")))
    try:
        if is_url(spec.path):
            have = table_header(spec.path, spec.path.suffix.lower())
        elif spec.path.suffix.lower() == ".csv":
            have = _csv_header(spec.path)
        else:
            import pyarrow.parquet as pq

            have = list(pq.read_schema(spec.path).names)
    except ImportError:
        raise PointsError(
            f"reading .csv / .parquet points needs dask's dataframe support: {install_hint('tables')}"
        ) from None
    except Exception as err:  # pandas / pyarrow parse errors
        raise PointsError(f"points.path: cannot read {spec.path}: {err}") from None
    twice = sorted({c for c in have if have.count(c) > 1} | {c for c in columns if columns.count(c) > 1})
    if twice:  # pandas would read the first of them (and name the others x.1, ...)
        raise PointsError(
            f"points.columns: expected each of the columns {columns} once in {spec.path} and in points.columns, "
            f"found {twice} more than once (its header: {have})"
        )
    missing = [c for c in columns if c not in have]
    if missing:
        raise PointsError(
            f"points.columns: expected columns {columns} in {spec.path}, missing {missing} (it has {have})"
        )
    return columns


def file_point_count(spec: FilePoints) -> int | None:
    """The number of points in a .npy or .zarr file without reading it (None for csv/parquet, whose
    header is checked)."""
    if spec.path.suffix.lower() == ".npy" and is_url(spec.path):
        shape, dtype, _ = npy_header(spec.path)
        _check_shape(shape, dtype, spec.path)
        return int(shape[0])
    if spec.path.suffix.lower() == ".npy":
        try:
            arr = np.load(spec.path, mmap_mode="r")
        except (ValueError, OSError) as err:
            raise PointsError(f"points.path: expected a .npy array, cannot read {spec.path}: {err}") from None
        _check_shape(arr.shape, arr.dtype, spec.path)
        return int(arr.shape[0])
    if spec.path.suffix.lower() == ".zarr":
        return int(_file_points(spec).shape[0])
    _table_columns(spec)
    return None


# -- the table of point sources ----------------------------------------------------------------------


def _from_file(spec: FilePoints, topology: Any, bbox: np.ndarray | None, mode: str) -> PointSet:
    return PointSet(_file_points(spec), {"points_file": str(spec.path)})


def _random(spec: RandomPoints, topology: Any, bbox: np.ndarray | None, mode: str) -> PointSet:
    if topology.active_voxel_count == 0:
        raise PointsError("points: expected a volume with active voxels to draw random points in, got none")
    return _random_points(spec, topology, mode, {})


def _voxels(spec: VoxelPoints, topology: Any, bbox: np.ndarray | None, mode: str) -> PointSet:
    live = np.bitwise_count(topology.masks).sum(axis=1) > 0
    leaf_end = np.cumsum(np.bitwise_count(topology.masks[live]).sum(axis=1, dtype=np.int64))
    n = voxel_point_count(spec, int(leaf_end[-1]) if len(leaf_end) else 0)
    if n == 0:
        raise PointsError("points: expected a volume with active voxels (kind: voxels), got none")
    origins = np.ascontiguousarray(topology.leaf_origins.astype(np.int64)[live])
    to_world = topology.transform if spec.space == "world" else None
    masks = np.ascontiguousarray(topology.masks[live])
    made = _generated(n, spec.chunk, _in_each_voxel, spec.per_voxel, spec.seed, origins, masks, leaf_end, to_world)
    return PointSet(attrs={"points_per_voxel": spec.per_voxel, "points_seed": spec.seed}, **made)


def _lattice(spec: GridPoints, topology: Any, bbox: np.ndarray | None, mode: str) -> PointSet:
    bounds = np.asarray(spec.bounds if spec.bounds is not None else bbox, dtype=np.float64)
    if bounds is None or bounds.shape != (2, 3):
        raise PointsError("points.bounds: expected [[x0, y0, z0], [x1, y1, z1]] (the volume has no bounding box)")
    shape = np.asarray(spec.shape, np.int64)
    dims = tuple(f"lattice_{a}" for a in ("xyz" if spec.space == "world" else "ijk"))
    made = _generated(int(shape.prod()), _rows_chunk(spec.chunk, shape), lattice_block, bounds[0], bounds[1], shape)
    attrs = {"points_bounds": bounds.tolist()}
    return PointSet(attrs=attrs, shape=tuple(int(n) for n in spec.shape), dims=dims, **made)


def _plane(spec: PlanePoints, topology: Any, bbox: np.ndarray | None, mode: str) -> PointSet:
    axes = np.asarray([spec.u, spec.v], np.float64)
    shape = np.asarray(spec.resolution, np.int64)
    attrs = {"plane_origin": list(spec.origin), "plane_u": list(spec.u), "plane_v": list(spec.v)}
    origin = np.asarray(spec.origin, np.float64)
    made = _generated(int(shape.prod()), _rows_chunk(spec.chunk, shape), plane_block, origin, axes, shape)
    return PointSet(attrs=attrs, shape=tuple(int(n) for n in spec.resolution), dims=("plane_s", "plane_t"), **made)


def _line(spec: LinePoints, topology: Any, bbox: np.ndarray | None, mode: str) -> PointSet:
    start, end = np.asarray(spec.start, np.float64), np.asarray(spec.end, np.float64)
    made = _generated(spec.count, spec.chunk, line_block, start, end, spec.count)
    return PointSet(attrs={"line_start": list(spec.start), "line_end": list(spec.end)}, **made)


# ``points.kind`` -> the function that makes that source's points (its config class is a member of
# vdbflow.jobs.config.model.PointsSpec, whose ``generated()`` counts them).  A new kind of points is its config
# class and its row here.
SOURCES: dict[str, Callable[[Any, Any, np.ndarray | None, str], PointSet]] = {
    "file": _from_file,
    "random": _random,
    "voxels": _voxels,
    "grid": _lattice,
    "plane": _plane,
    "line": _line,
}


def make_points(spec: Any, topology: Any, bbox: np.ndarray | None = None, mode: str = "linear") -> PointSet:
    """The points of a config's ``points`` section for a volume of ``topology``; ``bbox`` (2, 3) is
    the span of the volume's voxel centres in the points' space (the default bounds of a lattice);
    ``mode``: the sampling mode whose stencil ``inside: stencil`` random points keep inside the data."""
    if getattr(spec, "kind", None) not in SOURCES:
        raise PointsError(f"expected a points spec, got {type(spec).__name__}")
    made = SOURCES[spec.kind](spec, topology, bbox, mode)
    made.attrs = {"points_kind": spec.kind, "point_space": spec.space, **made.attrs}
    return made
