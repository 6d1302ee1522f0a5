"""Render the README's figures with vdbflow.analysis.plot: python scripts/readme_figures.py [OUTDIR]."""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from vdbflow import synthetic  # noqa: E402
from vdbflow.jobs.points import plane  # noqa: E402

out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/figures")
out.mkdir(parents=True, exist_ok=True)
vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=64)  # the demo's field
res = (240, 240)
pts = plane((0, 0, np.pi), (2 * np.pi, 0, 0), (0, 2 * np.pi, 0), res)
ds = vol.sample_grad(pts)
ds = ds.where(xr.DataArray(vol.stencil_inside(pts), dims="point"))  # only points whose stencil is all data
fig = ds.vdbflow.plot.jacobian_grid(shape=res)
fig.savefig(out / "jacobian_grid.png", dpi=80)
fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), layout="constrained")
ds.vdbflow.plot.slice("velocity", component="magnitude", shape=res, ax=axes[0])
ds.vdbflow.plot.slice("vorticity_magnitude", shape=res, ax=axes[1])
ds.vdbflow.plot.slice("q_criterion", shape=res, ax=axes[2])
fig.savefig(out / "slices.png", dpi=80)
print("wrote", *(str(p) for p in sorted(out.glob("*.png"))))
