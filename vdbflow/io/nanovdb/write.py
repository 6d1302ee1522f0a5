"""Writing NanoVDB (.nvdb) files: a grid's headers and checksum as the chosen NanoVDB version writes them,
one grid buffer from its parts (:mod:`~vdbflow.io.nanovdb.encode`), and the public :func:`save`."""

from __future__ import annotations

import errno
import mmap
import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core.atomic import atomic_file
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError, WriteError
from vdbflow.io.bounded_json import not_text
from vdbflow.io.mapped import FileMap
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.checksum import blocked_crc, node_crcs, span_crc
from vdbflow.io.nanovdb.codec import BLOSC_MAX_CHUNK
from vdbflow.io.nanovdb.encode import (
    blind_records,
    put,
    value_bytes,
    write_blind_data,
    write_leaves,
    write_lower_nodes,
    write_root,
    write_upper_nodes,
)
from vdbflow.io.nanovdb.header import EMPTY_CHECKSUM, grid_header
from vdbflow.io.nanovdb.plan import (
    GridContents,
    GridOffsets,
    NodePlan,
    grid_contents,
    node_boxes,
    plan_nodes,
    plan_offsets,
)


def _write_headers(
    buf: np.ndarray,
    off: GridOffsets,
    plan: NodePlan,
    contents: GridContents,
    raw_name: bytes,
    grid_class: str | None,
    n_blind: int,
    form: fmt.WriteFormat,
    tile_voxels: int,
    position: tuple[int, int],
) -> None:
    """The tree header (node offsets from it, all 0 in an empty tree as NanoVDB writes it, node and tile
    counts, active voxels of leaves and tiles) and the grid header (magic, version, flags, position (index,
    count), size, name, map, bboxes, voxel size, class, type, blind data, value count, data2) as ``form``'s
    version writes them; the checksum is written last, by :func:`_write_checksum`."""
    layout, topo = contents.layout, contents.topo
    t = fmt.GRID_SIZE
    # no root entries; a tree with tiles but no leaves keeps its offsets (32.4's validator follows them)
    empty = not (plan.counts[2] or plan.root_tiles.any())
    put(
        buf,
        t,
        fmt.TREE_FORMAT,
        *([0, 0, 0] if empty else [off.leaf - t, off.lower - t, off.upper - t]),
        off.root - t,
        *plan.counts,
        int((plan.lower_tiles & plan.tile_active).sum()),  # the tree counts active tiles
        int((plan.upper_tiles & plan.tile_active).sum()),
        int((plan.root_tiles & plan.tile_active).sum()),
        topo.active_voxel_count + tile_voxels,
    )
    M = topo.transform.index_to_world
    Minv = topo.transform.world_to_index
    box = topo.active_bbox  # what NanoVDB states: active voxels and active tiles
    has_bbox = box is not None
    put(
        buf,
        fmt.GRID_OFF_MAGIC,
        fmt.GRID_HEAD_FORMAT,
        form.grid_magic,
        EMPTY_CHECKSUM,
        form.version,
        (fmt.GRID_FLAG_HAS_BBOX if has_bbox else 0) | fmt.GRID_FLAG_BREADTH_FIRST,
        *position,
        off.size,
    )
    buf[fmt.GRID_OFF_NAME : fmt.GRID_OFF_NAME + len(raw_name)] = np.frombuffer(raw_name, np.uint8)
    big = float(max(np.abs(M).max(), np.abs(Minv).max()))
    if big > float(np.finfo(np.float32).max):  # the float copy of the map could not hold it
        raise NanoVDBError(
            f"expected an index-to-world matrix and inverse within the float32 range of NanoVDB's float map "
            f"(|entries| <= {np.finfo(np.float32).max:.4g}), got an entry of magnitude {big:.4g} for grid {raw_name!r}"
        )
    m = fmt.GRID_OFF_MAP
    put(buf, m + fmt.MAP_OFF_MATF, "<9f", *M[:3, :3].ravel())
    put(buf, m + fmt.MAP_OFF_INVMATF, "<9f", *Minv[:3, :3].ravel())
    put(buf, m + fmt.MAP_OFF_VECF, "<3f", *M[:3, 3])
    put(buf, m + fmt.MAP_OFF_TAPERF, "<f", 1.0)
    put(buf, m + fmt.MAP_OFF_MATD, "<9d", *M[:3, :3].ravel())
    put(buf, m + fmt.MAP_OFF_INVMATD, "<9d", *Minv[:3, :3].ravel())
    put(buf, m + fmt.MAP_OFF_VECD, "<3d", *M[:3, 3])
    put(buf, m + fmt.MAP_OFF_TAPERD, "<d", 1.0)
    wb = topo.transform.apply_box(box[0], box[1] + 1.0) if box is not None else np.array(fmt.EMPTY_WORLD_BBOX)
    put(buf, fmt.GRID_OFF_WORLD_BBOX, "<6d", *wb.ravel())
    put(buf, fmt.GRID_OFF_VOXEL_SIZE, "<3d", *topo.voxel_size)
    class_code = {name: code for code, name in fmt.GRID_CLASSES.items()}.get(grid_class)
    if class_code is None or class_code == fmt.GRID_CLASS_UNKNOWN or class_code >= form.grid_class_end:
        class_code = fmt.GRID_CLASS_INDEX if layout.is_index else fmt.GRID_CLASS_UNKNOWN
    put(buf, fmt.GRID_OFF_CLASS, "<II", class_code, layout.grid_type)
    put(buf, fmt.GRID_OFF_BLIND_OFFSET, "<qI", off.blind if n_blind else 0, n_blind)
    put(buf, fmt.GRID_OFF_DATA0, "<IQQ", 0, contents.value_count, form.grid_data2)


