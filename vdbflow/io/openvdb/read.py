"""Reading .vdb files: the file mapped, its grids found by their descriptors, and a grid's
compression flags, metadata, transform, topology and leaf buffers made into a vdbflow
:class:`~vdbflow.Volume` (value grids) or :class:`~vdbflow.Topology` (bool and mask grids), whole
or the part that meets a box, or described as a :class:`~vdbflow.GridInfo` without reading the leaf
buffers.  For a large grid the leaf values are read in a helper thread (straight from the file
where its layout allows) while the topology is parsed and its hash tables are built."""

from __future__ import annotations

import mmap
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from vdbflow.core import tree
from vdbflow.core.transform import Transform
from vdbflow.core.value_types import value_type_for
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import OpenVDBError, VolumeError
from vdbflow.io.nanovdb.nodes import overlaps
from vdbflow.io.nanovdb.records import GridInfo
from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.header import Descriptor, FileHeader, read_descriptors, read_header
from vdbflow.io.openvdb.metadata import read_metadata
from vdbflow.io.openvdb.scatter import OpenFile
from vdbflow.io.openvdb.stream import Cursor
from vdbflow.io.openvdb.transform import read_transform
from vdbflow.io.openvdb.tree import TreeParts, read_flag_leaves, read_topology
from vdbflow.io.openvdb.values import EarlyRead, Storage, read_leaf_values
from vdbflow.io.selection import index_box, leaf_indices

Data = str | os.PathLike | bytes | np.ndarray
A = TypeVar("A")
B = TypeVar("B")
PARALLEL_LEAVES = 16384  # leaves from which the values are read beside the topology's tables


def is_openvdb(data: Any) -> bool:
    """Whether ``data`` (a path, bytes or uint8 array) starts with OpenVDB's magic number."""
    if isinstance(data, (str, os.PathLike)):
        try:
            with open(data, "rb") as f:
                head = f.read(8)
        except OSError:
            return False
    elif isinstance(data, (bytes, bytearray, memoryview)):
        head = bytes(memoryview(data).cast("B")[:8])
    elif isinstance(data, np.ndarray) and data.dtype == np.uint8:
        head = data.reshape(-1)[:8].tobytes()
    else:
        return False
    return len(head) == 8 and int.from_bytes(head, "little", signed=True) == fmt.MAGIC


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _buffer(data: Data) -> tuple[np.ndarray, str, OpenFile | None]:
    """The bytes of ``data`` (a file memory-mapped) and what to call them in messages (the path), and
    for a path the file, kept open: the leaf buffers are read from it, never from a second ``open`` of
    the path (which a file renamed over it meanwhile would answer)."""
    if isinstance(data, (str, os.PathLike)):
        name = os.fspath(data)
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))  # a FIFO
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OpenVDBError(f"expected {name} to be a regular file, found another kind of file")
            if info.st_size == 0:
                raise OpenVDBError(f"{name} is empty: expected an OpenVDB file header at byte 0")
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        return np.frombuffer(mapped, np.uint8), name, OpenFile(fd, name)
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8), "the buffer", None
    return np.frombuffer(data, np.uint8), "the buffer", None


