"""Node values as OpenVDB stores them: one byte naming what was left out (the mask compression code),
up to two inactive values, a selection mask, then the stored values - raw, zlib-deflated or in a blosc
frame, each after an int64 size (negative: stored raw) - in the grid's precision or as half floats.

:func:`read_node_values` reads one internal node's values; :func:`read_leaf_values` reads every leaf
buffer of a grid at once: a fixed-size layout (no zip or blosc, no stored inactive values) as one
NumPy view, anything else leaf by leaf, and in both cases the left-out inactive values restored with
NumPy over all leaves together."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from vdbflow.core import tree
from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.stream import Cursor

BLOSC_HEADER = 16  # c-blosc 1: version, flags, typesize bytes, then nbytes, blocksize, cbytes (uint32)


@dataclass(frozen=True)
class Storage:
    """How a grid's node values are stored: ``compression`` flags, the value ``layout`` as stored
    (half floats when ``half``), the grid's own ``dtype`` and ``components``, and its ``background``
    ((C,) of ``dtype``)."""

    compression: int
    stored: fmt.ValueLayout
    dtype: np.dtype
    components: int
    background: np.ndarray

    @property
    def mask_compressed(self) -> bool:
        return bool(self.compression & fmt.COMPRESS_ACTIVE_MASK)

    @property
    def codec(self) -> str:
        if self.compression & fmt.COMPRESS_BLOSC:
            return "blosc"
        return "zip" if self.compression & fmt.COMPRESS_ZIP else "none"

    @property
    def full_itemsize(self) -> int:
        return self.dtype.itemsize * self.components


def _inflate(data: np.ndarray, size: int, cur: Cursor, at: int) -> np.ndarray:
    """A zlib stream inflated to exactly ``size`` bytes (never more: inflation stops one byte past)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as err:
        raise cur.fail(f"a zlib stream inflating to {size} bytes", f"one that does not inflate ({err})", at) from None
    if len(out) != size or not inflater.eof:
        found = f"{len(out)}{'+' if len(out) > size else ''} bytes" + ("" if inflater.eof else " (stream unfinished)")
        raise cur.fail(f"a zlib stream inflating to {size} bytes", found, at)
    return np.frombuffer(out, np.uint8)


def _unblosc(data: np.ndarray, size: int, cur: Cursor, at: int) -> np.ndarray:
    """A blosc frame decompressed to exactly ``size`` bytes, its header checked first."""
    if len(data) < BLOSC_HEADER:
        raise cur.fail(f"a blosc frame of at least {BLOSC_HEADER} bytes", f"{len(data)} bytes", at)
    nbytes, _block, cbytes = struct.unpack_from("<III", data, 4)
    if nbytes != size or cbytes != len(data):
        raise cur.fail(
            f"a blosc frame of {len(data)} bytes declaring {size} uncompressed bytes",
            f"one declaring {cbytes} bytes that decompress to {nbytes}",
            at,
        )
    if size == 0:
        return np.zeros(0, np.uint8)
    from numcodecs import blosc  # c-blosc 1 frames, as OpenVDB writes them (numcodecs comes with zarr)

    out = np.empty(size, np.uint8)
    try:
        blosc.decompress(data, out)
    except Exception as err:  # numcodecs raises RuntimeError and others for corrupt frames
        raise cur.fail(f"a blosc frame decompressing to {size} bytes", f"one that does not ({err})", at) from None
    return out


def read_chunk(cur: Cursor, size: int, compression: int, what: str, skip: bool = False) -> np.ndarray:
    """``size`` bytes of ``what`` as the grid's compression stores them (uint8); with ``skip`` the
    bytes are passed over (sizes checked, nothing decompressed) and an empty array comes back."""
    if not compression & (fmt.COMPRESS_ZIP | fmt.COMPRESS_BLOSC):
        return cur.take(size, what)
    at = cur.pos
    stored = cur.i64(f"the size of {what}")
    if stored <= 0:  # stored raw
        if -stored != size:
            raise cur.fail(f"{size} raw bytes of {what} (size {-size})", f"size {stored}", at)
        return cur.take(size, what)
    data = cur.take(stored, f"the compressed {what}")
    if skip:
        return data[:0]
    if compression & fmt.COMPRESS_BLOSC:
        return _unblosc(data, size, cur, at + 8)
    return _inflate(data, size, cur, at + 8)


