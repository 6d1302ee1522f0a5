"""The documentation site: docs/ builds with Sphinx with warnings as errors (a broken reference, a page left
out of the table of contents, a docstring RST cannot read), and its API reference has every public name."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import vdbflow

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-d", str(out / "doctrees"), str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.slow
def test_every_page_is_built(site):
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    assert len(pages) >= 20
    missing = [p for p in pages if not (site / f"{p}.html").is_file()]
    assert not missing, missing
    index = (site / "index.html").read_text()
    assert all(f'href="{p}.html"' in index for p in pages if p != "index")  # each in the table of contents


@pytest.mark.slow
def test_the_api_reference_documents_every_public_name(site):
    html = (site / "api.html").read_text()
    documented = set(re.findall(r'id="vdbflow\.([A-Za-z_][A-Za-z0-9_]*)"', html))
    missing = [name for name in vdbflow.__all__ if name not in documented]
    assert not missing, missing
    for method in ("sample_grad", "from_dense", "to_zarr"):  # classes come with their methods
        assert f'id="vdbflow.Volume.{method}"' in html
    assert 'id="vdbflow.analysis.flow.VdbflowAccessor.q_criterion"' in html  # the ds.vdbflow accessor
    text = re.sub(r"<[^>]+>", "", html)
    assert "Parameters" in text and "Returns" in text  # numpydoc sections rendered, not left as text
    assert "----------" not in text
