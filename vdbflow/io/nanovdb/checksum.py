"""NanoVDB checksums: the CRC32 rules of each version (the head and tail halves, and the variants
older writers left) and their verification when a grid is read."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.errors import NanoVDBError
from vdbflow.io.mapped import release, rows_per_span, spans
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.header import EMPTY_CHECKSUM
from vdbflow.io.nanovdb.nodes import fpn_leaf_addresses, fpn_leaf_size


def span_crc(buf: np.ndarray, start: int, stop: int, crc: int = 0) -> int:
    """CRC32 of bytes [start, stop) (continuing ``crc``), a mapped file's pages given back as it goes."""
    for a, b in spans(start, stop):
        crc = zlib.crc32(buf[a:b], crc)
        release(buf, a, b)
    return crc & 0xFFFFFFFF


def blocked_crc(buf: np.ndarray, start: int, stop: int) -> int:
    """NanoVDB's tail rule after 32.6.0: the CRC32 of the CRC32s (u32, little-endian) of the 4 KiB
    blocks of [start, stop), the last block taking the remainder (fewer than 4 KiB: no blocks)."""
    if stop <= start:
        return fmt.EMPTY_CRC32
    n = (stop - start) // fmt.CRC_BLOCK_SIZE
    edges = [start + k * fmt.CRC_BLOCK_SIZE for k in range(n)] + [stop]
    crcs = np.empty(n, "<u4")
    step = rows_per_span(fmt.CRC_BLOCK_SIZE)
    for first in range(0, n, step):
        last = min(n, first + step)
        for k in range(first, last):
            crcs[k] = zlib.crc32(buf[edges[k] : edges[k + 1]])
        release(buf, edges[first], edges[last])
    return zlib.crc32(crcs.tobytes()) & 0xFFFFFFFF


def node_crcs(buf: np.ndarray, arrays: list[tuple[int, int, int]]) -> np.ndarray:
    """CRC32 of every node of the (start, count, size) arrays, upper, lower then leaf (a mapped file's
    pages given back span by span)."""
    out = np.empty(sum(count for _, count, _ in arrays), np.uint64)
    n = 0
    for start, count, size in arrays:
        step = rows_per_span(size)
        for first in range(0, count, step):
            last = min(count, first + step)
            for k in range(first, last):
                out[n] = zlib.crc32(buf[start + k * size : start + (k + 1) * size])
                n += 1
            release(buf, start + first * size, start + last * size)
    return out


@dataclass(frozen=True)
class _Checksums:
    """The head spans and tail CRC32s a grid may carry under its version's rules (old rules have variants)."""

    head_spans: tuple[tuple[int, int], ...]
    tails: tuple[tuple[str, Any], ...]  # (what is covered, a callable giving the CRC32 or None)


def _checksum_rules(buf: np.ndarray, base: int, h: dict[str, Any], layout: fmt.GridLayout) -> _Checksums:
    end = base + h["grid_size"]
    head_start, head_end = base + fmt.CHECKSUM_HEAD_START, base + fmt.GRID_SIZE + fmt.TREE_SIZE
    if h["version"] > fmt.CHECKSUM_OLD_RULES_LAST:
        return _Checksums(
            ((head_start, head_end),),
            ((f"bytes [{head_end}, {end}) in 4 KiB blocks", lambda: blocked_crc(buf, head_end, end)),),
        )
    t = h["tree"]
    offs, counts = h["node_offsets"], h["node_counts"]
    upper = t + offs[2]
    if counts[2] == 0:  # no nodes: versions differ on where the head stops, and there is no tail
        spans = {(head_start, end)}
        if h["blind_count"]:
            spans.add((head_start, min(end, base + max(h["blind_offset"], fmt.CHECKSUM_HEAD_START))))
        root = t + offs[3]
        if root + fmt.ROOT_OFF_TABLE_SIZE + 4 <= end:  # the table size (u32) lies inside the grid
            table = int(struct.unpack_from("<I", buf, root + fmt.ROOT_OFF_TABLE_SIZE)[0])
            spans.add((head_start, min(end, root + layout.root_size + table * layout.root_tile_size)))
        return _Checksums(tuple(sorted(spans)), ())
    inner = [(t + offs[2], counts[2], layout.upper_size), (t + offs[1], counts[1], layout.lower_size)]
    nodes = f"the CRC32s of the {counts[2]} upper, {counts[1]} lower and {counts[0]} leaf nodes"
    cache: dict[bool, np.ndarray] = {}

    def leaves(whole: bool) -> list[tuple[int, int, int]]:
        if layout.leaf_kind != "fpn":
            return [(t + offs[0], counts[0], layout.leaf_size)]
        addrs = fpn_leaf_addresses(buf, t + offs[0], counts[0], end, t + fmt.TREE_OFF_LEAF_COUNT)  # sizes differ
        return [(int(a), 1, fpn_leaf_size(buf, a) if whole else fmt.FPN_LEAF_FIXED_SIZE) for a in addrs]

    def per_node(width: int, whole: bool = True) -> Any:
        def crc() -> int | None:
            if whole not in cache:
                try:
                    arrays = inner + leaves(whole)
                except NanoVDBError:
                    return None
                if any(start < base or start + count * size > end for start, count, size in arrays):
                    return None
                cache[whole] = node_crcs(buf, arrays)
            return zlib.crc32(cache[whole].astype(f"<u{width}").tobytes()) & 0xFFFFFFFF

        return crc

    # the per-node CRCs were kept as u32 (current NanoVDB, CUDA) or as 8-byte uint_fast32_t (older
    # host builds on Linux, which also took only the fixed 96 bytes of an FpN leaf); a 32.6
    # development rule CRC'd the 4 KiB blocks from the first upper node
    tails = [(nodes + " (u32 entries)", per_node(4)), (nodes + " (8-byte entries)", per_node(8))]
    if layout.leaf_kind == "fpn":
        tails += [(nodes + f" (FpN leaves' first 96 bytes, {w}-byte entries)", per_node(w, False)) for w in (4, 8)]
    tails.append((f"bytes [{upper}, {end}) in 4 KiB blocks", lambda: blocked_crc(buf, upper, end)))
    return _Checksums(((head_start, min(max(upper, head_start), end)),), tuple(tails))


