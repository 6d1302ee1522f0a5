"""Reading .nvdb files: vdbflow.open + a pass over every value, against the machine's raw read
speed of the same file (``cat FILE > /dev/null``), side by side in one run.

    python benchmarks/bench_nvdb_read.py [--mb 520] [--dir /tmp]

Builds a fully active vec3f volume of at least --mb megabytes, writes it uncompressed and with
zip, then times (best of --repeat, page cache warm for both) the raw read and vdbflow's read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

import numpy as np
from timing import best_of

import vdbflow
from vdbflow.core import tree
from vdbflow.core.transform import Transform
from vdbflow.core.value_types import VALUE_TYPES
from vdbflow.core.volume import Topology, Volume


def build_volume(megabytes: float) -> Volume:
    """A smooth, fully active vec3f field of about ``megabytes`` MB of leaf data."""
    leaves_needed = int(megabytes * 1e6 / (512 * 12)) + 1
    side = int(np.ceil(leaves_needed ** (1 / 3)))
    keys = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:leaves_needed]
    origins = (keys[tree.tree_order(keys)] * 8).astype(np.int32)
    masks = np.full((len(origins), 8), np.iinfo(np.uint64).max, np.uint64)
    local = np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), -1).reshape(512, 3)
    data = np.empty((len(origins) * 512, 3), np.float32)
    for start in range(0, len(origins), 4096):  # in slabs, to keep the peak memory down
        o = origins[start : start + 4096]
        ijk = (o[:, None, :] + local[None]).reshape(-1, 3).astype(np.float32) * 0.05
        data[start * 512 : (start + len(o)) * 512] = np.stack(
            [np.sin(ijk[:, 0]) * np.cos(ijk[:, 1]), np.cos(ijk[:, 1]) * ijk[:, 2], np.sin(ijk[:, 2])], 1
        )
    topo = Topology(origins, masks, Transform.from_voxel_size(0.05))
    return Volume(
        topo,
        data,
        np.zeros(3, np.float32),
        np.zeros((0, 3), np.float32),
        VALUE_TYPES["vec3f"],
        index_layout=False,
        name="velocity",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=520.0)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()

    vol = build_volume(args.mb)
    results = {}
    for codec in ("none", "zip"):
        path = os.path.join(args.dir, f"vdbflow_bench_{codec}.nvdb")
        vol.to_nvdb(path, codec=codec)
        size_mb = os.path.getsize(path) / 1e6

        def raw(path=path):
            subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)

        def open_and_map(path=path):
            """open, then touch every 4 KiB page of the values: the whole grid is in the process."""
            v = vdbflow.open(path)
            assert v.active_voxel_count == vol.active_voxel_count
            flat = v._data.reshape(-1)
            float(flat[:: 4096 // flat.itemsize].sum())

        def open_and_sum(path=path):
            """open, then read every value (a float64 sum over all components)."""
            v = vdbflow.open(path)
            float(np.add.reduce(v.leaf_values, axis=None, dtype=np.float64))

        t_raw = best_of(raw, args.repeat)
        t_map = best_of(open_and_map, args.repeat)
        t_sum = best_of(open_and_sum, args.repeat)
        results[codec] = {
            "size_mb": size_mb,
            "cat_mb_s": size_mb / t_raw,
            "open_map_mb_s": size_mb / t_map,
            "open_sum_mb_s": size_mb / t_sum,
            "ratio_map": t_raw / t_map,
            "ratio_sum": t_raw / t_sum,
        }
        r = results[codec]
        print(
            f"{codec:<6} {size_mb:>8.1f} MB  cat {r['cat_mb_s']:>7.0f} MB/s   "
            f"open+map {r['open_map_mb_s']:>7.0f} MB/s ({r['ratio_map']:.2f}x)   "
            f"open+sum {r['open_sum_mb_s']:>7.0f} MB/s ({r['ratio_sum']:.2f}x)"
        )
        os.remove(path)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
