"""Render the README's figures with vdbflow.analysis.plot: python scripts/readme_figures.py [OUTDIR].

Beside the PNGs it writes ``figures.json``: every panel's title, axis labels and colour-bar label.
tests/test_readme.py renders the figures again and compares that record with the committed one, so
the committed figures say what the code draws today (units included).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from vdbflow import synthetic  # noqa: E402
from vdbflow.jobs.points import plane  # noqa: E402


def labels(fig) -> list[dict]:
    """Title, x/y labels of each Axes of ``fig`` (colour bars included), and the figure's title."""
    out = [{"suptitle": fig._suptitle.get_text()}] if fig._suptitle is not None else []
    for ax in fig.axes:
        out.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel()})
    return out


out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/figures")
out.mkdir(parents=True, exist_ok=True)
vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=64)  # the demo's field
res = (240, 240)
pts = plane((0, 0, np.pi), (2 * np.pi, 0, 0), (0, 2 * np.pi, 0), res)
ds = vol.sample_grad(pts, outputs=["value", "jacobian", "inside"])  # the plots blank where the stencil leaves the data
record = {}
fig = ds.vdbflow.plot.jacobian_grid(shape=res)
fig.savefig(out / "jacobian_grid.png", dpi=80)
record["jacobian_grid.png"] = labels(fig)
fig, axes = plt.subplots(1, 3, figsize=(14, 4.4), layout="constrained")
ds.vdbflow.plot.slice("velocity", component="magnitude", shape=res, ax=axes[0])
ds.vdbflow.plot.slice("vorticity_magnitude", shape=res, ax=axes[1])
ds.vdbflow.plot.slice("q_criterion", shape=res, ax=axes[2])
fig.savefig(out / "slices.png", dpi=80)
record["slices.png"] = labels(fig)
(out / "figures.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
print("wrote", *(str(p) for p in sorted(out.glob("*.png"))), out / "figures.json")