def _write_checksum(
    buf: np.ndarray, off: GridOffsets, layout: fmt.GridLayout, plan: NodePlan, form: fmt.WriteFormat
) -> None:
    """The full checksum by the rules of ``form``'s version.  Up to 32.6.0: the head over the grid, tree,
    root and root tiles, the tail over the CRC32s of every node (8-byte entries in 32.4's Linux builds,
    u32 in 32.6.0), none for an empty root.  Later: the head over the grid and tree, the tail over the
    CRC32s of the 4 KiB blocks of the rest."""
    if form.checksum == fmt.CHECKSUM_BLOCKS:
        head_end = fmt.GRID_SIZE + fmt.TREE_SIZE
        head, tail = span_crc(buf, fmt.CHECKSUM_HEAD_START, head_end), blocked_crc(buf, head_end, off.size)
    else:
        n_leaf, n_low, n_up = plan.counts
        head = span_crc(buf, fmt.CHECKSUM_HEAD_START, off.upper)
        arrays = [
            (off.upper, n_up, layout.upper_size),
            (off.lower, n_low, layout.lower_size),
            (off.leaf, n_leaf, layout.leaf_size),
        ]
        entry = "<u8" if form.checksum == fmt.CHECKSUM_NODES_U64 else "<u4"
        n_root = n_up + int(plan.root_tiles.sum())
        tail = zlib.crc32(node_crcs(buf, arrays).astype(entry).tobytes()) & 0xFFFFFFFF if n_root else fmt.EMPTY_CRC32
    put(buf, fmt.GRID_OFF_CHECKSUM, "<II", head, tail)


@dataclass(frozen=True)
class _GridParts:
    """A grid being written, planned: what it holds, its nodes and their boxes, blind data and byte offsets."""

    obj: Volume | Topology
    raw_name: bytes
    contents: GridContents
    plan: NodePlan
    boxes: Any
    blind: tuple
    off: GridOffsets


def _plan_grid(obj: Volume | Topology, name: str, form: fmt.WriteFormat) -> _GridParts:
    """``obj`` planned as one NanoVDB grid (value grid for a Volume, OnIndex grid for a Topology) of
    ``form``'s version: its nodes planned and its bytes laid out, nothing written yet."""
    contents = grid_contents(obj)
    raw_name = name.encode("utf-8")
    if len(raw_name) >= fmt.GRID_NAME_SIZE:
        raise NanoVDBError(f"grid name of {len(raw_name)} bytes is too long (at most {fmt.GRID_NAME_SIZE - 1})")
    layout = contents.layout
    if layout.grid_type >= form.grid_type_end:
        raise NanoVDBError(
            f"grid {name!r} is a {fmt.GRID_TYPE_NAMES[layout.grid_type]} grid, which NanoVDB {form.name} does not "
            f"know; expected version={fmt.DEFAULT_INDEX_WRITE_VERSION!r} or later (or version=None) to write it"
        )
    plan = plan_nodes(contents.topo)
    boxes = node_boxes(plan, contents.topo)
    blind = blind_records(obj)
    return _GridParts(obj, raw_name, contents, plan, boxes, blind, plan_offsets(layout, plan, blind))