@dataclass
class VdbFile:
    """An opened .vdb file: its bytes, header and grid descriptors; ``path`` the open file the bytes are
    mapped from (None for bytes and arrays), which leaf buffers may be read from directly, and
    ``identity`` its device, inode, size and modification time when it was opened."""

    buf: np.ndarray
    source: str
    header: FileHeader
    descriptors: list[Descriptor]
    path: OpenFile | None = None
    identity: tuple[int, int, int, int] | None = None

    @classmethod
    def open(cls, data: Data) -> VdbFile:
        buf, source, opened = _buffer(data)
        try:
            cur = Cursor(buf, 0, where=f" of {source}")
            header = read_header(cur)
            identity = None if opened is None else _identity(os.fstat(opened.fd))
            return cls(buf, source, header, read_descriptors(cur, header), opened, identity)
        except BaseException:
            if opened is not None:
                os.close(opened.fd)
            raise

    def close(self) -> None:
        """Close the file (the mapped bytes stay readable)."""
        if self.path is not None:
            os.close(self.path.fd)
            self.path = None

    def check_unchanged(self) -> None:
        """Raise :class:`OpenVDBError` when the file was written to in place since it was opened (its
        size or modification time changed): what was read may mix old and new bytes."""
        if self.path is None or self.identity is None:
            return
        now = _identity(os.fstat(self.path.fd))
        if now != self.identity:
            raise OpenVDBError(
                f"expected {self.source} to stay as it was while it was read (size {self.identity[2]}, "
                f"modified at {self.identity[3]} ns), found size {now[2]}, modified at {now[3]} ns: it was "
                "written to in place meanwhile; read it again once its writer is done"
            )

    def select(self, grid: int | str | None) -> Descriptor:
        """The descriptor of grid ``grid``: an index, a name (the first grid of that name) or a unique
        name (``name\\x1e1`` for the second grid of a name); None: the first grid."""
        ds = self.descriptors
        if not ds:
            raise OpenVDBError(f"{self.source} holds no grids")
        if grid is None:
            return ds[0]
        if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
            if not 0 <= grid < len(ds):
                raise OpenVDBError(f"expected a grid index in [0, {len(ds)}) for {self.source}, got {grid}")
            return ds[int(grid)]
        for d in ds:
            if grid in (d.unique_name, d.name):
                return d
        raise OpenVDBError(
            f"expected one of the grid names {[d.unique_name for d in ds]} of {self.source}, got {grid!r}"
        )


@dataclass
class GridHead:
    """A grid's parts before its tree: compression flags, metadata, transform, value layout."""

    desc: Descriptor
    compression: int
    metadata: dict[str, Any]
    map_name: str
    matrix: np.ndarray
    layout: fmt.ValueLayout
    tree_at: int  # byte offset of the tree (its buffer count)


def _layout(d: Descriptor, cur: Cursor) -> fmt.ValueLayout:
    key = fmt.TYPE_NAMES.get(d.type_name)
    if key is not None:
        return fmt.VALUE_LAYOUTS[key]
    if any(p in d.type_name for p in fmt.POINT_TYPES):
        kind = "a point grid (OpenVDB points), not a volume"
    elif d.type_name.startswith("Tree_") and not d.type_name.endswith(fmt.TREE_SUFFIX):
        kind = "a tree of other node sizes than 32^3, 16^3 and 8^3"
    else:
        kind = "a value type vdbflow does not read"
    names = sorted(fmt.TYPE_NAMES)
    raise cur.fail(f"a grid of type {', '.join(names)}", f"{d.type_name!r} for grid {d.unique_name!r} ({kind})", d.at)


def read_head(f: VdbFile, d: Descriptor) -> GridHead:
    """Compression flags, metadata and transform of grid ``d``; its tree offset (an instance's: its
    parent's)."""
    cur = Cursor(f.buf, d.grid_pos, d.end_pos, where=f" of {f.source}, grid {d.unique_name!r}")
    layout = _layout(d, cur)
    at = cur.pos
    compression = cur.u32("the grid's compression flags")
    if compression & ~fmt.COMPRESS_KNOWN:
        raise cur.fail("compression flags of zip (1), active mask (2) and blosc (4)", f"0x{compression:x}", at)
    metadata = read_metadata(cur, "the grid metadata")
    map_name, matrix = read_transform(cur)
    tree_at = cur.pos
    if d.parent:
        parent = next(p for p in f.descriptors if p.unique_name == d.parent)
        if parent.parent:
            raise cur.fail(f"an instance parent {parent.unique_name!r} with its own tree", "an instance of an instance")
        if _layout(parent, cur) != layout:
            raise cur.fail(f"an instance parent of type {d.type_name}", f"type {parent.type_name!r}", d.at)
        head = read_head(f, parent)
        compression, tree_at = head.compression, head.tree_at
        if parent.half != d.half:
            raise cur.fail("an instance saved in its parent's precision", "half floats in only one of them", d.at)
    elif d.block_pos < tree_at:
        raise cur.fail(f"the grid's blocks after its topology (at or after byte {tree_at})", f"{d.block_pos}", d.at)
    return GridHead(d, compression, metadata, map_name, matrix, layout, tree_at)


