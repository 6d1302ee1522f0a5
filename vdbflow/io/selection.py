"""The part of a grid a reader loads: ``bbox=`` (an inclusive index box) and ``leaves=`` (leaf indices in
tree order), checked one way for .nvdb and .vdb files, each raising its format's error."""

from __future__ import annotations

from typing import Any

import numpy as np

_LIMIT = 2**62  # bounds beyond any grid (index coordinates are 32-bit) are cut to this


def index_box(bbox: Any, error: type[Exception]) -> np.ndarray | None:
    """``bbox`` ((i0, j0, k0), (i1, j1, k1)) as (2, 3) int64, or None for None.

    Parameters
    ----------
    bbox : array-like of shape (2, 3), or None
        Inclusive index coordinates: finite real numbers (floats are cut toward zero, bounds beyond
        +-2**62 to that: no grid reaches them).
    error : type
        The exception to raise (the format's own: ``NanoVDBError``, ``OpenVDBError``).

    Returns
    -------
    numpy.ndarray or None
        The box, (2, 3) int64.
    """
    if bbox is None:
        return None
    try:
        box = np.asarray(bbox)
    except (ValueError, TypeError) as err:  # ragged nesting
        raise error(f"expected bbox as ((i0, j0, k0), (i1, j1, k1)) of numbers, got {bbox!r:.80} ({err})") from None
    if box.dtype == object:  # Python ints beyond int64, or mixed types
        try:
            box = box.astype(np.float64)
        except (ValueError, TypeError, OverflowError):
            pass
    if box.dtype.kind not in "iuf":
        raise error(f"expected bbox as ((i0, j0, k0), (i1, j1, k1)) of numbers, got dtype {box.dtype} ({bbox!r:.80})")
    if box.shape != (2, 3):
        raise error(f"expected bbox as ((i0, j0, k0), (i1, j1, k1)), got shape {box.shape}")
    if box.dtype.kind == "f":
        if not np.all(np.isfinite(box)):
            raise error(f"expected a bbox of finite numbers, got {box.tolist()}")
        box = np.clip(box, -_LIMIT, _LIMIT)
    elif box.dtype == np.uint64:
        box = np.minimum(box, np.uint64(_LIMIT))
    return np.clip(box.astype(np.int64), -_LIMIT, _LIMIT)


def leaf_indices(leaves: Any, count: int, error: type[Exception], where: str) -> np.ndarray | None:
    """``leaves`` as (n,) int64 indices in [0, ``count``) of the leaves in tree order, or None for None.

    Parameters
    ----------
    leaves : array-like of int, or None
        Leaf indices (repeats allowed).  A boolean array is refused (not read as the indices 0 and 1):
        ``np.flatnonzero(mask)`` gives its indices.
    count : int
        Leaves of the grid.
    error : type
        The exception to raise (the format's own).
    where : str
        The file or buffer, for messages.

    Returns
    -------
    numpy.ndarray or None
        The indices.
    """
    if leaves is None:
        return None
    try:
        idx = np.asarray(leaves)
    except (ValueError, TypeError) as err:
        raise error(f"expected leaves as a 1-D array of leaf indices, got {leaves!r:.80} ({err})") from None
    if idx.dtype == object and idx.ndim == 1 and all(isinstance(v, (int, np.integer)) for v in idx.tolist()):
        idx = np.array([int(v) if -_LIMIT < int(v) < _LIMIT else -1 for v in idx.tolist()], np.int64)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        hint = " (a boolean mask: np.flatnonzero(mask) gives its indices)" if idx.dtype == bool else ""
        raise error(f"expected leaves as a 1-D array of leaf indices, got {idx.dtype} of shape {idx.shape}{hint}")
    if idx.dtype == np.uint64:
        idx = np.minimum(idx, np.uint64(_LIMIT))
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= count):
        raise error(f"expected leaf indices in [0, {count}) of {where}, got {idx.min()}..{idx.max()}")
    return idx