def _as_values(raw: np.ndarray, st: Storage, count: int, owned: bool = False) -> np.ndarray:
    """``count`` stored values (bytes ``raw``) as (count, C) of the grid's dtype; copied unless
    ``owned`` (``raw`` is a private contiguous copy already) and the stored dtype is the grid's."""
    vals = np.frombuffer(raw.tobytes() if not raw.flags.c_contiguous else raw, st.stored.dtype, count * st.components)
    return vals.reshape(count, st.components).astype(st.dtype, copy=not owned)


def _inactive(cur: Cursor, st: Storage, code: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The two inactive values (each (C,)) a node's mask code gives: read from the file (always at
    the grid's full precision) or derived from the background."""
    bg = st.background
    v0 = bg if code == fmt.NO_MASK_OR_INACTIVE_VALS else -bg if st.dtype.kind != "u" else bg
    v1 = bg
    stored = fmt.STORED_INACTIVE.get(code, 0)
    if stored:
        raw = cur.array(st.dtype.newbyteorder("<"), stored * st.components, f"the inactive values of {what}")
        vals = raw.astype(st.dtype).reshape(stored, st.components)
        v0 = vals[0]
        if stored == 2:
            v1 = vals[1]
    return v0, v1


def read_node_values(cur: Cursor, st: Storage, active: np.ndarray, what: str) -> np.ndarray:
    """One internal node's values, (N, C) of the grid's dtype; ``active`` (N,) bool is its value mask."""
    n = len(active)
    at = cur.pos
    code = cur.u8(f"the mask compression code of {what}")
    if code > fmt.NO_MASK_AND_ALL_VALS:
        raise cur.fail(f"a mask compression code 0-6 for {what}", f"{code}", at)
    v0, v1 = _inactive(cur, st, code, what)
    selection = None
    if code in fmt.HAS_SELECTION:
        selection = np.unpackbits(cur.take(n // 8, f"the selection mask of {what}"), bitorder="little").astype(bool)
    count = int(active.sum()) if st.mask_compressed and code != fmt.NO_MASK_AND_ALL_VALS else n
    if count == 0 and st.stored.dtype.itemsize == 2:
        raw = np.zeros(0, np.uint8)  # OpenVDB reads nothing at all for no half values
    else:
        raw = read_chunk(cur, count * st.stored.itemsize, st.compression, f"the values of {what}")
    vals = _as_values(raw, st, count)
    if count == n:
        return vals
    out = np.empty((n, st.components), st.dtype)
    out[active] = vals
    inactive = ~active
    if selection is None:
        out[inactive] = v0
    else:
        out[inactive] = np.where(selection[inactive, None], v1, v0)
    return out


def _fixed_layout(cur: Cursor, st: Storage, counts: np.ndarray, prefetch: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """Leaf buffers of a grid without zip or blosc whose codes store nothing but the values, read as
    one block: (the stored values (N, C), the codes (L,)); None for any other layout."""
    L = len(counts)
    if st.compression & (fmt.COMPRESS_ZIP | fmt.COMPRESS_BLOSC) or L == 0:
        return None
    item = st.stored.itemsize
    head = fmt.LEAF_MASK_BYTES + 1
    full = not st.mask_compressed
    stored = np.full(L, tree.LEAF_VOXELS, np.int64) if full else counts.astype(np.int64)
    sizes = head + stored * item
    ends = np.cumsum(sizes)
    if ends[-1] > cur.left:
        return None  # the leaf loop says where the data ends
    starts = ends - sizes  # relative to the cursor
    if prefetch:  # before the codes are gathered: they touch every other page
        cur.prefetch(int(ends[-1]))
    codes = cur.buf[cur.pos + starts + fmt.LEAF_MASK_BYTES]
    plain = (codes == fmt.NO_MASK_OR_INACTIVE_VALS) | (codes == fmt.NO_MASK_AND_MINUS_BG)
    if full:
        plain |= codes == fmt.NO_MASK_AND_ALL_VALS
    if not np.all(plain):
        return None  # stored inactive values, selection masks or (masked) all 512 values: sizes differ
    block = cur.take(int(ends[-1]), "the leaf buffers")
    if full:  # one copy: the values of every leaf, gathered past each leaf's 65-byte head
        values = np.ascontiguousarray(block.reshape(L, -1)[:, head:]).reshape(-1)
    else:
        keep = np.ones(len(block), bool)
        keep[starts[:, None] + np.arange(head)] = False
        values = block[keep]
    return _as_values(values, st, int(stored.sum()), owned=True), codes


def read_leaf_values(cur: Cursor, st: Storage, masks: np.ndarray, wanted: np.ndarray | None = None) -> np.ndarray:
    """The values of every leaf (or of the leaves ``wanted`` (L,) bool selects), (W*512, C) of the
    grid's dtype, in leaf order; ``masks`` (L, 8) uint64 are the leaves' value masks from the
    topology.  Each leaf buffer repeats its value mask (skipped, as OpenVDB skips it) before its
    values.  Leaves not wanted are passed over without being decompressed."""
    L = len(masks)
    want = np.ones(L, bool) if wanted is None else wanted
    counts = np.bitwise_count(masks).sum(axis=1).astype(np.int64)
    fixed = _fixed_layout(cur, st, counts, prefetch=wanted is None)
    if fixed is not None:
        values, codes = fixed
        v0 = np.where((codes == fmt.NO_MASK_AND_MINUS_BG)[:, None], -st.background, st.background)
        v1 = np.broadcast_to(st.background, (L, st.components))
        selection = None
        if not np.all(want):  # the stored values of the wanted leaves
            per_leaf = np.full(L, tree.LEAF_VOXELS) if not st.mask_compressed else counts
            leaf_of = np.repeat(np.arange(L), per_leaf)
            values = values[want[leaf_of]]
    else:
        values, codes, v0, v1, selection = _leaf_loop(cur, st, counts, want)
    codes, counts = codes[want], counts[want]
    all_stored = (codes == fmt.NO_MASK_AND_ALL_VALS) | (not st.mask_compressed)
    if np.all(all_stored | (counts == tree.LEAF_VOXELS)):
        return values  # all 512 values of every leaf were stored
    active = tree.bits_from_masks(masks[want])  # (W, 512)
    selection = None if selection is None else selection[want]
    return _restore(values, active, all_stored, v0[want], v1[want], selection, st)


def _restore(
    values: np.ndarray,
    active: np.ndarray,
    all_stored: np.ndarray,
    v0: np.ndarray,
    v1: np.ndarray,
    selection: np.ndarray | None,
    st: Storage,
) -> np.ndarray:
    """(L*512, C) values from the stored ones (the active voxels of mask-compressed leaves, all 512 of
    the others) and each leaf's inactive values v0, v1 ((L, C)) picked by its selection mask."""
    L = len(active)
    stored = active | all_stored[:, None]
    out = np.empty((L, tree.LEAF_VOXELS, st.components), st.dtype)
    out[stored] = values
    missing = ~stored
    leaf = np.nonzero(missing)[0]
    if selection is None:
        out[missing] = v0[leaf]
    else:
        out[missing] = np.where(selection[missing][:, None], v1[leaf], v0[leaf])
    return out.reshape(L * tree.LEAF_VOXELS, st.components)


def _leaf_loop(
    cur: Cursor, st: Storage, counts: np.ndarray, want: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Leaf buffers one by one: (stored values (N, C) of the wanted leaves, codes (L,), v0 (L, C),
    v1 (L, C), selection (L, 512) bool or None).  The loop keeps to plain integers and byte slices
    (a compressed grid of 250,000 leaves runs it 250,000 times); the inactive values are made for all
    leaves at once afterwards, from the codes and the few values leaves stored."""
    L = len(counts)
    item = st.stored.itemsize
    half_empty = st.stored.dtype.itemsize == 2
    masked = st.mask_compressed
    zipped, blosc = bool(st.compression & fmt.COMPRESS_ZIP), bool(st.compression & fmt.COMPRESS_BLOSC)
    little = st.dtype.newbyteorder("<")
    codes = np.empty(L, np.uint8)
    stored_values: dict[int, np.ndarray] = {}  # leaf -> its one or two stored inactive values
    selections: dict[int, np.ndarray] = {}  # leaf -> its 64-byte selection mask
    out = np.empty(int(np.count_nonzero(want)) * tree.LEAF_VOXELS * item, np.uint8)
    filled = 0
    buf, end, pos = cur.buf, cur.end, cur.pos
    count_of, wanted = counts.tolist(), want.tolist()
    for n in range(L):
        if pos + fmt.LEAF_MASK_BYTES + 1 > end:
            cur.pos = pos
            cur.need(fmt.LEAF_MASK_BYTES + 1, f"the value mask and mask compression code of leaf buffer {n}")
        pos += fmt.LEAF_MASK_BYTES
        code = cur.byte_at(pos)
        if code > fmt.NO_MASK_AND_ALL_VALS:
            raise cur.fail(f"a mask compression code 0-6 for leaf {n}", f"{code}", pos)
        pos += 1
        codes[n] = code
        held = fmt.STORED_INACTIVE.get(code, 0)
        if held or code in fmt.HAS_SELECTION:
            cur.pos = pos
            if held:  # at the grid's full precision, also in half-float grids
                stored_values[n] = cur.array(little, held * st.components, f"the inactive values of leaf {n}")
            if code in fmt.HAS_SELECTION:
                selections[n] = cur.take(tree.LEAF_VOXELS // 8, f"the selection mask of leaf {n}")
            pos = cur.pos
        count = count_of[n] if masked and code != fmt.NO_MASK_AND_ALL_VALS else tree.LEAF_VOXELS
        if count == 0 and half_empty:
            continue
        size = count * item
        if not (zipped or blosc):
            if pos + size > end:
                cur.pos = pos
                cur.need(size, f"the values of leaf {n}")
            if wanted[n]:
                out[filled : filled + size] = buf[pos : pos + size]
                filled += size
            pos += size
            continue
        cur.pos = pos
        chunk = read_chunk(cur, size, st.compression, f"the values of leaf {n}", skip=not wanted[n])
        pos = cur.pos
        if wanted[n]:
            out[filled : filled + size] = chunk
            filled += size
    cur.pos = pos
    v0, v1 = _inactive_values(st, codes, stored_values)
    selection = None
    if selections:
        selection = np.zeros((L, tree.LEAF_VOXELS), bool)
        for n, bits in selections.items():
            selection[n] = np.unpackbits(bits, bitorder="little").astype(bool)
    return _as_values(out[:filled], st, filled // item, owned=True), codes, v0, v1, selection


def _inactive_values(st: Storage, codes: np.ndarray, stored: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each leaf's two inactive values (L, C): from the background by code, then the stored ones."""
    L, C = len(codes), st.components
    bg = st.background
    minus = -bg if st.dtype.kind != "u" else bg
    v0 = np.where((codes == fmt.NO_MASK_OR_INACTIVE_VALS)[:, None], bg, minus).astype(st.dtype).reshape(L, C)
    v1 = np.broadcast_to(bg, (L, C)).copy()
    for n, raw in stored.items():
        vals = raw.astype(st.dtype).reshape(-1, C)
        v0[n] = vals[0]
        if len(vals) == 2:
            v1[n] = vals[1]
    return v0, v1
