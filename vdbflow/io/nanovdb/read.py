"""Reading NanoVDB (.nvdb) files and raw grid buffers: file segments (header, metadata and names,
payloads), memory-mapped files, multi-grid payloads, the grid asked for, and :func:`open_grid` and
:func:`list_grids` of local files and buffers (URLs: :mod:`~vdbflow.io.nanovdb.entry`)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from vdbflow.core.value_types import VALUE_TYPES, ValueType
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError
from vdbflow.io.location import local_path
from vdbflow.io.mapped import map_file
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.codec import compressed_chunks, decompress
from vdbflow.io.nanovdb.decode import decode_grid, read_blind_data
from vdbflow.io.nanovdb.header import MAX_GRID_BYTES, MAX_NAME_BYTES, grid_header, need, unpack
from vdbflow.io.nanovdb.metadata import stored_metadata
from vdbflow.io.nanovdb.records import GridInfo, GridSource
from vdbflow.io.selection import index_box

_T = TypeVar("_T")


def named(url: str, read: Callable[[], _T]) -> _T:
    """``read()``, a NanoVDBError from it naming ``url`` (the parser of a fetched buffer names bytes only)."""
    try:
        return read()
    except NanoVDBError as err:
        if url in str(err):
            raise
        raise NanoVDBError(f"{url}: {err}") from None


# the first bytes of files people pass by mistake, and what to do with them
_OTHER_FORMATS = {
    b"\x89HDF\r\n\x1a\n": "an HDF5 file (NetCDF-4 or VTKHDF, e.g. a job's result): open it with "
    "vdbflow.open_result (NetCDF), xarray or h5py",
    b"CDF\x01": "a NetCDF-3 file: open it with xarray",
    b"CDF\x02": "a NetCDF-3 file: open it with xarray",
    b"\x93NUMPY": "a NumPy .npy file: load it with numpy.load (points, or dense data for vdbflow convert)",
    b"PK\x03\x04": "a zip archive (a zipped Zarr store or .npz?): unpack it first",
    b"\x1f\x8b": "a gzip-compressed file: decompress it first",
}


def _known_format(magic: int) -> str | None:
    """What a file whose first 8 bytes read as ``magic`` (little endian) is, when it is a known other format."""
    head = int(magic).to_bytes(8, "little")
    return next((what for start, what in _OTHER_FORMATS.items() if head.startswith(start)), None)


def _segments(buf: np.ndarray, file_name: str | None) -> list[tuple[dict[str, Any], GridSource]]:
    """(file metadata, source) of every grid in a file buffer, segment after segment."""
    out: list[tuple[dict[str, Any], GridSource]] = []
    pos = 0
    while pos < len(buf):
        magic, version, count, codec_id = unpack(buf, pos, fmt.FILE_HEADER_FORMAT, "file header")
        if magic not in fmt.FILE_MAGICS:
            other = _known_format(magic) if pos == 0 else None
            raise NanoVDBError(
                f"expected a NanoVDB file header at byte {pos}, found magic 0x{magic:016x}"
                + (f": this is {other}" if other else "")
            )
        major, minor, patch = fmt.version_parts(version)
        if major != fmt.MAJOR_VERSION:
            raise NanoVDBError(
                f"unsupported NanoVDB file version {major}.{minor}.{patch} at byte "
                f"{pos + fmt.FILE_OFF_VERSION} (vdbflow reads major version 32)"
            )
        codec = fmt.CODECS.get(codec_id)
        if codec is None:
            raise NanoVDBError(
                f"unknown codec {codec_id} at byte {pos + fmt.FILE_OFF_CODEC} (expected 0 none, 1 zip, 2 blosc)"
            )
        if count == 0:
            raise NanoVDBError(
                f"file segment at byte {pos} holds no grids (grid count at byte {pos + fmt.FILE_OFF_GRID_COUNT})"
            )
        meta_pos = pos + fmt.FILE_HEADER_SIZE
        metas = []
        for _ in range(count):
            gsize, fsize, _key, voxels, gtype, gclass = unpack(buf, meta_pos, "<QQQQII", "grid metadata")
            name_size = unpack(buf, meta_pos + fmt.FILE_META_OFF_NAME_SIZE, "<I", "grid metadata")[0]
            if gsize > MAX_GRID_BYTES or fsize > MAX_GRID_BYTES or name_size > MAX_NAME_BYTES:
                raise NanoVDBError(
                    f"grid metadata at byte {meta_pos} gives absurd sizes "
                    f"(grid {gsize}, file {fsize}, name {name_size} bytes)"
                )
            if gsize < fmt.GRID_SIZE + fmt.TREE_SIZE:
                raise NanoVDBError(
                    f"grid metadata at byte {meta_pos} gives a grid size of {gsize} bytes, expected "
                    f"at least {fmt.GRID_SIZE + fmt.TREE_SIZE}"
                )
            need(buf, meta_pos + fmt.FILE_METADATA_SIZE, name_size, "grid name")
            name = bytes(buf[meta_pos + fmt.FILE_METADATA_SIZE : meta_pos + fmt.FILE_METADATA_SIZE + name_size])
            metas.append(
                dict(
                    grid_size=gsize,
                    file_size=fsize,
                    name=name.split(b"\0", 1)[0].decode("utf-8", "replace"),
                    codec=codec,
                    version=f"{major}.{minor}.{patch}",
                    meta_offset=meta_pos,
                )
            )
            meta_pos += fmt.FILE_METADATA_SIZE + name_size
        pos = meta_pos
        for meta in metas:
            if codec == "none":
                need(buf, pos, meta["grid_size"], f"grid {meta['name']!r}")
                out.append((meta, GridSource(buf, pos, codec, file_name)))
                pos += meta["grid_size"]
            else:
                chunks = compressed_chunks(buf, pos, codec, meta["grid_size"], meta["name"])
                out.append((meta, GridSource(buf, 0, codec, file_name, tuple(chunks))))
                pos = chunks[-1][0] + chunks[-1][1]
    return out


def _sources(data: str | os.PathLike | bytes | np.ndarray) -> list[tuple[dict[str, Any], GridSource]]:
    if isinstance(data, (str, os.PathLike)):
        buf, name = map_file(data), os.fspath(data)
    else:
        buf, name = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data, None
    if len(buf) < fmt.MAGIC_SIZE:
        raise NanoVDBError(f"expected a NanoVDB file header or grid at byte 0, but the buffer ends at byte {len(buf)}")
    magic = struct.unpack_from("<Q", buf, fmt.GRID_OFF_MAGIC)[0]  # a grid's and a file's magic alike
    if magic == fmt.MAGIC_GRID or (magic == fmt.MAGIC_NUMBER and looks_like_grid(buf)):
        return _raw_grids(buf, name)
    return _segments(buf, name)


def looks_like_grid(buf: np.ndarray) -> bool:
    """A buffer starting with the legacy magic is a raw grid when its version field (at byte 16)
    reads as major 32 and bytes 8..12 do not (a file keeps its version at byte 8)."""
    if len(buf) < fmt.GRID_SIZE:
        return False
    file_version = struct.unpack_from("<I", buf, fmt.FILE_OFF_VERSION)[0]
    grid_version = struct.unpack_from("<I", buf, fmt.GRID_OFF_VERSION)[0]
    return (
        fmt.version_parts(grid_version)[0] == fmt.MAJOR_VERSION
        and fmt.version_parts(file_version)[0] != fmt.MAJOR_VERSION
    )


def _raw_grids(buf: np.ndarray, name: str | None) -> list[tuple[dict[str, Any], GridSource]]:
    """Grid buffers back to back, without a file header (as NanoVDB keeps them in memory)."""
    out = []
    pos = 0
    while pos < len(buf):
        h = grid_header(buf, pos)
        major, minor, patch = fmt.version_parts(h["version"])
        out.append(
            (
                dict(grid_size=h["grid_size"], name=h["name"], codec="none", version=f"{major}.{minor}.{patch}"),
                GridSource(buf, pos, "none", name),
            )
        )
        pos += h["grid_size"]
    return out


def _grid_buffer(meta: dict[str, Any], src: GridSource) -> tuple[np.ndarray, int]:
    if src.codec == "none":  # the grid may not reach past the bytes its metadata gives it
        return src.buffer[: src.offset + meta["grid_size"]], src.offset
    return decompress(src, meta["grid_size"]), 0


@dataclass
class _Grid:
    """One grid ready to decode: its file metadata, buffer and offset, and position in its payload."""

    meta: dict[str, Any]
    buffer: np.ndarray
    offset: int
    position: tuple[int, int]


def _payload_grids(meta: dict[str, Any], src: GridSource) -> list[_Grid]:
    """The grids of one payload: one, or (as NanoVDB wrote a multi-grid buffer before 32.6, under the
    first grid's metadata) several back to back that fill the payload exactly."""
    buf, offset = _grid_buffer(meta, src)
    end = offset + meta["grid_size"]
    where = "" if src.codec == "none" else f" of the {src.codec} payload at byte {src.chunks[0][0]}"
    starts = [offset]
    while True:
        h = grid_header(buf, starts[-1])
        after = starts[-1] + h["grid_size"]
        if after == end:
            break
        if (
            end - after < fmt.GRID_SIZE + fmt.TREE_SIZE
            or struct.unpack_from("<Q", buf, after)[0] not in fmt.GRID_MAGICS
        ):
            raise NanoVDBError(
                f"the grid at byte {starts[-1]}{where} ends at byte {after}, but its file metadata gives "
                f"{meta['grid_size']} bytes (to byte {end}) and no further grid starts there"
            )
        starts.append(after)
    if len(starts) == 1:
        return [_Grid(meta, buf, offset, (0, 1))]
    out = []
    for n, at in enumerate(starts):
        h = grid_header(buf, at)
        out.append(_Grid(dict(meta, name=h["name"], grid_size=h["grid_size"]), buf, at, (n, len(starts))))
    return out


def _grids(data: str | os.PathLike | bytes | np.ndarray) -> Iterator[_Grid]:
    """Every grid of a file or buffer, in order; compressed payloads are decompressed as reached."""
    for meta, src in _sources(data):
        yield from _payload_grids(meta, src)


def select_grid(data: str | os.PathLike | bytes | np.ndarray, grid: int | str | None) -> _Grid:
    """The grid ``grid`` (index or name; None: the first) of a file or buffer, ready to decode: its file
    metadata (``meta``), ``buffer``, ``offset`` and ``position`` in its payload."""
    seen = []
    for n, g in enumerate(_grids(data)):
        if (
            grid is None
            or (isinstance(grid, str) and g.meta["name"] == grid)
            or (isinstance(grid, (int, np.integer)) and not isinstance(grid, bool) and n == grid)
        ):
            return g
        seen.append(g.meta["name"])
    if isinstance(grid, (int, np.integer)):
        raise NanoVDBError(f"expected a grid index in [0, {len(seen)}), got {grid}")
    names = ", ".join(
        f"{name!r}" if name else f"(unnamed: grid {n}, sampled as 'value')" for n, name in enumerate(seen)
    )
    raise NanoVDBError(f"expected one of the grid names [{names}] or a grid index, got {grid!r}")


def open_grid(
    data: str | os.PathLike | bytes | np.ndarray,
    grid: int | str | None = None,
    *,
    bbox: Any = None,
    leaves: Any = None,
    checksum: bool | str = True,
) -> Volume | Topology:
    """A grid of a local .nvdb file (memory-mapped) or of an in-memory buffer: what
    :func:`vdbflow.io.nanovdb.open_grid` reads for anything but a URL (its arguments)."""
    box = index_box(bbox, NanoVDBError)
    g = select_grid(local_path(data) if isinstance(data, (str, os.PathLike)) else data, grid)
    _, result = decode_grid(g.buffer, g.offset, box, leaves, checksum, g.position)
    return result


def _value_type(grid_type: int) -> ValueType | None:
    """The value type a grid of NanoVDB type ``grid_type`` is read as (quantised grids: float32); None for
    index and topology grids (Index, OnIndex, Mask, Boolean) and for types vdbflow does not read."""
    layout = fmt.LAYOUTS.get(grid_type)
    return None if layout is None or layout.value_type is None else VALUE_TYPES[layout.value_type]


def list_grids(data: str | os.PathLike | bytes | np.ndarray) -> list[GridInfo]:
    """What each grid of a local .nvdb file or a buffer is, from the headers alone: what
    :func:`vdbflow.io.nanovdb.list_grids` lists for anything but a URL."""
    if isinstance(data, (str, os.PathLike)):
        data = local_path(data)
    infos = []
    for n, g in enumerate(_grids(data)):
        buf, meta = g.buffer, g.meta
        h = grid_header(buf, g.offset)
        bbox = unpack(buf, h["tree"] + h["node_offsets"][3] + fmt.ROOT_OFF_BBOX, "<6i", "root bbox")
        wb = h["world_bbox"]
        infos.append(
            GridInfo(
                index=n,
                name=h["name"],
                grid_type=fmt.GRID_TYPE_NAMES.get(h["grid_type"], str(h["grid_type"])),
                value_type=_value_type(h["grid_type"]),
                grid_class=fmt.GRID_CLASSES.get(h["grid_class"], str(h["grid_class"])),
                leaf_count=h["node_counts"][0],
                lower_count=h["node_counts"][1],
                upper_count=h["node_counts"][2],
                tile_counts=tuple(h["tile_counts"]),
                active_voxel_count=h["voxel_count"],
                index_bbox=(tuple(bbox[:3]), tuple(bbox[3:])),
                world_bbox=(tuple(wb[:3]), tuple(wb[3:])),
                index_to_world=h["index_to_world"],
                voxel_size=tuple(h["voxel_size"]),
                codec=meta["codec"],
                version=meta["version"],
                grid_size=h["grid_size"],
                checksum=h["checksum"],
                **stored_metadata(read_blind_data(buf, g.offset, h)),
            )
        )
    return infos