def _tree(
    f: VdbFile, head: GridHead, early_from: OpenFile | None = None
) -> tuple[Storage, TreeParts, Cursor, EarlyRead | None]:
    """The storage facts, topology and a cursor at the leaf buffers of ``head``'s tree; with
    ``early_from`` (the open file) the leaf records of a large uncompressed value grid are read
    in a helper thread meanwhile (:class:`~vdbflow.io.openvdb.values.EarlyRead`; None otherwise)."""
    d = head.desc
    owner = next(p for p in f.descriptors if p.unique_name == d.parent) if d.parent else d
    cur = Cursor(f.buf, head.tree_at, owner.end_pos, where=f" of {f.source}, grid {owner.unique_name!r}")
    at = cur.pos
    buffers = cur.i32("the tree's buffer count")
    if buffers != 1:
        raise cur.fail("a tree buffer count of 1", f"{buffers}", at)
    layout = head.layout
    raw_bg = cur.array(layout.dtype, layout.components, "the background value")
    dtype = np.dtype(layout.dtype.newbyteorder("="))
    st = Storage(
        head.compression,
        layout.half() if d.half and layout.real else layout,
        dtype,
        layout.components,
        raw_bg.astype(dtype),
    )
    early = None
    if early_from is not None and not layout.topology:
        early = EarlyRead.start(early_from, st, owner.block_pos, cur.end, PARALLEL_LEAVES)
    try:
        parts = read_topology(cur, st)
        if cur.pos != owner.block_pos:
            raise cur.fail(
                f"the topology to end where the descriptor says the blocks start (byte {owner.block_pos})",
                f"byte {cur.pos}",
            )
    except BaseException:
        if early is not None:
            early.join()
        raise
    return st, parts, cur, early


def _transform(head: GridHead, f: VdbFile) -> Transform:
    try:
        return Transform(head.matrix)
    except VolumeError as err:
        raise OpenVDBError(
            f"in {f.source}, grid {head.desc.unique_name!r}: expected an invertible {head.map_name}, found {err}"
        ) from None


def _wanted(leaves: Any, origins: np.ndarray, box: np.ndarray | None, f: VdbFile) -> np.ndarray | None:
    """(L,) bool of the leaves to read: the indices ``leaves`` (tree order, checked) and those of
    ``origins`` (L, 3) that meet the inclusive index box ``box`` (2, 3); None for all."""
    count = len(origins)
    if leaves is None and box is None:
        return None
    wanted = overlaps(origins, fmt.LEAF_DIM, box)
    idx = leaf_indices(leaves, count, OpenVDBError, f.source)
    if idx is not None:
        chosen = np.zeros(count, bool)
        chosen[idx] = True
        wanted &= chosen
    return None if bool(np.all(wanted)) else wanted


def as_box(bbox: Any) -> np.ndarray | None:
    """``bbox`` ((i0, j0, k0), (i1, j1, k1)), inclusive index coordinates, as (2, 3) int64; None for
    None.  Raises :class:`OpenVDBError` for another shape or what is not finite numbers
    (:func:`~vdbflow.io.selection.index_box`)."""
    return index_box(bbox, OpenVDBError)


