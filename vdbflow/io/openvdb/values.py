"""Node values as OpenVDB stores them: one byte naming what was left out (the mask compression code),
up to two inactive values, a selection mask, then the stored values - raw, zlib-deflated or in a blosc
frame, each after an int64 size (negative: stored raw) - in the grid's precision or as half floats.

:func:`read_node_values` reads one internal node's values; :func:`read_leaf_values` reads every leaf
buffer of a grid (or the wanted ones) at once: a fixed-size layout (no zip or blosc, no stored
inactive values) scatter-read from the file into the values array (:class:`EarlyRead` while the
topology is parsed) or copied out of the bytes, anything else leaf by leaf, and in both cases the
left-out inactive values restored with NumPy over all leaves together."""

from __future__ import annotations

import struct
import threading
import zlib
from dataclasses import dataclass

import numpy as np

from vdbflow.core import tree
from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb import scatter
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


def _plain(codes: np.ndarray, full: bool) -> bool:
    """Whether leaf codes ``codes`` store nothing but the values (no inactive values, no selection
    mask; with ``full`` (no mask compression) all 512 of them, else the active ones)."""
    plain = (codes == fmt.NO_MASK_OR_INACTIVE_VALS) | (codes == fmt.NO_MASK_AND_MINUS_BG)
    if full:
        plain |= codes == fmt.NO_MASK_AND_ALL_VALS
    return bool(np.all(plain))