def _head_as_if(buf: np.ndarray, base: int, start: int, stop: int, index_count: tuple[int, int]) -> int:
    """The head CRC32 over [start, stop) with the grid index and count (bytes 24-32) replaced."""
    index_at, count_end = base + fmt.GRID_OFF_INDEX, base + fmt.GRID_OFF_GRID_SIZE  # the grid size follows them
    if stop < count_end:
        return span_crc(buf, start, stop)
    crc = zlib.crc32(struct.pack("<II", *index_count), span_crc(buf, start, index_at))
    return span_crc(buf, count_end, stop, crc)


def checksum_mode(checksum: bool | str) -> str:
    """``open``'s ``checksum`` argument as "warn" (True), "off" (False), "strict" or "head" (the head
    half only, a warning on a mismatch: what a reader of the tree alone can check without reading values)."""
    if checksum is True:
        return "warn"
    if checksum is False:
        return "off"
    if isinstance(checksum, str) and checksum in ("strict", "head"):
        return checksum
    raise NanoVDBError(f"expected checksum True, False, 'strict' or 'head', got {checksum!r}")


def checksum_mismatch(
    buf: np.ndarray, base: int, h: dict[str, Any], layout: fmt.GridLayout, tail: bool, position: tuple[int, int]
) -> str | None:
    """None when a grid's checksum matches a rule of its version (or it has none), else what does not
    match: the grid, its version, the half, and every span tried with its CRC32.

    The head (low half) is checked unless 0xFFFFFFFF, and with ``tail`` the tail (high half) unless
    0xFFFFFFFF.  NanoVDB rewrites a grid's index and count (bytes 24-32) when it moves a grid between
    buffers, so a head is also accepted for the grid standing alone (0 of 1) or at ``position``
    (index, count) in its payload."""
    checksum = h["checksum"]
    if checksum == EMPTY_CHECKSUM:
        return None
    version = ".".join(map(str, fmt.version_parts(h["version"])))
    rules = _checksum_rules(buf, base, h, layout)
    want_head, want_tail = checksum & 0xFFFFFFFF, checksum >> 32
    where = f"checksum mismatch in grid {h['name']!r} (NanoVDB {version})"
    if want_head != fmt.EMPTY_CRC32:
        alternatives = sorted({(0, 1), position} - {(h["grid_index"], h["grid_count"])})
        tried = []
        for start, stop in rules.head_spans:
            got = span_crc(buf, start, stop)
            if got == want_head:
                break
            as_if = [(alt, _head_as_if(buf, base, start, stop, alt)) for alt in alternatives]
            if any(crc == want_head for _, crc in as_if):
                break
            tried.append(
                f"bytes [{start}, {stop}) 0x{got:08x}"
                + "".join(f", as grid {i} of {n} 0x{crc:08x}" for (i, n), crc in as_if)
            )
        else:
            return (
                f"{where}: the head half of the checksum at byte {base + fmt.GRID_OFF_CHECKSUM} records "
                f"0x{want_head:08x}, and no span its version's rules cover gives it (tried {'; '.join(tried)})"
            )
    if tail and want_tail != fmt.EMPTY_CRC32 and rules.tails:
        found = []
        for what, crc in rules.tails:
            got = crc()
            if got == want_tail:
                return None
            found.append(f"{what} {'(out of bounds)' if got is None else f'0x{got:08x}'}")
        return (
            f"{where}: the tail half of the checksum at byte {base + fmt.GRID_OFF_CHECKSUM + 4} records "
            f"0x{want_tail:08x}, and no rule of its version gives it (tried {'; '.join(found)})"
        )
    return None
