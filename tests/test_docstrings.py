"""Docstrings of the public API: their Examples run (doctest), and every public function keeps the
numpydoc sections "Parameters" and "Returns" (issue 15)."""

from __future__ import annotations

import doctest
import importlib
import inspect

import pytest

import vdbflow

# modules whose docstrings hold runnable examples (>>>)
DOCTEST_MODULES = (
    "vdbflow.core.volume",
    "vdbflow.ops.sampling",
    "vdbflow.ops.hessian",
    "vdbflow.analysis.grid_fields",
    "vdbflow.analysis.flow",
    "vdbflow.io.nanovdb.write",
)

OPTIONS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS

# public methods documented like the functions
VOLUME_METHODS = ("from_voxels", "from_dense", "sample", "sample_grad", "sample_hessian")


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder().find(module, name)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    for test in tests:
        runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0, f"expected examples in {name}, found none"
    assert result.failed == 0, "".join(report)


def _public_functions() -> list[tuple[str, object]]:
    out = []
    for name in vdbflow.__all__:
        obj = getattr(vdbflow, name)
        if inspect.isfunction(obj):
            out.append((name, obj))
    for name in VOLUME_METHODS:
        out.append((f"Volume.{name}", getattr(vdbflow.Volume, name)))
    return out


def _sections(doc: str) -> set[str]:
    """The numpydoc section titles of ``doc``: a line followed by a line of dashes as long."""
    lines = [line.strip() for line in doc.splitlines()]
    return {title for title, rule in zip(lines, lines[1:], strict=False) if title and rule == "-" * len(title)}


def test_public_functions_found() -> None:
    names = {name for name, _ in _public_functions()}
    assert {"sample", "sample_grad", "sample_hessian", "open", "save", "advect", "run"} <= names


@pytest.mark.parametrize(("name", "function"), _public_functions(), ids=lambda v: v if isinstance(v, str) else "")
def test_numpydoc_sections(name: str, function: object) -> None:
    doc = inspect.getdoc(function)
    assert doc, f"{name} has no docstring"
    summary = doc.splitlines()[0]
    assert summary.strip() and not summary.startswith(" "), f"{name}: expected a one-line summary first"
    sections = _sections(doc)
    missing = {"Parameters", "Returns"} - sections
    assert not missing, f"{name}: expected numpydoc sections {sorted(missing)}, found {sorted(sections)}"
    params = {p.name for p in inspect.signature(function).parameters.values() if p.name not in ("self", "cls")}
    undocumented = params - _documented_parameters(doc)
    assert not undocumented, f"{name}: parameters {sorted(undocumented)} are not described under Parameters"


def _documented_parameters(doc: str) -> set[str]:
    """Names of the entries under "Parameters": unindented lines ``name : type`` or ``a, b : type``."""
    lines = doc.splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip() == "Parameters") + 2
    names: set[str] = set()
    for n in range(start, len(lines)):
        line = lines[n]
        if n + 1 < len(lines) and lines[n + 1].strip() and set(lines[n + 1].strip()) == {"-"}:
            break  # the next section's title
        if line and not line[0].isspace():
            names.update(part.strip().lstrip("*") for part in line.split(" : ")[0].split(","))
    return names
