"""The README and the user guide are a contract: their ```python blocks run in order (the README's, then
docs/guide.md's), in one namespace, and their ```bash blocks run line by line, in a folder where the Quick
start's demo job has run (its files are what the snippets open).  The Quick start block itself (pip
install, pytest) is what CI runs around the suite."""

import json
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
GUIDE = REPO / "docs" / "guide.md"
PAGES = (README, GUIDE)  # the pages whose examples run, in this order


def blocks(language: str, pages: tuple[Path, ...] = PAGES) -> list[tuple[str, str]]:
    """(page:line, code) of every fenced block of ``language`` in ``pages``, in order."""
    out = []
    for page in pages:
        text = page.read_text()
        for m in re.finditer(r"^```" + language + r"\n(.*?)^```", text, flags=re.S | re.M):
            out.append((f"{page.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}", m.group(1)))
    return out


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    """A folder with the configs and the demo job's files (a small run of configs/demo.yaml)."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "configs").symlink_to(REPO / "configs")
    (folder / "docs").symlink_to(REPO / "docs")  # the README builds the documentation site into vdbflow-demo/
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", "configs/demo.yaml", "--set", "points.count=20000"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (folder / "vdbflow-demo" / "taylor_green.nvdb").is_file()
    return folder


def test_the_readme_has_runnable_blocks():
    assert len(blocks("python", (README,))) >= 1 and len(blocks("bash", (README,))) >= 2
    assert len(blocks("python", (GUIDE,))) >= 8 and len(blocks("bash", (GUIDE,))) >= 1


def test_the_readme_is_short_and_its_links_resolve():
    """A newcomer's five minutes (issue: the README was 60 KB): at most 12 KB, every relative link a file."""
    text = README.read_text()
    assert len(text.encode()) <= 12_000
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 15
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, missing


@pytest.mark.slow
def test_python_blocks_run_in_order(demo_folder, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(demo_folder)
    namespace: dict = {"__name__": "__readme__"}
    for line, code in blocks("python"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(compile(code, line, "exec"), namespace)  # noqa: S102 - the pages' own code
            except Exception as err:  # name the block that failed
                raise AssertionError(f"the python block at {line} fails: {err!r}") from err
        said = [f"{w.category.__name__}: {w.message}" for w in caught]
        assert not said, f"the python block at {line} warns: {said}"
    import matplotlib.pyplot as plt

    plt.close("all")
    assert_written_under_the_demo_folder(demo_folder)


def assert_written_under_the_demo_folder(folder: Path) -> None:
    """The README's examples write only under vdbflow-demo/ (which .gitignore names): a user who runs
    them in a clone is left with no stray files."""
    assert "vdbflow-demo/" in (REPO / ".gitignore").read_text().splitlines()
    stray = sorted(p.name for p in folder.iterdir() if p.name not in ("configs", "docs", "vdbflow-demo"))
    assert not stray, f"README examples wrote {stray} outside vdbflow-demo/"


@pytest.mark.slow
def test_bash_blocks_run(demo_folder):
    env = {**os.environ, "MPLBACKEND": "Agg", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = 0
    for line, code in blocks("bash"):
        if "pip install" in code:  # the Quick start: installing and running the suite is CI's own job
            continue
        for command in (c for c in code.splitlines() if c.strip() and not c.startswith("#")):
            if shlex.split(command)[0] == "vdbflow":  # the installed command, in this interpreter
                command = f"{shlex.quote(sys.executable)} -m vdbflow.jobs.cli.main {command[len('vdbflow ') :]}"
            result = subprocess.run(
                command, shell=True, cwd=demo_folder, env=env, capture_output=True, text=True, timeout=600
            )
            assert result.returncode == 0, f"{line}: {command}\n{result.stdout}\n{result.stderr}"
            ran += 1
    assert ran >= 6
    assert_written_under_the_demo_folder(demo_folder)


@pytest.mark.slow
def test_the_committed_figures_are_what_the_figure_script_draws(tmp_path):
    """scripts/readme_figures.py renders the README's figures and records their titles and labels; a
    fresh rendering records the same as the committed docs/figures/figures.json (units included)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "readme_figures.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    fresh = json.loads((tmp_path / "figures.json").read_text())
    assert fresh == json.loads((REPO / "docs" / "figures" / "figures.json").read_text())
    labels = json.dumps(fresh, ensure_ascii=False)
    assert "[1/s]" in labels and "m/s/m" not in labels
    for name in fresh:
        assert (REPO / "docs" / "figures" / name).stat().st_size > 10_000 and f"]({'figures/' + name})" in (
            GUIDE.read_text()
        )


def _summary_rows(text: str) -> dict[str, str]:
    """The rows of a rich summary table (the first one in ``text``), continuation lines joined."""
    rows: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")] if line.startswith("│") else None
        if cells is None or len(cells) != 2:
            continue
        if cells[0]:
            key = cells[0]
            rows[key] = cells[1]
        elif key is not None:
            rows[key] += " " + cells[1]
    return rows


@pytest.mark.slow
def test_the_demo_prints_the_summary_the_readme_shows(tmp_path):
    """The Quick start's demo, run as written: the rows that do not depend on the machine's speed
    (points, grids, the analytic check, the edge of the data) read as the README prints them."""
    result = subprocess.run(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "demo"],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = README.read_text()
    shown = text[text.index("it prints (") :]
    shown = shown[shown.index("```\n") + 4 :]
    readme, printed = _summary_rows(shown[: shown.index("```")]), _summary_rows(result.stdout)
    for key in ("points", "grids", "max |J - J_exact|", "edge of the data"):
        assert readme[key] == printed[key], f"README: {readme.get(key)!r}, the demo: {printed.get(key)!r}"
