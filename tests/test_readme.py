"""The README is a contract: its ```python blocks run in order, in one namespace, and its ```bash
blocks run line by line, in a folder where the Quick start's demo job has run (its files are what the
snippets open).  The Quick start block itself (pip install, pytest) is what CI runs around the suite."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def blocks(language: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block of ``language`` in the README."""
    text = README.read_text()
    out = []
    for m in re.finditer(r"^```" + language + r"\n(.*?)^```", text, flags=re.S | re.M):
        out.append((text[: m.start()].count("\n") + 1, m.group(1)))
    return out


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    """A folder with the configs and the demo job's files (a small run of configs/demo.yaml)."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "configs").symlink_to(REPO / "configs")
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, "-m", "vdbflow.jobs.cli", "run", "configs/demo.yaml", "--set", "points.count=20000"],
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
    assert len(blocks("python")) >= 8 and len(blocks("bash")) >= 2


@pytest.mark.slow
def test_python_blocks_run_in_order(demo_folder, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(demo_folder)
    namespace: dict = {"__name__": "__readme__"}
    for line, code in blocks("python"):
        try:
            exec(compile(code, f"README.md:{line}", "exec"), namespace)  # noqa: S102 - the README's own code
        except Exception as err:  # name the block that failed
            raise AssertionError(f"the python block at README.md line {line} fails: {err!r}") from err
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.slow
def test_bash_blocks_run(demo_folder):
    env = {**os.environ, "MPLBACKEND": "Agg", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = 0
    for line, code in blocks("bash"):
        if "pip install" in code:  # the Quick start: installing and running the suite is CI's own job
            continue
        for command in (c for c in code.splitlines() if c.strip() and not c.startswith("#")):
            if shlex.split(command)[0] == "vdbflow":  # the installed command, in this interpreter
                command = f"{shlex.quote(sys.executable)} -m vdbflow.jobs.cli {command[len('vdbflow ') :]}"
            result = subprocess.run(
                command, shell=True, cwd=demo_folder, env=env, capture_output=True, text=True, timeout=600
            )
            assert result.returncode == 0, f"README.md line {line}: {command}\n{result.stdout}\n{result.stderr}"
            ran += 1
    assert ran >= 5
