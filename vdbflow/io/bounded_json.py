"""JSON from files vdbflow does not trust (metadata and time records, Zarr metadata): bounded in size and
nesting before :func:`json.loads` sees it, so a hostile document fails as a ``ValueError`` saying why,
never as a ``RecursionError`` or a long parse.  The nesting is measured in one linear pass (strings and
their escapes skipped), so no input makes the check itself slow."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
_TOKENS = re.compile(rb'\\.|["\[\]{}]', re.DOTALL)  # an escape, a quote, or a bracket
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800 to \udfff: half of a pair, or alone


def _depth(raw: bytes, limit: int) -> int:
    """The deepest nesting of brackets outside strings, counted up to ``limit + 1``."""
    depth = deepest = 0
    in_string = False
    for m in _TOKENS.finditer(raw):
        token = m.group()
        if token == b'"':
            in_string = not in_string
        elif in_string or len(token) == 2:  # inside a string, or an escape (only valid inside one)
            continue
        elif token in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        else:
            depth -= 1
    return deepest


def loads(data: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)`` of at most ``max_bytes`` bytes (UTF-8) nested at most ``max_depth`` deep.

    Raises ``ValueError`` (a ``UnicodeDecodeError`` or ``json.JSONDecodeError`` among them) for text
    that is too long, too deep, not UTF-8 or not JSON, or whose strings are not text (an escaped
    surrogate that is not half of a pair, ``"\\ud800"``: no UTF-8 encodes it, so no name or unit may
    hold it)."""
    if isinstance(data, str):
        _refuse_surrogates(data)
    raw = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else data.encode("utf-8", "surrogatepass")
    if len(raw) > max_bytes:
        raise ValueError(f"expected JSON of at most {max_bytes} bytes, got {len(raw)}")
    depth = _depth(raw, max_depth)
    if depth > max_depth:
        raise ValueError(f"expected JSON nested at most {max_depth} deep, got more than {max_depth} levels")
    value = json.loads(raw.decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data)
    if _SURROGATE_ESCAPE.search(raw) is not None:
        _refuse_surrogates(value)
    return value


def _refuse_surrogates(value: Any) -> None:
    """Raise ``ValueError`` for a string (or key) in ``value`` that is not valid Unicode text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"expected text, found a lone surrogate in the string {value!r:.60}") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_surrogates(key)
            _refuse_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _refuse_surrogates(item)


def not_text(value: Any) -> str | None:
    """None when ``value`` is a ``str`` that UTF-8 can encode (what a name or unit in a file must be);
    else what it is instead: another type, or text with a lone surrogate (``"\\ud800"``)."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}, not a str"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"{value[:40]!r}, not text: a lone surrogate at character {err.start}"
    return None
