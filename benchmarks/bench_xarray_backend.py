"""xarray's door against the plain way: a dense box of a sparse grid loaded through
``xr.open_dataset(path, engine="vdbflow", bbox=box)`` (with Dask chunks, and without), against
``vdbflow.open(path, bbox=box)`` and its active voxels scattered into a NumPy array by hand.

    python benchmarks/bench_xarray_backend.py [--side 192] [--box 128] [--repeat 5] [--dir /tmp]

The grid: a vec3f Taylor-Green-like field on a spherical shell of a ``side``^3 box (about 30 % active),
saved as an uncompressed .nvdb file; the box: ``box``^3 voxels at its centre.  Each way is timed from the
open to the loaded array (the file's pages are in the page cache after the warm-up call).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import xarray as xr
from timing import timed

import vdbflow
from vdbflow.io.grid_ref import clear_cache
from vdbflow.io.xarray_backend import VdbflowBackendEntrypoint


def build(side: int) -> vdbflow.Volume:
    """A vec3f field on a spherical shell of a ``side``^3 box."""
    i, j, k = np.meshgrid(*[np.arange(side, dtype=np.float32)] * 3, indexing="ij", sparse=True)
    h = 2 * np.pi / side
    u = np.stack(np.broadcast_arrays(np.sin(i * h) * np.cos(j * h), -np.cos(i * h) * np.sin(j * h), 0 * k), -1)
    r = np.sqrt((i - side / 2) ** 2 + (j - side / 2) ** 2 + (k - side / 2) ** 2)
    shell = (r > 0.3 * side) & (r < 0.45 * side)
    return vdbflow.Volume.from_dense(u.astype(np.float32), voxel_size=h, active=shell, name="velocity")


def by_hand(path: str, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """What a user writes without the backend: the box's leaves, their active voxels scattered."""
    vol = vdbflow.open(path, bbox=(lo, hi))
    dense = np.empty((*(hi - lo + 1), vol.components), vol.dtype)
    dense[...] = vol.background_values
    ijk = vol.active_voxels()
    inside = np.all((ijk >= lo) & (ijk <= hi), axis=1)
    dense[tuple((ijk[inside] - lo).T)] = vol.active_values()[inside]
    return dense


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=192)
    ap.add_argument("--box", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    path = os.path.join(args.dir, "bench_xarray_backend.nvdb")
    vol = build(args.side)
    vol.to_nvdb(path)
    lo = np.full(3, (args.side - args.box) // 2)
    hi = lo + args.box - 1
    want = by_hand(path, lo, hi)

    def opened(**kwargs: object) -> np.ndarray:
        clear_cache()  # each call reads the file (the backend keeps the boxes it read)
        ds = xr.open_dataset(path, engine=VdbflowBackendEntrypoint, bbox=(lo, hi), **kwargs)
        return ds["velocity"].values

    for kwargs in ({}, {"chunks": {}}):  # the same values every way
        np.testing.assert_array_equal(opened(**kwargs), want)
    ways = {
        "by hand (vdbflow.open + scatter)": lambda: by_hand(path, lo, hi),
        "xarray, no chunks": opened,
        "xarray, chunks={} (64^3, Dask threads)": lambda: opened(chunks={}),
        "xarray, chunks={}, leaf_chunks=32": lambda: opened(chunks={}, leaf_chunks=32),
    }
    times = {name: timed(fn, args.repeat) for name, fn in ways.items()}
    base = min(times["by hand (vdbflow.open + scatter)"])
    report = {
        "grid": f"vec3f, {vol.active_voxel_count:,} active voxels of {args.side}^3, {os.path.getsize(path):,} bytes",
        "box": f"{args.box}^3 voxels ({want.nbytes / 1e6:.1f} MB)",
        "seconds (min, median)": {n: [round(min(t), 4), round(float(np.median(t)), 4)] for n, t in times.items()},
        "ratio to by hand (min / min)": {n: round(min(t) / base, 2) for n, t in times.items()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
