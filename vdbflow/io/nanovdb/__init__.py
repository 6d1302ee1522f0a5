"""Reading NanoVDB (.nvdb) files and raw grid buffers into vdbflow volumes, and writing them.

Uncompressed files are memory-mapped: only the nodes a grid needs are read.  Node tables are
decoded level by level with NumPy (root tiles -> upper nodes -> lower nodes -> leaves), and every
offset is checked against the node array it must point into, so a corrupt file raises
:class:`NanoVDBError` with the byte offset instead of reading out of bounds or looping.

The modules, each building only on those before it: :mod:`~vdbflow.io.nanovdb.format` (the byte
layout, as constants), :mod:`~vdbflow.io.nanovdb.header` (size limits, bounds-checked readers, the
grid header), :mod:`~vdbflow.io.nanovdb.records` (:class:`GridInfo`, :class:`BlindData`),
:mod:`~vdbflow.io.nanovdb.nodes` (node arrays and their fields), :mod:`~vdbflow.io.nanovdb.checksum`
(CRC rules and verification), :mod:`~vdbflow.io.nanovdb.metadata` (the ``vdbflow.metadata`` blind
record), :mod:`~vdbflow.io.nanovdb.decode` (a grid's nodes into a Volume or Topology),
:mod:`~vdbflow.io.nanovdb.codec` (zip and blosc payloads), :mod:`~vdbflow.io.nanovdb.read` (files
and buffers), :mod:`~vdbflow.io.nanovdb.remote` (URLs by byte ranges), :mod:`~vdbflow.io.nanovdb.entry`
(:func:`open_grid`, :func:`list_grids` of any of them), :mod:`~vdbflow.io.nanovdb.plan` (the nodes,
offsets and bounding boxes of a grid to write), :mod:`~vdbflow.io.nanovdb.encode` (its nodes into bytes) and
:mod:`~vdbflow.io.nanovdb.write` (headers and checksums by the version written, and :func:`save`).
"""

from __future__ import annotations

from vdbflow.io.nanovdb.codec import BLOSC_MAX_CHUNK, ZIP_MAX_RATIO, ZIP_SLACK
from vdbflow.io.nanovdb.entry import list_grids, open_grid
from vdbflow.io.nanovdb.header import MAX_BLIND_COUNT, MAX_GRID_BYTES, MAX_NAME_BYTES, MAX_VALUE_COUNT
from vdbflow.io.nanovdb.metadata import METADATA_NAME
from vdbflow.io.nanovdb.records import BlindData, GridInfo
from vdbflow.io.nanovdb.write import save

__all__ = [
    "BLOSC_MAX_CHUNK",
    "MAX_BLIND_COUNT",
    "MAX_GRID_BYTES",
    "MAX_NAME_BYTES",
    "MAX_VALUE_COUNT",
    "METADATA_NAME",
    "ZIP_MAX_RATIO",
    "ZIP_SLACK",
    "BlindData",
    "GridInfo",
    "list_grids",
    "open_grid",
    "save",
]