def _write_grid(buf: np.ndarray, g: _GridParts, form: fmt.WriteFormat, position: tuple[int, int]) -> int:
    """Write the planned grid ``g`` into ``buf`` (``g.off.size`` zeroed bytes: memory, or a file mapped for
    writing), leaves first (span by span) and the headers and checksum last; its active voxel count
    (tiles included)."""
    contents, off, plan, boxes = g.contents, g.off, g.plan, g.boxes
    layout = contents.layout
    write_blind_data(buf, off, g.blind)
    bg_bytes = value_bytes(contents.background, layout)[0]
    tile_values = contents.tile_values
    tile_bytes = value_bytes(tile_values, layout) if len(tile_values) else np.zeros((0, layout.value_size), np.uint8)
    write_leaves(buf, off, plan, contents)
    write_lower_nodes(buf, off, layout, plan, boxes, bg_bytes, tile_bytes)
    write_upper_nodes(buf, off, layout, plan, boxes, bg_bytes, tile_bytes)
    write_root(buf, off, layout, plan, contents.topo, bg_bytes, tile_bytes)
    grid_class = getattr(g.obj, "grid_class", None)
    _write_headers(buf, off, plan, contents, g.raw_name, grid_class, len(g.blind), form, boxes.tile_voxels, position)
    _write_checksum(buf, off, layout, plan, form)
    return contents.topo.active_voxel_count + boxes.tile_voxels


def _encode_grid(
    obj: Volume | Topology, name: str, form: fmt.WriteFormat, position: tuple[int, int]
) -> tuple[bytes, int]:
    """One NanoVDB grid buffer in memory (:func:`_plan_grid`, :func:`_write_grid`) and its active voxel count."""
    g = _plan_grid(obj, name, form)
    buf = np.zeros(g.off.size, np.uint8)
    voxels = _write_grid(buf, g, form, position)
    return buf.tobytes(), voxels


def _metadata(name: str, grid: np.ndarray, payload_size: int, voxels: int, obj: Any, codec: str, form: Any) -> bytes:
    """The file's metadata record of one grid (``grid``: its bytes, whose header it repeats) and its name."""
    h = grid_header(grid, 0)
    raw_name = name.encode("utf-8") + b"\0"
    topo = obj if isinstance(obj, Topology) else obj.topology
    box = topo.active_bbox if topo.active_bbox is not None else np.array(fmt.EMPTY_INDEX_BBOX)
    meta = struct.pack(
        fmt.FILE_METADATA_FORMAT,
        h["grid_size"],
        payload_size,
        name_key(name),
        voxels,
        h["grid_type"],
        h["grid_class"],
        *h["world_bbox"],
        *[int(x) for x in box.ravel()],
        *h["voxel_size"],
        len(raw_name),
        *h["node_counts"],
        1,
        *h["tile_counts"],
        fmt.CODEC_IDS[codec],
        0,
        form.version,
    )
    return meta + raw_name


def _save_uncompressed(path: str, grids: Mapping[str, Volume | Topology], form: fmt.WriteFormat) -> None:
    """An uncompressed file written in place: the grids planned, the file sized, then each grid written
    into its mapped bytes span by span (the pages given back as it goes), so that the memory it takes
    beside the volumes is a few spans, not the file."""
    parts = [_plan_grid(obj, name, form) for name, obj in grids.items()]
    head = fmt.FILE_HEADER_SIZE + sum(fmt.FILE_METADATA_SIZE + len(g.raw_name) + 1 for g in parts)
    starts = np.cumsum([head] + [g.off.size for g in parts]).tolist()
    with atomic_file(path, readable=True) as fh:
        fh.truncate(starts[-1])
        # (on an error the mapping goes with the arrays the traceback holds; atomic_file removes the file)
        mapping = FileMap(fh.fileno(), starts[-1], access=mmap.ACCESS_WRITE)
        whole = np.frombuffer(mapping, np.uint8)
        metas = []
        for n, (g, at, name) in enumerate(zip(parts, starts, grids, strict=False)):
            grid = whole[at : at + g.off.size]
            voxels = _write_grid(grid, g, form, (0, 1) if form.grids_stand_alone else (n, len(parts)))
            metas.append(_metadata(name, grid, g.off.size, voxels, g.obj, "none", form))
            del grid
        header = struct.pack(fmt.FILE_HEADER_FORMAT, form.file_magic, form.version, len(parts), 0)
        whole[:head] = np.frombuffer(header + b"".join(metas), np.uint8)
        del whole
        mapping.flush()
        mapping.close()


