"""Reading OpenVDB (.vdb) files in NumPy, without OpenVDB: grids of float, double, int32, int64,
vec3s, vec3d and vec3i values as :class:`~vdbflow.Volume` objects, bool and mask grids as
:class:`~vdbflow.Topology` objects; every compression OpenVDB writes (zip, blosc, active-mask
compression, half floats); linear transforms; tiles at every level kept as tiles.

Every size, count and offset is checked against the bytes that back it before use, so a malformed
file raises :class:`~vdbflow.errors.OpenVDBError` naming the byte offset, what was expected and what
was found.  The modules, each building only on those before it: :mod:`~vdbflow.io.openvdb.format`
(constants), :mod:`~vdbflow.io.openvdb.stream` (the bounds-checked cursor),
:mod:`~vdbflow.io.openvdb.metadata`, :mod:`~vdbflow.io.openvdb.header` (file header and grid
descriptors), :mod:`~vdbflow.io.openvdb.transform`, :mod:`~vdbflow.io.openvdb.scatter` (uncompressed
leaf buffers read from the file with ``preadv``), :mod:`~vdbflow.io.openvdb.values` (compressed
node values), :mod:`~vdbflow.io.openvdb.tree` (the topology) and :mod:`~vdbflow.io.openvdb.read`
(:func:`open_vdb`, :func:`list_vdb`).  See docs/openvdb.md.
"""

from __future__ import annotations

from vdbflow.io.openvdb.read import is_openvdb, list_vdb, open_vdb

__all__ = ["is_openvdb", "list_vdb", "open_vdb"]
