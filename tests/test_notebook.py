"""notebooks/explore_gradients.ipynb executes top to bottom (nbclient) and shows what it promises."""

import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "explore_gradients.ipynb"


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_notebook_executes(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    shutil.copy(NOTEBOOK, tmp_path)
    nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5  # the slices, the Jacobian grid, the line comparison, trajectories, FTLE fields
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("velocity_jacobian" in h and "xarray" in h for h in html)  # the Dataset repr
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Dask dashboard: http" in text
    assert "VolumeSeries of 41 steps" in text  # the double gyre's series, opened lazily
    difference = float(text.split("median |variational - finite difference|:")[1].split()[0])
    assert difference < 0.01  # the two FTLE estimates agree away from the ridges
    assert (tmp_path / "vdbflow-demo" / "taylor_green.nvdb").is_file()