def write_format(version: str | None, grids: Mapping[str, Volume | Topology]) -> fmt.WriteFormat:
    """The layout facts of the NanoVDB ``version`` to write ("32.4" ... "32.9"); None: 32.4, or 32.6 when
    a grid is an OnIndex grid (a Topology), which 32.4 does not know."""
    if version is None:
        has_index = any(isinstance(obj, Topology) for obj in grids.values())
        version = fmt.DEFAULT_INDEX_WRITE_VERSION if has_index else fmt.DEFAULT_WRITE_VERSION
    form = fmt.WRITE_FORMATS.get(version) if isinstance(version, str) else None
    if form is None:
        raise NanoVDBError(f"expected a NanoVDB version to write, one of {sorted(fmt.WRITE_FORMATS)}, got {version!r}")
    return form


def name_key(name: str) -> int:
    """NanoVDB's io::stringHash of a grid name (the metadata's name key, by which readers find a grid)."""
    key = 0
    for byte in name.encode("utf-8"):
        key = (key * fmt.NAME_HASH_PRIME + byte + (key >> 56)) & 0xFFFFFFFFFFFFFFFF
    return key


def _checked_path(path: Any) -> str:
    """``path`` (str, bytes or os.PathLike) as a str; a :class:`WriteError` for a NUL byte in it or
    another type."""
    try:
        text = os.fsdecode(path)
    except TypeError:
        raise WriteError(
            errno.EINVAL, f"expected a path as str, bytes or os.PathLike, got {type(path).__name__}"
        ) from None
    if "\0" in text:
        raise WriteError(errno.EINVAL, f"expected a path without NUL bytes, got {text!r:.200}; nothing was written")
    return text


def _check_grid_name(name: Any) -> None:
    """A grid name save() writes as given: UTF-8 text without NUL bytes (C strings end at one)."""
    problem = not_text(name)
    if problem is None and "\0" in name:
        problem = f"{name!r:.60}, which holds a NUL byte (NanoVDB names end at the first one)"
    if problem is not None:
        raise NanoVDBError(f"expected each grid name as a str of UTF-8 text, got {problem}")


