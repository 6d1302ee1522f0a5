"""The installed distribution's version (``vdbflow.__version__``)."""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, distribution, version
from urllib.parse import unquote, urlparse

try:
    __version__ = version("vdbflow")
except PackageNotFoundError:  # pragma: no cover - a source tree without an install
    __version__ = "0+unknown"


def install_hint(extra: str) -> str:
    """The pip command that adds the optional dependencies ``extra`` to this vdbflow, as it was installed
    (vdbflow is not on a package index): ``pip install -e "/path/to/checkout[gpu]"`` for an editable install
    (PEP 610's ``direct_url.json`` names the checkout), ``pip install "/path[gpu]"`` for one from a local
    folder, ``pip install "vdbflow[gpu]"`` for one from an index or a wheel, and ``pip install -e ".[gpu]"``
    (from the checkout) where nothing says."""
    try:
        text = distribution("vdbflow").read_text("direct_url.json")
        found = json.loads(text) if text else None
    except (PackageNotFoundError, ValueError):
        return f'pip install -e ".[{extra}]" (from the vdbflow checkout)'
    if not isinstance(found, dict):
        return f'pip install "vdbflow[{extra}]"'
    url = urlparse(str(found.get("url", "")))
    info = found.get("dir_info")
    if url.scheme == "file" and isinstance(info, dict):
        where = unquote(url.path)
        return f'pip install {"-e " if info.get("editable") else ""}"{where}[{extra}]"'
    return f'pip install "vdbflow[{extra}]"'
