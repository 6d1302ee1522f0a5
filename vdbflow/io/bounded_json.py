"""JSON from files vdbflow does not trust (metadata and time records, Zarr metadata): bounded in size and
nesting before :func:`json.loads` sees it, so a hostile document fails as a ``ValueError`` saying why,
never as a ``RecursionError`` or a long parse."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def loads(data: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)`` of at most ``max_bytes`` bytes (UTF-8) nested at most ``max_depth`` deep.

    Raises ``ValueError`` (a ``UnicodeDecodeError`` or ``json.JSONDecodeError`` among them) for text
    that is too long, too deep, not UTF-8 or not JSON."""
    if len(data) > max_bytes:
        raise ValueError(f"expected JSON of at most {max_bytes} bytes, got {len(data)}")
    text = bytes(data).decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    bare = np.frombuffer(_STRING.sub("", text).encode("utf-8", "surrogatepass"), np.uint8)
    depth = np.cumsum(np.isin(bare, _OPEN).astype(np.int64) - np.isin(bare, _CLOSE))
    if depth.size and int(depth.max()) > max_depth:
        raise ValueError(f"expected JSON nested at most {max_depth} deep, got {int(depth.max())} levels")
    return json.loads(text)
