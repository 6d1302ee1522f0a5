"""OpenVDB metadata maps (a file's and each grid's): a count, then name, type name, byte size and
value per item.  The types OpenVDB writes become Python values; unknown types are skipped by their
size, as OpenVDB skips them."""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.stream import Cursor

# type name -> (dtype, count): the fixed-size metadata types
_FIXED = {
    "bool": ("u1", 1),
    "int32": ("<i4", 1),
    "int64": ("<i8", 1),
    "float": ("<f4", 1),
    "double": ("<f8", 1),
    **{f"vec{n}{c}": (d, n) for n in (2, 3, 4) for c, d in (("i", "<i4"), ("s", "<f4"), ("d", "<f8"))},
    "mat4s": ("<f4", 16),
    "mat4d": ("<f8", 16),
}


def _value(type_name: str, raw: np.ndarray, cur: Cursor, at: int) -> Any:
    if type_name == "string":
        return bytes(raw).decode("utf-8", "replace")
    dtype, count = _FIXED[type_name]
    size = np.dtype(dtype).itemsize * count
    if len(raw) != size:
        raise cur.fail(f"{size} bytes for a {type_name} metadata value", f"{len(raw)}", at)
    values = raw.view(dtype)
    if type_name == "bool":
        return bool(values[0])
    if count == 1:
        return values[0].item()
    if type_name.startswith("mat4"):
        return values.reshape(4, 4).astype(np.float64)
    return tuple(v.item() for v in values)


def read_metadata(cur: Cursor, what: str) -> dict[str, Any]:
    """The metadata map at the cursor, as {name: value}; the cursor ends after it."""
    at = cur.pos
    count = cur.u32(f"the item count of {what}")
    # each item takes at least 12 bytes (two string lengths and a value size)
    if count > fmt.MAX_METADATA_ITEMS or count * 12 > cur.left:
        raise cur.fail(f"an item count of {what} that its {cur.left} remaining bytes can hold", f"{count}", at)
    out: dict[str, Any] = {}
    for _ in range(count):
        name = cur.string(f"a metadata name of {what}")
        type_name = cur.string(f"the type of metadata {name!r}")
        size_at = cur.pos
        size = cur.u32(f"the size of metadata {name!r}")
        raw = cur.take(size, f"the value of metadata {name!r} ({type_name})")
        if type_name in _FIXED or type_name == "string":
            out[name] = _value(type_name, raw, cur, size_at)
        # other types (OpenVDB's own "__delayedload", user types) are skipped by their size
    return out
