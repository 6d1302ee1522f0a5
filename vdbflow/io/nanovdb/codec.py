"""Compressed grid payloads: their chunks found and checked (a blosc frame's header before anything
is decompressed), zip streams inflated and blosc frames decompressed into exactly the declared size,
stopping at the first byte a lying payload would write beyond it."""

from __future__ import annotations

import zlib

import numpy as np

from vdbflow.errors import NanoVDBError
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb.header import MAX_GRID_BYTES, need, unpack
from vdbflow.io.nanovdb.records import GridSource

ZIP_MAX_RATIO = 1032  # deflate never expands more than 1032:1 (zlib's documented bound)
BLOSC_MAX_CHUNK = 1 << 30  # NanoVDB writes blosc grids in chunks of at most 1 GiB, each with its own size
ZIP_SLACK = 4096  # and a few bytes more (the stream's header and last block)
_INFLATE_STEP = 1 << 24  # zip output produced per step


def _inflate(payload: bytes, out: np.ndarray, where: int) -> None:
    """Inflates one zlib stream into ``out`` in bounded steps; a stream that would produce more or
    fewer bytes than ``len(out)`` stops at the first byte too many and raises."""
    expected = len(out)
    inflater = zlib.decompressobj()
    pos, tail = 0, payload
    try:
        while not inflater.eof:
            step = inflater.decompress(tail, min(_INFLATE_STEP, expected - pos + 1))  # never 0: 0 = unbounded
            if pos + len(step) > expected:
                raise NanoVDBError(f"zip payload at byte {where} inflates to more than the declared {expected} bytes")
            out[pos : pos + len(step)] = np.frombuffer(step, np.uint8)
            pos += len(step)
            tail = inflater.unconsumed_tail
            if not step and not tail:
                break  # input used up before the stream's end
    except zlib.error as err:
        raise NanoVDBError(f"zip payload at byte {where} does not inflate after {pos} bytes: {err}") from None
    if not inflater.eof or pos != expected:
        raise NanoVDBError(
            f"zip payload at byte {where} inflates to {pos} bytes"
            f"{'' if inflater.eof else ' and then ends mid-stream'}, expected {expected}"
        )


def _blosc_frame_size(buf: np.ndarray, at: int, size: int, residual: int) -> int:
    """The uncompressed size a blosc frame's 16-byte header declares, checked before anything is
    decompressed: at most the ``residual`` bytes of the grid still to come, and the frame must fill
    exactly its chunk of ``size`` bytes."""
    if size < fmt.BLOSC_HEADER_SIZE:
        raise NanoVDBError(
            f"blosc chunk at byte {at} has {size} bytes, expected at least a {fmt.BLOSC_HEADER_SIZE}-byte header"
        )
    nbytes, _blocksize, cbytes = unpack(buf, at + fmt.BLOSC_OFF_NBYTES, "<III", "blosc header")
    if not 0 < nbytes <= residual:
        raise NanoVDBError(
            f"blosc chunk at byte {at} declares {nbytes} uncompressed bytes "
            f"(at byte {at + fmt.BLOSC_OFF_NBYTES}), expected between 1 and the {residual} bytes left "
            f"of the grid"
        )
    if cbytes != size:
        raise NanoVDBError(
            f"blosc chunk at byte {at} declares {cbytes} compressed bytes "
            f"(at byte {at + fmt.BLOSC_OFF_CBYTES}), but its chunk holds {size}"
        )
    return nbytes


def decompress(src: GridSource, expected: int) -> np.ndarray:
    """A compressed grid's bytes: its zip stream or blosc chunks decompressed into exactly
    ``expected`` bytes, stopping at the first byte a lying payload would write beyond them."""
    if src.codec == "zip":
        ((at, size, _),) = src.chunks
        if expected > ZIP_MAX_RATIO * size + ZIP_SLACK:
            raise NanoVDBError(
                f"zip payload at byte {at} of {size} bytes cannot inflate to the declared "
                f"{expected} bytes (deflate expands at most {ZIP_MAX_RATIO}:1)"
            )
        out = np.empty(expected, np.uint8)  # pages are only touched as they are written
        _inflate(bytes(src.buffer[at : at + size]), out, at)
        return out
    from numcodecs import Blosc  # c-blosc 1 frames, as NanoVDB writes them (numcodecs comes with zarr)

    out = np.empty(expected, np.uint8)  # the frames' headers add up to exactly this (checked in compressed_chunks)
    frame_codec = Blosc()
    pos = 0
    for at, size, want in src.chunks:
        # straight into the frame's slice of the grid: `want` bytes, what its header declares (compressed_chunks)
        try:
            frame_codec.decode(src.buffer[at : at + size], out=out[pos : pos + want])
        except Exception as err:
            raise NanoVDBError(f"blosc chunk at byte {at} does not decompress: {err}") from None
        pos += want
    return out


def compressed_chunks(buf: np.ndarray, pos: int, codec: str, grid_size: int, name: str) -> list[tuple[int, int, int]]:
    """(offset, size, uncompressed size) of the compressed chunks of one grid starting at ``pos``,
    each after its u64 size: one zlib stream, or blosc frames until their headers account for the
    whole grid (NanoVDB writes one per GiB, Warp one per grid)."""
    chunks = []
    residual = grid_size
    while True:
        size = unpack(buf, pos, "<Q", "compressed chunk size")[0]
        if size > MAX_GRID_BYTES:
            raise NanoVDBError(f"compressed chunk size {size} at byte {pos} is absurd")
        at = pos + fmt.CHUNK_SIZE_BYTES
        need(buf, at, size, f"compressed grid {name!r}")
        if codec == "zip":
            return [(at, size, grid_size)]
        nbytes = _blosc_frame_size(buf, at, size, residual)
        chunks.append((at, size, nbytes))
        pos = at + size
        residual -= nbytes
        if residual == 0:
            return chunks