def _near_tiles(parts: TreeParts, box: np.ndarray | None) -> np.ndarray:
    """(T,) bool: the tiles of ``parts`` that meet ``box`` (all for None)."""
    if box is None:
        return np.ones(len(parts.tile_sizes), bool)
    o = parts.tile_origins.astype(np.int64)
    size = parts.tile_sizes.astype(np.int64)[:, None]
    return np.all((o <= box[1]) & (o + size - 1 >= box[0]), axis=1)


def _together(first: Callable[[], A], second: Callable[[], B], parallel: bool) -> tuple[A, B]:
    """``first()`` in a helper thread while ``second()`` runs in this one (or both here, in order,
    without ``parallel``): their results.  An exception of ``first`` wins over one of ``second``, as
    when they run in order.  For the leaf values (mostly reads and copies in the kernel, which
    release the GIL) beside the topology's hash tables."""
    if not parallel:
        return first(), second()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((first(), None))
        except BaseException as err:  # re-raised in this thread
            outcome.append((None, err))

    helper = threading.Thread(target=run, daemon=True)
    helper.start()
    try:
        done = second()
    except BaseException:
        helper.join()
        if outcome[0][1] is not None:
            raise outcome[0][1] from None
        raise
    helper.join()
    result, err = outcome[0]
    if err is not None:
        raise err
    return result, done


def read_grid(f: VdbFile, d: Descriptor, leaves: Any = None, bbox: Any = None) -> Volume | Topology:
    """Grid ``d`` of ``f``: a per-leaf layout :class:`Volume` (values of all 512 voxels of each leaf,
    inactive ones as the file has them), or a :class:`Topology` for bool and mask grids.  ``leaves``
    (indices in tree order) keeps only those leaves (and every tile); ``bbox`` (inclusive index box
    ((i0, j0, k0), (i1, j1, k1))) only the leaves and tiles that meet it (with ``leaves``: the
    leaves chosen by both).  The other leaves' buffers are passed over without being decompressed."""
    box = as_box(bbox)
    head = read_head(f, d)
    transform = _transform(head, f)
    st, parts, cur, early = _tree(f, head, f.path if leaves is None and box is None else None)
    wanted = _wanted(leaves, parts.leaf_origins, box, f)
    near = _near_tiles(parts, box)
    keep = slice(None) if wanted is None else wanted
    if head.layout.topology:
        read_flag_leaves(cur, parts, head.layout.name == "bool")
        act = parts.tile_active & near
        topo = Topology(
            parts.leaf_origins[keep], parts.masks[keep], transform, parts.tile_origins[act], parts.tile_sizes[act]
        )
        topo.grid_class = str(head.metadata.get("class", "unknown"))
        return topo
    values, topo = _together(
        lambda: read_leaf_values(cur, st, parts.masks, wanted, f.path, early),
        lambda: Topology(
            parts.leaf_origins[keep],
            parts.masks[keep],
            transform,
            parts.tile_origins[near],
            parts.tile_sizes[near],
            tile_active=parts.tile_active[near],
        ),
        len(parts.masks) >= PARALLEL_LEAVES,
    )
    C = st.components
    try:
        value_type_for(st.dtype, C)
        vol = Volume.from_parts(
            topo,
            values if C > 1 else values[:, 0],
            st.background,
            parts.tile_values[near],
            False,
            d.name or "value",
            None,
        )
    except VolumeError as err:
        raise OpenVDBError(f"in {f.source}, grid {d.unique_name!r}: {err}") from None
    vol.units = _units(head.metadata)
    vol.grid_class = str(head.metadata.get("class", "unknown"))
    return vol


def _units(metadata: dict[str, Any]) -> str | None:
    """A grid's ``units`` metadata (a non-empty string), else None."""
    units = metadata.get("units")
    return units if isinstance(units, str) and units else None


