"""The head of a .vdb file: the file header (magic, versions, grid offsets flag, UUID), the file's
metadata, and the grid descriptors (unique name, type, instance parent, and the offsets of each
grid's start, data blocks and end)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.metadata import read_metadata
from vdbflow.io.openvdb.stream import Cursor


@dataclass(frozen=True)
class FileHeader:
    """A .vdb file's header: file format version, library version (major, minor), whether grid
    descriptors carry offsets (delayed and partial loading), the UUID and the file metadata."""

    file_version: int
    library_version: tuple[int, int]
    has_grid_offsets: bool
    uuid: str
    metadata: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Descriptor:
    """One grid descriptor: ``unique_name`` (OpenVDB appends ``\\x1e`` and a number to repeated
    names), ``name`` (without it), ``type_name`` (without ``_HalfFloat``), ``half`` (saved as half
    floats), ``parent`` (the instance parent's unique name, or ""), and the byte offsets of the
    grid (``grid_pos``), its leaf buffers (``block_pos``) and its end (``end_pos``)."""

    index: int
    unique_name: str
    name: str
    type_name: str
    half: bool
    parent: str
    grid_pos: int
    block_pos: int
    end_pos: int
    at: int  # byte offset of the descriptor


def read_header(cur: Cursor) -> FileHeader:
    """The header at byte 0; the cursor ends at the first grid descriptor's count."""
    magic = cur.i64("the file's magic number")
    if magic != fmt.MAGIC:
        raise cur.fail(f"OpenVDB's magic number 0x{fmt.MAGIC:08x}", f"0x{magic & (2**64 - 1):016x}", 0)
    version = cur.u32("the file format version")
    if not fmt.MIN_FILE_VERSION <= version <= fmt.MAX_FILE_VERSION:
        raise cur.fail(
            f"a file format version from {fmt.MIN_FILE_VERSION} to {fmt.MAX_FILE_VERSION} (OpenVDB 3.0 and later)",
            f"version {version}",
            8,
        )
    major, minor = cur.u32("the library major version"), cur.u32("the library minor version")
    offsets = cur.u8("the grid offsets flag")
    uuid = bytes(cur.take(fmt.UUID_SIZE, "the file's UUID")).decode("ascii", "replace")
    metadata = read_metadata(cur, "the file metadata")
    return FileHeader(version, (major, minor), bool(offsets), uuid, metadata)


def _split_unique(unique: str) -> str:
    return unique.split("\x1e", 1)[0]


def read_descriptor(cur: Cursor, index: int, with_offsets: bool) -> Descriptor:
    """One descriptor at the cursor; the cursor ends after its offsets (if any)."""
    at = cur.pos
    unique = cur.string("a grid name")
    type_name = cur.string(f"the type of grid {unique!r}")
    parent = cur.string(f"the instance parent of grid {unique!r}")
    half = type_name.endswith(fmt.HALF_SUFFIX)
    if half:
        type_name = type_name[: -len(fmt.HALF_SUFFIX)]
    grid_pos = block_pos = end_pos = -1
    if with_offsets:
        offsets_at = cur.pos
        grid_pos, block_pos, end_pos = cur.unpack("<qqq", f"the offsets of grid {unique!r}")
        if parent and block_pos == 0:  # an instance has no blocks of its own
            block_pos = end_pos
        if not (offsets_at + 24 == grid_pos <= block_pos <= end_pos <= cur.end):
            raise cur.fail(
                f"offsets of grid {unique!r} with {offsets_at + 24} (right after them) = grid <= blocks <= end "
                f"<= {cur.end} (the file size)",
                f"grid {grid_pos}, blocks {block_pos}, end {end_pos}",
                offsets_at,
            )
    return Descriptor(index, unique, _split_unique(unique), type_name, half, parent, grid_pos, block_pos, end_pos, at)


def read_descriptors(cur: Cursor, header: FileHeader) -> list[Descriptor]:
    """Every grid descriptor, skipping from each to the next by its end offset.  Files written without
    offsets (streams) hold their grids inline: then only the first descriptor is read here and the
    reader walks the grids one after another (see :mod:`~vdbflow.io.openvdb.read`)."""
    at = cur.pos
    count = cur.i32("the grid count")
    # each grid takes at least 12 (three string lengths) + 24 (offsets) bytes
    if count < 0 or count > fmt.MAX_GRIDS or count * 36 > cur.left:
        raise cur.fail(f"a grid count that the {cur.left} remaining bytes can hold", f"{count}", at)
    if not header.has_grid_offsets:
        raise cur.fail(
            "a file with grid offsets (what OpenVDB's File::write and pyopenvdb.write produce)",
            "a stream written without them (io::Stream), which vdbflow does not read",
            20,
        )
    out = []
    for n in range(count):
        d = read_descriptor(cur, n, True)
        out.append(d)
        cur = cur.at(d.end_pos, f"the end of grid {d.unique_name!r}")
    names = [d.unique_name for d in out]
    for d in out:
        if d.parent and (d.parent not in names or d.parent == d.unique_name):
            raise cur.fail(
                f"the instance parent of grid {d.unique_name!r} among the grids {names}", repr(d.parent), d.at
            )
    return out
