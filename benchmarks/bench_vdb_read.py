"""Reading an uncompressed OpenVDB .vdb file with vdbflow's NumPy reader, against the raw read speed
of the same file (``cat FILE > /dev/null``), interleaved run by run with the page cache warm for both.

    python benchmarks/bench_vdb_read.py [--mb 500] [--runs 7] [--file /tmp/vdbflow-bench.vdb] [--json OUT]

The file is made once if it is missing, by OpenVDB itself: the system python3 with pyopenvdb fills a
float grid from a dense random array (every voxel active, so every leaf is full), and vdb_tool
rewrites it with ``codec=none`` (no zip, blosc or mask compression: the layout vdbflow reads as one
block).  Each run times ``cat`` and then ``vdbflow.open`` (header, topology, leaf values
scatter-read from the file into the values array while the topology is parsed, the Volume and its
hash tables built); the ratio of their rates per run is reported with its spread and, with
``--json``, run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np

import vdbflow

MAKE = r"""
import sys, numpy as np, pyopenvdb as vdb
n = int(sys.argv[2])
g = vdb.FloatGrid(background=0.0)
g.name = "density"
a = np.random.default_rng(0).normal(size=(n, n, n)).astype(np.float32)
g.copyFromArray(a, tolerance=0.0)
vdb.write(sys.argv[1], [g])
"""


def make_file(path: Path, megabytes: float) -> None:
    """A float grid of about ``megabytes`` of values, uncompressed (pyopenvdb, then vdb_tool codec=none)."""
    side = int(round((megabytes * 2**20 / 4) ** (1 / 3) / 8)) * 8
    tmp = path.with_suffix(".blosc.vdb")
    subprocess.run(["/usr/bin/python3", "-c", MAKE, str(tmp), str(side)], check=True)
    tool = shutil.which("vdb_tool")
    if tool is None:
        raise SystemExit("vdb_tool (libopenvdb-tools) is needed to write the uncompressed file")
    subprocess.run([tool, "-read", str(tmp), "-write", "codec=none", str(path)], check=True, capture_output=True)
    tmp.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=500)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--file", type=Path, default=Path("/tmp/vdbflow-bench-vdb-read.vdb"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not args.file.exists():
        make_file(args.file, args.mb)
    size = os.path.getsize(args.file)
    info = vdbflow.list_grids(args.file)[0]
    subprocess.run(f"cat {args.file} > /dev/null", shell=True, check=True)  # warm the page cache
    vdbflow.open(args.file)
    cat_s, read_s = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        subprocess.run(f"cat {args.file} > /dev/null", shell=True, check=True)
        cat_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        vol = vdbflow.open(args.file)
        read_s.append(time.perf_counter() - t)
        del vol
    cat_s, read_s = np.array(cat_s), np.array(read_s)
    ratio = cat_s / read_s  # vdbflow's rate over cat's, run by run
    mb = size / 2**20
    result = {
        "file_mb": round(mb, 1),
        "codec": info.codec,
        "leaves": info.leaf_count,
        "cat_mb_s": [round(mb / t) for t in cat_s],
        "vdbflow_mb_s": [round(mb / t) for t in read_s],
        "ratio_min_median_max": [round(float(v), 2) for v in (ratio.min(), np.median(ratio), ratio.max())],
        "ratio_per_run": [round(float(v), 2) for v in ratio],
    }
    print(
        f"{mb:.0f} MB, {info.leaf_count:,} leaves, codec {info.codec}: cat {np.median(mb / cat_s):.0f} MB/s "
        f"[{(mb / cat_s).min():.0f}-{(mb / cat_s).max():.0f}], vdbflow.open {np.median(mb / read_s):.0f} MB/s "
        f"[{(mb / read_s).min():.0f}-{(mb / read_s).max():.0f}]; ratio (vdbflow/cat) median "
        f"{np.median(ratio):.2f}, min {ratio.min():.2f}, max {ratio.max():.2f} over {args.runs} interleaved runs"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
