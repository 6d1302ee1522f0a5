"""docs/architecture.md's two walks (the modules a point and a job go through) are measured, not remembered:
``scripts/walks.py`` runs them, and these tests hold the page's counts and module lists to the measurement, so the
page cannot go stale.  On a failure, ``python scripts/walks.py --markdown`` prints the lines to paste."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import walks  # noqa: E402

PAGE = ROOT / "docs" / "architecture.md"


@pytest.fixture(scope="module")
def stated() -> list[tuple[int, list[str]]]:
    return walks.documented(PAGE.read_text())


def test_the_page_states_two_walks_each_count_matching_its_list(stated):
    assert len(stated) == 2, "docs/architecture.md: expected the point walk and the job walk"
    for count, names in stated:
        assert count == len(names), (count, names)
        assert len(set(names)) == len(names), names


def test_the_reader_takes_the_count_and_names_of_a_walk():
    text = "Measured with `python scripts/walks.py` (warm): **3**\nmodules: `core.volume`, `ops.sampling`,\n"
    text += "`devices`; then the kernel files `cpu_module.cpp`"
    assert walks.documented(text) == [(3, ["core.volume", "ops.sampling", "devices"])]
    assert walks.markdown(["vdbflow.core.volume", "vdbflow.devices"]) == "**2** modules: `core.volume`, `devices`"


def _same(stated: tuple[int, list[str]], measured: list[str]) -> None:
    names = walks.short(measured)
    count, listed = stated
    assert (count, sorted(listed)) == (len(names), sorted(names)), (
        f"docs/architecture.md states {count} modules, scripts/walks.py measures {len(names)}: "
        f"missing from the page {sorted(set(names) - set(listed))}, not walked {sorted(set(listed) - set(names))}; "
        f"the page's line: {walks.markdown(measured)}"
    )


def _measured(walk: str) -> list[str]:
    """A walk measured in a fresh interpreter, as ``scripts/walks.py`` measures it: in the suite's process, what
    earlier tests set up (a log handler, a warning already shown) changes which modules a job enters (under
    pytest-xdist the job walk took 40 modules one run, 38 the next)."""
    code = f"import json, walks; print(json.dumps(walks.{walk}()))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "scripts", capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_point_walk_is_the_one_the_page_states(stated):
    _same(stated[0], _measured("point_walk"))


@pytest.mark.slow
def test_the_job_walk_is_the_one_the_page_states(stated):
    _same(stated[1], _measured("job_walk"))