def _fixed_layout(
    cur: Cursor, st: Storage, counts: np.ndarray, want: np.ndarray | None, path: scatter.Source | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Leaf buffers of a grid without zip or blosc whose codes store nothing but the values, each of
    its fixed size: (the stored values (N, C) of the leaves ``want`` selects (all for None), the codes
    (L,), those of leaves not read left 0); None for any other layout (the leaf loop reads it).

    All leaves: with ``path`` (the file the cursor's bytes are) the records are scatter-read from the
    file straight into the values array (:mod:`~vdbflow.io.openvdb.scatter`), else the block is
    copied out of the bytes.  Some leaves: when the smallest records of all leaves fill the bytes up
    to the grid's end exactly, no leaf can hold more (inactive values, selection masks), so each
    leaf's record is where the sizes say and only the wanted ones are read; else every code is read."""
    L = len(counts)
    if st.compression & (fmt.COMPRESS_ZIP | fmt.COMPRESS_BLOSC) or L == 0:
        return None
    item = st.stored.itemsize
    head = fmt.LEAF_MASK_BYTES + 1
    full = not st.mask_compressed
    stored = np.full(L, tree.LEAF_VOXELS, np.int64) if full else counts.astype(np.int64)
    sizes = stored * item  # value bytes of each leaf
    ends = np.cumsum(sizes + head)
    if ends[-1] > cur.left:
        return None  # the leaf loop says where the data ends
    starts = ends - sizes - head  # relative to the cursor
    chosen = np.arange(L) if want is None else np.nonzero(want)[0]
    codes = np.zeros(L, np.uint8)
    if want is not None and ends[-1] == cur.left:  # every record at its smallest: seek to the wanted
        codes[chosen], values = _gather(cur, starts[chosen], sizes[chosen], head, path)
        if not _plain(codes[chosen], full):
            return None
    elif want is None and path is not None and scatter.available():
        codes, values = _gather(cur, starts, sizes, head, path)
        if not _plain(codes, full):
            return None  # a record of another size: those after it are not where the sizes say
    else:
        if want is None:  # before the codes are gathered: they touch every other page
            cur.prefetch(int(ends[-1]))
        codes = cur.buf[cur.pos + starts + fmt.LEAF_MASK_BYTES]
        if not _plain(codes, full):
            return None  # stored inactive values, selection masks or (masked) all 512 values: sizes differ
        _, values = _gather(cur, starts[chosen], sizes[chosen], head, None)
    cur.pos += int(ends[-1])
    return _as_values(values, st, int(stored[chosen].sum()), owned=True), codes


def _gather(
    cur: Cursor, starts: np.ndarray, sizes: np.ndarray, head: int, path: scatter.Source | None
) -> tuple[np.ndarray, np.ndarray]:
    """Leaf records at byte ``starts`` past the cursor (the caller checked that they end before its
    end), each a ``head``-byte head and ``sizes`` bytes of values: (the last byte of each head, the
    mask compression code (n,) uint8; the values back to back (sum(sizes),) uint8).  With ``path``,
    read from that file, one scatter-read per run of adjacent records; else copied out of the bytes."""
    n = len(sizes)
    values = np.empty(int(sizes.sum()), np.uint8)
    if path is not None and scatter.available():
        heads = np.empty((n, head), np.uint8)
        new_run = np.ones(n, bool)
        new_run[1:] = starts[1:] != starts[:-1] + head + sizes[:-1]
        bounds = np.append(np.nonzero(new_run)[0], n).tolist()
        value_at = np.cumsum(sizes) - sizes
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            v0, v1 = int(value_at[a]), int(value_at[b - 1] + sizes[b - 1])
            scatter.read_records(path, cur.pos + int(starts[a]), head, sizes[a:b], heads[a:b], values[v0:v1])
        return heads[:, -1].copy(), values
    block = cur.buf[cur.pos : cur.end]
    codes = block[starts + head - 1]
    if n and bool(np.all(sizes == sizes[0])):  # records of one size: one copy of the values
        record = head + int(sizes[0])
        rows = np.lib.stride_tricks.as_strided(block, (len(block) - record + 1, record), (1, 1), writeable=False)
        return codes, np.ascontiguousarray(rows[starts, head:]).reshape(-1)
    first, last = (int(starts[0]), int(starts[-1] + head + sizes[-1])) if n else (0, 0)
    if 8 * len(values) <= last - first:  # few values: their byte indices
        value_at = np.cumsum(sizes) - sizes
        values[:] = block[np.repeat(starts + head - value_at, sizes) + np.arange(len(values))]
    else:  # most of the span: a mask of the value bytes (one byte per byte of the span)
        edges = np.zeros(last - first + 1, np.int8)
        some = sizes > 0
        edges[(starts + head - first)[some]] = 1
        edges[(starts + head + sizes - first)[some]] = -1
        values[:] = block[first:last][np.cumsum(edges[:-1], dtype=np.int8).view(bool)]
    return codes, values


class EarlyRead:
    """Every leaf record of an uncompressed grid without mask compression, scatter-read in a helper
    thread from byte ``start`` (where the grid's descriptor says the leaf buffers begin) to ``end``
    (the grid's end) while the topology is parsed.  Such records are 65 + 512 x item bytes each when
    their codes store nothing but the values, so the bytes give their count; :meth:`take` uses the
    read only if the topology agrees (the same leaf count, the cursor at ``start``, every code plain),
    else it is dropped and the leaves are read as usual, which says what is wrong."""

    def __init__(self, path: scatter.Source, st: Storage, start: int, end: int):
        head = fmt.LEAF_MASK_BYTES + 1
        size = tree.LEAF_VOXELS * st.stored.itemsize
        self.start, self.end = start, end
        self.count = (end - start) // (head + size)
        self.heads = np.empty((self.count, head), np.uint8)
        self.values = np.empty(self.count * size, np.uint8)
        self.error: BaseException | None = None
        records = scatter.Records(path, start, head, np.full(self.count, size, np.int64), self.heads, self.values)
        self.thread = threading.Thread(target=self._run, args=(records,), daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, path: scatter.Source | None, st: Storage, start: int, end: int, min_leaves: int) -> EarlyRead | None:
        """An early read of the leaf records in bytes [start, end) of ``path``, or None where the grid
        is compressed (zip, blosc or mask), holds fewer than ``min_leaves`` leaves or the bytes are
        no whole number of records."""
        if path is None or st.compression & fmt.COMPRESS_KNOWN or not scatter.available():
            return None
        record = fmt.LEAF_MASK_BYTES + 1 + tree.LEAF_VOXELS * st.stored.itemsize
        span = end - start
        if span <= 0 or span % record or span // record < max(min_leaves, 1):
            return None
        return cls(path, st, start, end)

    def _run(self, records: scatter.Records) -> None:
        try:
            records.read()
        except BaseException as err:  # a short read, say: the usual read then finds what is wrong
            self.error = err

    def join(self) -> None:
        self.thread.join()

    def take(self, cur: Cursor, st: Storage, count: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(values (count*512, C) of the grid's dtype, codes (count,)) when the read fits the topology
        of ``count`` leaves and the cursor (then moved past the leaf buffers); else None."""
        self.join()
        if self.error is not None or count != self.count or cur.pos != self.start or cur.end != self.end:
            return None
        codes = self.heads[:, -1].copy()
        if not _plain(codes, True):
            return None
        cur.pos = self.end
        return _as_values(self.values, st, count * tree.LEAF_VOXELS, owned=True), codes


def read_leaf_values(
    cur: Cursor,
    st: Storage,
    masks: np.ndarray,
    wanted: np.ndarray | None = None,
    path: scatter.Source | None = None,
    early: EarlyRead | None = None,
) -> np.ndarray:
    """The values of every leaf (or of the leaves ``wanted`` (L,) bool selects), (W*512, C) of the
    grid's dtype, in leaf order; ``masks`` (L, 8) uint64 are the leaves' value masks from the
    topology.  Each leaf buffer repeats its value mask (skipped, as OpenVDB skips it) before its
    values.  Leaves not wanted are passed over without being decompressed (and in an uncompressed
    grid, mostly without being read).  ``path``: the file the cursor's bytes were mapped from, read
    directly where that is faster (see :func:`_fixed_layout`); ``early``: the leaf records read while
    the topology was parsed, used when they fit it."""
    L = len(masks)
    want = np.ones(L, bool) if wanted is None else wanted
    if st.mask_compressed:  # active voxels per leaf: the values stored (without mask compression: 512)
        counts = np.bitwise_count(masks).sum(axis=1).astype(np.int64)
    else:
        counts = np.full(L, tree.LEAF_VOXELS, np.int64)
    fixed = None
    if early is not None:
        fixed = early.take(cur, st, L) if wanted is None else early.join()
    if fixed is None:
        fixed = _fixed_layout(cur, st, counts, wanted, path)
    if fixed is not None:
        values, codes = fixed
        v0 = np.where((codes == fmt.NO_MASK_AND_MINUS_BG)[:, None], -st.background, st.background)
        v1 = np.broadcast_to(st.background, (L, st.components))
        selection = None
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
    leaves at once afterwards, from the codes and the few values leaves stored.  The loop stops after
    the last wanted leaf (the codes of the leaves after it are left 0)."""
    L = len(counts)
    item = st.stored.itemsize
    half_empty = st.stored.dtype.itemsize == 2
    masked = st.mask_compressed
    zipped, blosc = bool(st.compression & fmt.COMPRESS_ZIP), bool(st.compression & fmt.COMPRESS_BLOSC)
    little = st.dtype.newbyteorder("<")
    codes = np.zeros(L, np.uint8)
    stored_values: dict[int, np.ndarray] = {}  # leaf -> its one or two stored inactive values
    selections: dict[int, np.ndarray] = {}  # leaf -> its 64-byte selection mask
    out = np.empty(int(np.count_nonzero(want)) * tree.LEAF_VOXELS * item, np.uint8)
    filled = 0
    buf, end, pos = cur.buf, cur.end, cur.pos
    count_of, wanted = counts.tolist(), want.tolist()
    stop = int(np.nonzero(want)[0][-1]) + 1 if np.any(want) else 0
    for n in range(stop):
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
