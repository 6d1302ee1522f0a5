"""Misaligned memory-mapped values: what reading them in place costs, against copying them to aligned
memory first, side by side in one run.

    python benchmarks/bench_alignment.py [--mb 200] [--points 2000000] [--repeat 5] [--dir /tmp]

An uncompressed .nvdb grid starts at byte 193 + len(name) of its file, so its float values are 4-byte
aligned for one name length in four.  The kernels read values through memcpy-style loads (one plain
load on x86-64 and AArch64), so a mapped volume is sampled where it lies.  The alternative is a copy
of the values into aligned memory when the file is opened.  Both are timed here on the same file:
sampling in place from an aligned name, in place from a misaligned name, and copy + sampling.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from bench_nvdb_read import build_volume
from timing import best_of

import vdbflow


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--points", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/tmp")
    args = ap.parse_args()
    vol = build_volume(args.mb)
    rng = np.random.default_rng(0)
    hi = vol.index_bbox[1].astype(np.float64)
    points = rng.uniform(0, hi, (args.points, 3))
    out = {}
    for name in ("abc", "ab"):  # 193 + 3 = 196: aligned; 193 + 2 = 195: misaligned
        path = os.path.join(args.dir, f"vdbflow_align_{name}.nvdb")
        vol.to_nvdb(path, name=name)
        mapped = vdbflow.open(path)
        aligned = mapped.kernel_arrays().values.ctypes.data % 4 == 0
        key = "aligned" if aligned else "misaligned"
        out[f"sample in place, {key} (s)"] = best_of(lambda m=mapped: m.sample_grad(points, space="index"), args.repeat)
        if not aligned:

            def copy_then_sample(m=mapped):
                copied = vdbflow.Volume(
                    m.topology,
                    np.array(m.leaf_values).reshape(-1, m.components),
                    m.kernel_arrays().background.copy(),
                    m.kernel_arrays().tile_values.copy(),
                    m.value_type,
                    False,
                    m.name,
                    m.component_names,
                )
                return copied.sample_grad(points, space="index")

            out["copy values + sample (s)"] = best_of(copy_then_sample, args.repeat)
        del mapped
        os.remove(path)
    out["misaligned / aligned"] = out["sample in place, misaligned (s)"] / out["sample in place, aligned (s)"]
    out["copy + sample / in place (misaligned)"] = (
        out["copy values + sample (s)"] / out["sample in place, misaligned (s)"]
    )
    print(json.dumps({k: round(v, 4) for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()
