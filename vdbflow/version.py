"""The installed distribution's version (``vdbflow.__version__``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("vdbflow")
except PackageNotFoundError:  # pragma: no cover - a source tree without an install
    __version__ = "0+unknown"
