"""Write the small OpenVDB seed files of tests/data/openvdb (the fuzzer's seeds, and files the suite
reads without pyopenvdb), with OpenVDB itself: run by the system python3 that imports pyopenvdb.

    /usr/bin/python3 scripts/make_vdb_seeds.py [FOLDER]   # default tests/data/openvdb

pyopenvdb writes ``grids.vdb`` (blosc + active-mask compression, its default): a sparse float grid
with negative coordinates, inactive voxels of their own, an active 128^3 tile and 8^3 tiles, custom
metadata; a second grid of the same name; a half-float grid; a small level-set sphere; a vec3s grid
with an affine transform; a bool grid; and an instance (a grid sharing another's tree).  vdb_tool
(when installed) rewrites it with the codecs ``zip`` and ``active`` (mask compression
alone); ``none`` would take over 1 MB, so the uncompressed layout is tested with files written in
the tests.  ``tests/test_openvdb.py::test_committed_seeds_match_a_fresh_write`` checks that the
committed files still read as OpenVDB writes them.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyopenvdb as vdb


def grids():
    rng = np.random.default_rng(11)
    density = vdb.FloatGrid(background=0.5)
    density.name = "density"
    acc = density.getAccessor()
    # one 4096^3 node (negative coordinates): each costs 8 KiB of masks
    for p, v in zip(rng.integers(-60, 0, (60, 3)), rng.normal(size=60), strict=True):
        acc.setValueOn(tuple(int(c) for c in p), float(v))
    for p in rng.integers(-60, 0, (10, 3)):
        acc.setValueOff(tuple(int(c) for c in p), float(rng.normal()) + 5.0)
    density.fill((-256, -256, -256), (-129, -129, -129), 3.0, True)
    density.fill((-24, -24, -24), (-17, -17, -17), 7.0, False)
    density.fill((-8, -48, -64), (-1, -41, -57), 2.0, True)
    density.transform = vdb.createLinearTransform(voxelSize=0.25)
    density["units"] = "kg/m^3"
    density["count"] = 42
    density["offset"] = (1.0, 2.0, 3.0)
    again = vdb.FloatGrid(background=-1.0)
    again.name = "density"
    again.getAccessor().setValueOn((3, -5, 7), 9.0)
    half = vdb.FloatGrid(background=0.25)
    half.name = "half"
    hacc = half.getAccessor()
    for p, v in zip(rng.integers(0, 30, (30, 3)), rng.normal(size=30), strict=True):
        hacc.setValueOn(tuple(int(c) for c in p), float(v))
    half.fill((8, 8, 8), (15, 15, 15), -2.0, False)
    half.saveFloatAsHalf = True
    sphere = vdb.createLevelSetSphere(radius=3.0, center=(8.5, 9.0, 8.25), voxelSize=1.0, halfWidth=2.0)
    sphere.name = "sphere"
    vel = vdb.Vec3SGrid()
    vel.name = "vel"
    vacc = vel.getAccessor()
    for p in rng.integers(0, 60, (40, 3)):
        vacc.setValueOn(tuple(int(c) for c in p), tuple(float(c) for c in rng.normal(size=3)))
    vel.transform = vdb.createLinearTransform(
        np.array([[0.5, 0.1, 0.0, 0.0], [0.0, 0.4, 0.0, 0.0], [0.1, 0.0, 0.3, 0.0], [1.0, 2.0, 3.0, 1.0]])
    )
    mask = vdb.BoolGrid()
    mask.name = "mask"
    macc = mask.getAccessor()
    for p in rng.integers(0, 40, (30, 3)):
        macc.setValueOn(tuple(int(c) for c in p), True)
    instance = density.copy()  # shares density's tree: written as an instance
    instance.name = "density_instance"
    instance.transform = vdb.createLinearTransform(voxelSize=0.5)
    return [density, again, half, sphere, vel, mask, instance]


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    every = grids()
    vdb.write(str(folder / "grids.vdb"), every, metadata={"creator": "vdbflow seeds", "frame": 12})
    tool = shutil.which("vdb_tool")
    if tool:
        few = folder / "few.vdb"  # density, sphere and vel, rewritten with each codec
        vdb.write(str(few), [every[0], every[3], every[4]])
        for codec in ("zip", "active"):
            subprocess.run(
                [tool, "-read", str(few), "-write", f"codec={codec}", str(folder / f"{codec}.vdb")],
                check=True,
                capture_output=True,
            )
        few.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests/data/openvdb")