def save(
    path: str | bytes | os.PathLike,
    grids: dict[str, Volume | Topology],
    codec: str = "none",
    version: str | None = None,
) -> None:
    """Write grids to one .nvdb file: value grids for Volumes, OnIndex grids for Topologies.

    Volumes in the index layout are written with their values spread over whole leaves
    (background elsewhere).  Units, length units and component names travel in a
    ``vdbflow.metadata`` blind data record (plain bytes to other NanoVDB tools), beside the
    blind data records a volume read from a file brought along.  The file is written in a private
    directory beside ``path`` (``.NAME.tmp-TAG``, made with ``mkdir`` and ``O_EXCL | O_NOFOLLOW``)
    and then renamed onto it, so a reader never sees it half written, a link planted nearby is
    never written through, and a failed write (a full disk) leaves nothing behind.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (replaced if it exists).
    grids : dict of str to Volume or Topology
        Grid name (under 256 bytes of UTF-8) -> what to write, in file order.  Volumes must have a
        value type NanoVDB can hold (the nine of ``vdbflow.VALUE_TYPES``): float32, float64,
        int32, int64 or uint32 scalars, or vec3 or vec4 of float32 or float64.
    codec : {"none", "zip", "blosc"}, default ``"none"``
        Compression of each grid's payload (``"blosc"`` needs numcodecs).  Uncompressed files can
        be read in part (``vdbflow.open(..., bbox=...)``) without reading the rest.
    version : {"32.4", "32.6", "32.7", "32.8", "32.9"} or None, default None
        The NanoVDB version whose magic numbers, version number and checksum rules the file follows.
        None writes 32.4 (OpenVDB 10: what every NanoVDB reader since, Warp and vdbflow open), or
        32.6 when a grid is a Topology (OnIndex grids are unknown to 32.4).

    Returns
    -------
    None

    Raises
    ------
    NanoVDBError
        An unknown codec or version, no grids, a value type with no NanoVDB grid type (e.g. 9
        components), a Topology with version "32.4", or a grid name that is too long.
    WriteError
        The file could not be written (a full disk, no permission); ``path`` is as it was.

    See Also
    --------
    vdbflow.open : read a grid back.
    list_grids : the grids of a file, from the headers.
    Volume.to_nvdb : write one volume.

    Examples
    --------
    A round trip through a temporary directory; the units come back with the values:

    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> import vdbflow
    >>> ijk = np.array([[i, j, k] for i in range(4) for j in range(4) for k in range(4)])
    >>> vol = vdbflow.Volume.from_voxels(ijk, (2 * ijk[:, 0] + 3 * ijk[:, 1]).astype(np.float32), voxel_size=0.5)
    >>> vol.units, vol.length_units = "K", "m"
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "ramp.nvdb")
    ...     vdbflow.save(path, {"temperature": vol}, codec="zip")
    ...     info = vdbflow.list_grids(path)
    ...     back = vdbflow.open(path, "temperature")
    ...     value = back.sample([[0.75, 0.625, 1.0]])["temperature"].values.tolist()
    ...     units = back.units, back.length_units
    ...     del back
    >>> [(g.name, g.grid_type, g.active_voxel_count, g.codec) for g in info]
    [('temperature', 'Float', 64, 'zip')]
    >>> value, units
    ([6.75], ('K', 'm'))
    """
    if codec not in fmt.CODEC_IDS:
        raise NanoVDBError(f"expected codec 'none', 'zip' or 'blosc', got {codec!r}")
    if isinstance(grids, (Volume, Topology)):
        raise NanoVDBError(
            f"expected grids as a dict of name -> Volume or Topology, got a {type(grids).__name__}: "
            f"save(path, {{{grids.name if isinstance(grids, Volume) else 'name'!r}: volume}}), or volume.to_nvdb(path)"
        )
    if not isinstance(grids, Mapping):
        raise NanoVDBError(f"expected grids as a dict of name -> Volume or Topology, got {type(grids).__name__}")
    if not grids:
        raise NanoVDBError("expected at least one grid to save, got none")
    path = _checked_path(path)
    for name in grids:
        _check_grid_name(name)
    form = write_format(version, grids)
    if codec == "none":
        _save_uncompressed(path, grids, form)
        return
    payloads, metas = [], []
    for n, (name, obj) in enumerate(grids.items()):
        grid, voxels = _encode_grid(obj, name, form, (0, 1) if form.grids_stand_alone else (n, len(grids)))
        if codec == "zip":
            payload = struct.pack("<Q", len(packed := zlib.compress(grid))) + packed
        else:  # blosc: chunks of at most 1 GiB, each after its u64 size, as NanoVDB writes them
            from numcodecs import Blosc

            frame_codec = Blosc(cname="lz4", clevel=9, shuffle=Blosc.SHUFFLE)
            words = np.frombuffer(grid, np.uint32 if len(grid) % 4 == 0 else np.uint8)  # typesize 4: 32-bit values
            step = BLOSC_MAX_CHUNK // words.itemsize
            frames = [bytes(frame_codec.encode(words[at : at + step])) for at in range(0, len(words), step)]
            payload = b"".join(struct.pack("<Q", len(f)) + f for f in frames)
        metas.append(_metadata(name, np.frombuffer(grid, np.uint8), len(payload), voxels, obj, codec, form))
        payloads.append(payload)
    header = struct.pack(fmt.FILE_HEADER_FORMAT, form.file_magic, form.version, len(grids), fmt.CODEC_IDS[codec])
    with atomic_file(path) as fh:  # a private directory beside `path`, never a predictable name
        fh.write(header)
        for meta in metas:
            fh.write(meta)
        for payload in payloads:
            fh.write(payload)
