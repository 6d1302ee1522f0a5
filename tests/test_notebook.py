"""notebooks/explore_gradients.ipynb executes top to bottom (nbclient) and shows what it promises."""

import re
import shlex
import shutil
import subprocess
import sys
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


def test_the_notebook_says_what_is_true():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "stores no component names" not in text  # .nvdb files keep them (and units)
    assert text.count("Runs top to bottom in about") == 1 and "couple of minutes" not in text
    assert '".[notebook]"' in text and "jupyter lab" in text


def test_the_ftle_comparison_is_drawn_on_one_colour_scale():
    """The two FTLE panels (variational, finite differences) share one scale and one colour bar through
    vdbflow.plot.slice_panels (its figure's limits are checked against the data in tests/test_plot.py),
    not panels that scale their colours each on its own under one bar."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and 'method="finite_difference"' in c.source]
    assert "vdbflow.plot.slice_panels(\n    [field, fd]," in cell.source
    assert "pcolormesh" not in cell.source and "colorbar" not in cell.source


def _headless_command() -> list[str]:
    """The command docs/install.md gives for running the notebook headless, as arguments."""
    text = (NOTEBOOK.parents[1] / "docs" / "install.md").read_text()
    (line,) = [c for c in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)[0].splitlines() if c.strip()]
    return shlex.split(line)


@pytest.mark.slow
def test_notebook_executes(tmp_path):
    """Run headless by the command docs/install.md gives (`python -m jupyter execute`, with --inplace to keep the
    outputs) from a clone's root: the notebook finds or writes the demo's files in the root's vdbflow-demo/,
    never under notebooks/."""
    command = _headless_command()
    assert command == ["python", "-m", "jupyter", "execute", "notebooks/explore_gradients.ipynb"]
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(NOTEBOOK, folder)
    done = subprocess.run(
        [sys.executable, *command[1:], "--inplace", "--timeout=240"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    nb = nbformat.read(folder / NOTEBOOK.name, as_version=4)
    assert sorted(p.name for p in folder.iterdir()) == [NOTEBOOK.name]
    assert (tmp_path / "vdbflow-demo" / "gyre").is_dir()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 7  # slices, Jacobian grid, line, trajectories, FTLE fields, distributed FTLE, Q-R plane
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("velocity_jacobian" in h and "xarray" in h for h in html)  # the Dataset repr
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Dask dashboard: http" in text
    binned = [line for line in text.splitlines() if line.startswith("Q-R points binned:")]
    assert binned and 0 < int(binned[0].split()[3]) <= int(binned[0].split()[5])  # the Q-R section ran
    stayed = text.split("particles that stayed in the shell:")[1].split()
    assert 0 < int(stayed[0]) < int(stayed[2])  # the distributed FTLE run (equal to one process: asserted there)
    assert "VolumeSeries of 41 steps" in text  # the double gyre's series, opened lazily
    difference = float(text.split("median |variational - finite difference|:")[1].split()[0])
    assert difference < 0.01  # the two FTLE estimates agree away from the ridges
    assert (tmp_path / "vdbflow-demo" / "taylor_green.nvdb").is_file()
    assert "('m/s', 'm', ('u', 'v', 'w'))" in "".join(
        o.get("data", {}).get("text/plain", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )  # units and component names come from the file