def open_vdb(data: Data, grid: int | str | None = None, leaves: Any = None, bbox: Any = None) -> Volume | Topology:
    """One grid of a .vdb file (path, bytes or uint8 array): ``grid`` an index or a name (default the
    first); ``leaves`` (indices in tree order) keeps only those leaves and every tile; ``bbox``
    ((i0, j0, k0), (i1, j1, k1)), inclusive index coordinates, only the leaves and tiles that meet it.
    Value grids become per-leaf layout :class:`Volume` objects, bool and mask grids a
    :class:`Topology`.  Raises :class:`~vdbflow.errors.OpenVDBError` for malformed or unsupported
    files, naming the byte offset, and for a ``bbox`` of another shape."""
    box = as_box(bbox)
    f = VdbFile.open(data)
    try:
        got = read_grid(f, f.select(grid), leaves, box)
        f.check_unchanged()
        return got
    finally:
        f.close()


def _bbox(parts: TreeParts) -> tuple[np.ndarray, np.ndarray] | None:
    boxes = []
    box = tree.active_bbox(parts.leaf_origins, parts.masks)
    if box is not None:
        boxes.append(np.asarray(box, np.int64).reshape(2, 3))
    act = parts.tile_active
    if np.any(act):
        o = parts.tile_origins[act].astype(np.int64)
        s = parts.tile_sizes[act].astype(np.int64)[:, None]
        boxes.append(np.stack([o.min(axis=0), (o + s - 1).max(axis=0)]))
    if not boxes:
        return None
    return np.min([b[0] for b in boxes], axis=0), np.max([b[1] for b in boxes], axis=0)


def grid_info(f: VdbFile, d: Descriptor) -> GridInfo:
    """What grid ``d`` is, from its head and topology (the leaf buffers are not read)."""
    head = read_head(f, d)
    st, parts, _, _ = _tree(f, head)
    m = head.matrix
    box = _bbox(parts)
    lo, hi = (np.zeros(3, np.int64), np.full(3, -1, np.int64)) if box is None else box
    top = hi + 1  # NanoVDB's header box: the index box taken as [min, max + 1], the same for both formats
    corners = np.array([[x, y, z, 1.0] for x in (lo[0], top[0]) for y in (lo[1], top[1]) for z in (lo[2], top[2])])
    world = (m @ corners.T).T[:, :3]
    vt = None if head.layout.topology else value_type_for(st.dtype, st.components)
    end = d.end_pos
    return GridInfo(
        index=d.index,
        name=d.unique_name,
        grid_type=d.type_name + (fmt.HALF_SUFFIX if d.half else ""),
        value_type=vt,
        grid_class=str(head.metadata.get("class", "unknown")),
        leaf_count=len(parts.leaf_origins),
        lower_count=parts.lower_count,
        upper_count=parts.upper_count,
        tile_counts=parts.tile_counts,
        active_voxel_count=parts.active_voxel_count,
        index_bbox=(tuple(int(v) for v in lo), tuple(int(v) for v in hi)),
        world_bbox=(tuple(float(v) for v in world.min(axis=0)), tuple(float(v) for v in world.max(axis=0))),
        index_to_world=m,
        voxel_size=tuple(float(v) for v in np.linalg.norm(m[:3, :3], axis=0)),
        codec="+".join([st.codec] * (st.codec != "none") + ["mask"] * st.mask_compressed + ["half"] * d.half) or "none",
        version=f"OpenVDB file {f.header.file_version}, library {f.header.library_version[0]}."
        f"{f.header.library_version[1]}",
        grid_size=end - d.grid_pos,
        checksum=0,
        units=_units(head.metadata),
    )


def list_vdb(data: Data) -> list[GridInfo]:
    """A :class:`~vdbflow.GridInfo` for each grid of a .vdb file, in file order, from the grids'
    heads and topologies (leaf buffers are not read).  ``name`` is the unique name (a repeated
    name carries OpenVDB's ``\\x1e`` and a number); ``checksum`` is 0 (.vdb files have none)."""
    f = VdbFile.open(data)
    try:
        return [grid_info(f, d) for d in f.descriptors]
    finally:
        f.close()
